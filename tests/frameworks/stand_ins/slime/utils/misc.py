"""FAKE slime/utils/misc.py (624b824a): ``load_function("module.attr")``, how slime
loads its hooks (--custom-megatron-init-path, --custom-rollout-log-function-path)."""

import importlib
from functools import cache


@cache
def load_function(path):
    module_path, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module_path), attr)
