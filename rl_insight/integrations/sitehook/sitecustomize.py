"""Python runs this at the start of every process whose ``PYTHONPATH`` holds this folder
(``site``'s ``sitecustomize``): the frameworks' modules named by their tables'
``on_import`` are patched when, and only when, the process imports them itself
(rl_insight/integrations/onimport.py), so a launcher's children (prime-rl's trainer
ranks under torchrun, its orchestrator) get the adapter with no line of theirs changed.

A ``sitecustomize`` this one hides (one later on ``sys.path``: a distribution's, a
virtual environment's) is run after it, as Python would have. Never raises: a process
without this package, or with a broken one, starts as it would have without us.
"""

from __future__ import annotations


def _install() -> None:
    try:
        from rl_insight.integrations import onimport

        onimport.install(onimport.framework_patches())
    except Exception:  # monitoring never stops a process from starting
        pass


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows, if any."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    try:
        here = os.path.dirname(os.path.abspath(__file__))
        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None or spec.origin == __file__:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:
        pass


_install()
_chain()
