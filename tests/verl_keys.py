"""The keys verl 0.9.1's trainer logs, read from its metric code: string constants shaped
like metric keys (``actor/pg_loss``), the literal heads of f-string keys
(``timing_s/{name}`` gives ``timing_s/*``), and the prefixes passed as arguments
(``logging_prefix="global_seqlen"`` gives ``global_seqlen/*``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

# the modules that put keys into the step's metrics dict (verl 0.9.1)
MODULES = ("trainer/ppo/metric_utils.py", "trainer/ppo/ray_trainer.py",
           "trainer/ppo/rollout_corr_helper.py", "trainer/ppo/core_algos.py",
           "trainer/ppo/v1/*.py", "workers/engine_workers.py", "workers/utils/losses.py",
           "workers/engine/utils.py")
KEY = re.compile(r"^[a-z][a-z_\-]*(/[A-Za-z0-9_@.\-]+)+$")
HEAD = re.compile(r"^[a-z][a-z_\-]*/")
PREFIX_ARG = re.compile(r"prefix", re.I)
SECTION = re.compile(r"^val-(core|aux)$")  # process_validation_metrics' sections


def verl_trainer_keys() -> dict[str, str]:
    """Key (or ``head/*`` for a family) -> the verl module it was read from."""
    import verl

    root = Path(verl.__file__).parent
    out: dict[str, str] = {}
    for pattern in MODULES:
        for path in sorted(root.glob(pattern)):
            where = str(path.relative_to(root))
            for node in ast.walk(ast.parse(path.read_text())):
                for key in _keys(node):
                    out.setdefault(key, where)
    return out


def _keys(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if KEY.match(node.value):
            return [node.value]
        if SECTION.match(node.value):
            return [node.value + "/*"]
    if isinstance(node, ast.JoinedStr) and node.values and \
            isinstance(node.values[0], ast.Constant) and HEAD.match(str(node.values[0].value)):
        return [str(node.values[0].value).split("/")[0] + "/*"]
    if isinstance(node, ast.keyword) and node.arg and PREFIX_ARG.search(node.arg) and \
            isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return [node.value.value + "/*"]
    if isinstance(node, ast.arguments):  # def f(..., logging_prefix="global_seqlen")
        args = node.args[len(node.args) - len(node.defaults):] + node.kwonlyargs
        defaults = list(node.defaults) + list(node.kw_defaults)
        return [d.value + "/*" for a, d in zip(args, defaults, strict=False)
                if PREFIX_ARG.search(a.arg) and isinstance(d, ast.Constant)
                and isinstance(d.value, str) and re.match(r"^[a-z][a-z_\-]*$", d.value)]
    return []
