"""FAKE overlay (README.md). openrlhf 0.11.2 utils/__init__.py re-exports get_strategy and
get_tokenizer (and math_utils, which needs sympy): the first two, from the stand-ins."""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from openrlhf.utils.utils import get_strategy, get_tokenizer  # noqa: E402,F401
