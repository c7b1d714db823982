"""Parsers for `nvidia-smi` and `npu-smi` output. A missing tool or a line that does not
parse is logged once, clearly, and skipped: hardware monitoring never crashes.

nvidia-smi: ``--query-gpu=index,uuid,name,utilization.gpu,memory.used,memory.free,
power.draw,temperature.gpu,clocks.sm --format=csv,noheader,nounits`` (NVIDIA's
documented query interface). npu-smi: the table of ``npu-smi info`` (Huawei Ascend's
documented output: two lines per NPU, name/health/power/temperature, then
chip/bus/AICore/memory/HBM).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger(__name__)

NVIDIA_FIELDS = ("index", "uuid", "name", "utilization.gpu", "memory.used", "memory.free",
                 "power.draw", "temperature.gpu", "clocks.sm")
NVIDIA_QUERY = ["nvidia-smi", "--query-gpu=" + ",".join(NVIDIA_FIELDS),
                "--format=csv,noheader,nounits"]
_warned: set[str] = set()


def _warn_once(key: str, msg: str, *args) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(msg, *args)


@dataclass
class Gpu:
    index: str
    uuid: str
    name: str
    util: float | None
    mem_used_mib: float | None
    mem_free_mib: float | None
    power_w: float | None
    temp_c: float | None
    sm_clock_mhz: float | None


@dataclass
class Npu:
    id: str
    chip: str
    name: str
    health: str
    power_w: float | None
    temp_c: float | None
    aicore: float | None
    hbm_used_mib: float | None
    hbm_total_mib: float | None


def _num(text: str) -> float | None:
    text = text.strip()
    if text in ("", "N/A", "[N/A]", "[Not Supported]", "-", "NA"):
        return None
    return float(text)


def parse_nvidia_csv(text: str) -> list[Gpu]:
    gpus = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        try:
            if len(parts) != len(NVIDIA_FIELDS):
                raise ValueError(f"{len(parts)} fields, expected {len(NVIDIA_FIELDS)}")
            gpus.append(Gpu(parts[0], parts[1], parts[2], *(_num(p) for p in parts[3:])))
        except ValueError as exc:
            _warn_once(f"nvidia:{lineno}:{line}", "rl-insight: skipping nvidia-smi line %d "
                       "(%s): %r", lineno, exc, line)
    return gpus


_NPU_FIRST = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*(\S+)\s*\|\s*([\d.]+|-|NA)\s+"
                        r"([\d.]+|-|NA)\s+.*\|\s*$")
_NPU_SECOND = re.compile(r"^\|\s*(\d+)\s*\|\s*(\S+)\s*\|\s*([\d.]+|-|NA)\s+"
                         r"([\d.]+|-|NA)\s*/\s*([\d.]+|-|NA)\s+"
                         r"([\d.]+|-|NA)\s*/\s*([\d.]+|-|NA)\s*\|\s*$")


def parse_npu_smi(text: str) -> list[Npu]:
    """The NPU rows of `npu-smi info`: a first line per NPU, then its chip line."""
    npus, pending = [], None
    in_table = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("+===") or line.startswith("+---"):
            in_table = in_table or line.startswith("+===")
            continue
        if not in_table or not line.startswith("|"):
            continue
        if "Process id" in line or "No running processes" in line:
            break  # the process table that follows
        m1 = _NPU_FIRST.match(line)
        if m1 and pending is None:
            pending = m1.groups()
            continue
        m2 = _NPU_SECOND.match(line)
        if m2 and pending is not None:
            npu_id, name, health, power, temp = pending
            chip, bus, aicore, _mu, _mt, hbm_used, hbm_total = m2.groups()
            try:
                npus.append(Npu(npu_id, chip, name, health, _num(power), _num(temp),
                                _num(aicore), _num(hbm_used), _num(hbm_total)))
            except ValueError as exc:
                _warn_once(f"npu:{lineno}", "rl-insight: skipping npu-smi line %d (%s): %r",
                           lineno, exc, line)
            pending = None
            continue
        if line.strip("| ").strip():
            _warn_once(f"npu:{lineno}:{line}", "rl-insight: npu-smi line %d not understood; "
                       "skipped: %r", lineno, line)
            pending = None
    return npus


def run_tool(argv: list[str], timeout: float = 10.0) -> str | None:
    """The tool's stdout, or None (logged once) when it is missing or fails."""
    if shutil.which(argv[0]) is None:
        _warn_once(f"missing:{argv[0]}", "rl-insight: %s not found on this node; its "
                   "metrics are not collected", argv[0])
        return None
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        _warn_once(f"fail:{argv[0]}", "rl-insight: running %s failed: %s", argv[0], exc)
        return None
    if r.returncode != 0:
        _warn_once(f"rc:{argv[0]}", "rl-insight: %s exited with %d: %s", argv[0],
                   r.returncode, r.stderr.strip()[:200])
        return None
    return r.stdout


def nvidia_gpus() -> list[Gpu]:
    out = run_tool(NVIDIA_QUERY)
    return parse_nvidia_csv(out) if out else []


def ascend_npus() -> list[Npu]:
    out = run_tool(["npu-smi", "info"])
    return parse_npu_smi(out) if out else []
