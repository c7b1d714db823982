"""Files shipped inside the package: the Grafana dashboards and the Ray runtime-env files.

They live under the package (package data), so a wheel install has them as well as a
source checkout; callers ask here instead of guessing paths beside the package.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _shipped(*parts: str) -> Path:
    return Path(str(resources.files("rl_insight").joinpath(*parts)))


def dashboards_dir() -> Path:
    """The generated Grafana dashboards (``python -m dashboards.build`` writes them)."""
    return _shipped("dashboards")


def runtime_env_file(template: bool = False) -> Path:
    """``rl_insight.yaml`` (values taken from each node's environment) or the template
    with the values to fill in, for ``ray job submit --runtime-env``."""
    return _shipped("ray", "runtime_env",
                    "rl_insight.template.yaml" if template else "rl_insight.yaml")
