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
