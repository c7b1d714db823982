"""The installed package version, read once from its metadata."""

from importlib import metadata

try:
    __version__ = metadata.version("rl-insight")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
