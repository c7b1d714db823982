"""A Python environment with upstream rl-insight 0.3.0 (the real wheel, `make setup`
downloads it into .venv/upstream/) in place of this package: the wheel unpacked into a
venv of its own, whose path then reaches this project's venv for the libraries both use
(Ray, prometheus_client, OpenTelemetry, omegaconf, FastAPI). This project's editable
install is not seen there: that venv's .pth files are not run."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = Path(sys.prefix) / "upstream"
VERSION = "0.3.0"


def wheel() -> Path | None:
    found = sorted(WHEELS.glob(f"rl_insight-{VERSION}-*.whl"))
    return found[0] if found else None


def make(where: Path) -> Path:
    """The environment's python (created once per ``where``)."""
    python = where / "bin" / "python"
    if python.exists():
        return python
    w = wheel()
    if w is None:
        raise RuntimeError(f"no rl-insight {VERSION} wheel in {WHEELS}: run `make setup`")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                "get_paths()['purelib'])"], check=True, capture_output=True,
                               text=True).stdout.strip())
    with zipfile.ZipFile(w) as z:
        z.extractall(site)
    ours = sysconfig.get_paths()["purelib"]  # Ray and the rest, without our package
    (site / "zz_shared_libraries.pth").write_text(ours + "\n")
    return python


DASHBOARDS = "rl_insight/config/services/grafana/dashboards/"


def dashboards() -> dict[str, dict]:
    """The dashboards upstream ships in its wheel (Grafana's v2 schema), by their path
    under ``rl_insight/config/services/grafana/dashboards/``: ``verl/``, ``verl-omni/``,
    ``agent_loop_trajectory/``, ``quick_start_demo/``."""
    import json

    w = wheel()
    if w is None:
        raise RuntimeError(f"no rl-insight {VERSION} wheel in {WHEELS}: run `make setup`")
    with zipfile.ZipFile(w) as z:
        return {n[len(DASHBOARDS):]: json.loads(z.read(n)) for n in z.namelist()
                if n.startswith(DASHBOARDS) and n.endswith(".json")}


def panel_queries(dashboard: dict) -> list[tuple[str, str, str]]:
    """(panel title, datasource group ``prometheus``/``tempo``, expression) of every
    query of every panel, in the file's order."""
    out = []
    for element in dashboard["spec"]["elements"].values():
        spec = element.get("spec", {})
        for q in spec.get("data", {}).get("spec", {}).get("queries", []):
            query = q["spec"]["query"]
            text = query["spec"].get("expr") or query["spec"].get("query") or ""
            if text:
                out.append((spec.get("title", ""), query.get("group", ""), text))
    return out


def variables(dashboard: dict) -> dict[str, str]:
    """Query variables: name -> query (custom variables: their values, comma-separated)."""
    out = {}
    for v in dashboard["spec"].get("variables", []):
        spec = v.get("spec", {})
        query = spec.get("query")
        if isinstance(query, dict):
            query = query.get("spec", {}).get("query") or query.get("spec", {}).get("expr")
        if isinstance(query, str):
            out[spec["name"]] = query
    return out
