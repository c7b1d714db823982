"""Patch a framework's module when, and only when, a process imports it itself: an
adapter's hook set once for a whole Ray job (``worker_process_setup_hook``) then costs a
process that never imports the framework nothing, and imports nothing into it (not the
framework, not vLLM or DeepSpeed that the framework would pull in).

The tables name what to patch (``Framework.on_import``: module -> ``package.module:function``);
the function gets the module once it has run, and never raises into the import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys
import threading
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

_wanted: dict[str, list[str]] = {}  # module -> the patch functions' paths
_lock = threading.Lock()


def apply(module: Any, target: str) -> None:
    """Call the patch function ``target`` (``package.module:function``) on ``module``."""
    try:
        where, _, name = target.partition(":")
        getattr(importlib.import_module(where), name)(module)
    except Exception:
        log.warning("rl-insight: patching %s with %s failed; the framework runs "
                    "unmonitored", getattr(module, "__name__", module), target,
                    exc_info=True)


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the patches."""

    def __init__(self, loader: Any, name: str) -> None:
        self.loader, self.name = loader, name

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        for target in _wanted.get(self.name, ()):
            apply(module, target)

    def __getattr__(self, attr: str) -> Any:  # get_source, is_package, ...: the loader's
        return getattr(self.loader, attr)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _wanted:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None


_FINDER = _Finder()


def install(patches: Mapping[str, str]) -> list[str]:
    """Patch each module when it is imported (at once where it already is); returns the
    modules patched now. Installing the same patch twice patches once."""
    now = []
    with _lock:
        for module, target in patches.items():
            targets = _wanted.setdefault(module, [])
            if target in targets:
                continue
            targets.append(target)
            if module in sys.modules:
                now.append((module, target))
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
    for module, target in now:
        apply(sys.modules[module], target)
    return [m for m, _ in now]


def apply_imported(patches: Mapping[str, str]) -> list[str]:
    """Patch the modules of ``patches`` this process imported already, and set no hook
    for later imports: a process whose framework ran before any hook (verl's logger calls
    ``init`` itself, with no worker setup hook in the job) is patched when its run is
    named. Each patch patches once however often it is applied."""
    now = [(m, t) for m, t in patches.items() if m in sys.modules]
    for module, target in now:
        apply(sys.modules[module], target)
    return [m for m, _ in now]


def framework_patches() -> dict[str, str]:
    """Every table's ``on_import``, merged (rl_insight/frameworks/)."""
    from rl_insight import frameworks

    out: dict[str, str] = {}
    for fw in frameworks.FRAMEWORKS.values():
        out.update(fw.on_import)
    return out


def uninstall() -> None:
    """Forget every patch not applied yet (tests)."""
    with _lock:
        _wanted.clear()
        if _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
