"""FAKE overlay (README.md): the real openrlhf's modules, this folder's first."""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
