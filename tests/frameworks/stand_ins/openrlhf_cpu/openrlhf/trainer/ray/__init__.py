"""FAKE overlay (README.md): the real package's modules after this folder's, and the real
``__init__`` run here (it re-exports create_vllm_engines and batch_vllm_engine_call)."""
import os
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
_real = next(os.path.join(p, "__init__.py") for p in __path__[1:]
             if os.path.exists(os.path.join(p, "__init__.py")))
with open(_real) as _f:
    exec(compile(_f.read(), _real, "exec"))  # noqa: S102 - OpenRLHF's own __init__
