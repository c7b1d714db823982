"""nvidia-smi and npu-smi parsing on the formats those tools document, a missing tool,
malformed lines; and the fallback's node_exporter names."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rl_insight.hardware import fallback, smi
from rl_insight.server.ingest.bodies import parse_registration
from rl_insight.server.ingest.targets import TargetError

# `nvidia-smi --query-gpu=index,uuid,name,utilization.gpu,memory.used,memory.free,
#  power.draw,temperature.gpu,clocks.sm --format=csv,noheader,nounits`
NVIDIA = """0, GPU-5c3a0e8c-1d2b-4f6a-9a7e-3b1c2d4e5f60, NVIDIA H100 80GB HBM3, 87, 61234, 20011, 512.33, 63, 1980
1, GPU-7d4b1f9d-2e3c-5a7b-8b8f-4c2d3e5f6a71, NVIDIA H100 80GB HBM3, 0, 3, 81226, [N/A], 35, 345
"""

# `npu-smi info` on an Atlas 800T A2 (two NPUs), then its process table
NPU = """+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc3                 Version: 23.0.rc3                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.6        40                0    / 0             |
| 0                         | 0000:C1:00.0  | 35          0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | Warning       | 88.1        42                0    / 0             |
| 0                         | 0000:01:00.0  | 0           0    / 0          2830 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
"""


def test_nvidia_smi_csv():
    gpus = smi.parse_nvidia_csv(NVIDIA)
    assert [g.index for g in gpus] == ["0", "1"]
    assert gpus[0].name == "NVIDIA H100 80GB HBM3" and gpus[0].util == 87.0
    assert gpus[0].mem_used_mib == 61234 and gpus[0].power_w == 512.33
    assert gpus[1].power_w is None  # [N/A] is a missing value, not an error


def test_nvidia_smi_malformed_line_is_logged_and_skipped(caplog):
    with caplog.at_level(logging.WARNING):
        gpus = smi.parse_nvidia_csv(NVIDIA + "2, GPU-x, broken\n3, GPU-y, A, eighty, 1, 2, "
                                             "3, 4, 5\n")
    assert [g.index for g in gpus] == ["0", "1"]
    assert "skipping nvidia-smi line 3" in caplog.text
    assert "skipping nvidia-smi line 4" in caplog.text


def test_npu_smi_info_table():
    npus = smi.parse_npu_smi(NPU)
    assert [(n.id, n.name, n.health) for n in npus] == [("0", "910B3", "OK"),
                                                        ("1", "910B3", "Warning")]
    assert npus[0].power_w == 93.6 and npus[0].temp_c == 40 and npus[0].aicore == 35
    assert (npus[0].hbm_used_mib, npus[0].hbm_total_mib) == (3161, 65536)


def test_npu_smi_malformed_line_is_logged_and_skipped(caplog):
    bad = NPU.replace("| 0                         | 0000:01:00.0  | 0           0    / 0   "
                      "       2830 / 65536         |",
                      "| garbage that is not a chip line                                  |")
    with caplog.at_level(logging.WARNING):
        npus = smi.parse_npu_smi(bad)
    assert [n.id for n in npus] == ["0"]
    assert "not understood" in caplog.text


def test_missing_tools_are_logged_once_and_return_nothing(caplog, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    smi._warned.clear()
    with caplog.at_level(logging.WARNING):
        assert smi.nvidia_gpus() == [] and smi.ascend_npus() == []
        assert smi.nvidia_gpus() == []
    assert caplog.text.count("nvidia-smi not found") == 1
    assert "npu-smi not found" in caplog.text


def collected(collector) -> dict:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}


def test_fallback_serves_node_exporter_names():
    fams = collected(fallback.NodeCollector())
    for name in ("node_cpu_seconds", "node_memory_MemTotal_bytes",
                 "node_memory_MemAvailable_bytes", "node_network_receive_bytes",
                 "node_network_transmit_bytes", "node_load1"):
        assert name in fams, name
    modes = {s.labels["mode"] for s in fams["node_cpu_seconds"].samples}
    assert {"idle", "user", "system"} <= modes


def test_fallback_gpu_and_npu_names(monkeypatch):
    monkeypatch.setattr(smi, "nvidia_gpus", lambda: smi.parse_nvidia_csv(NVIDIA))
    monkeypatch.setattr(smi, "ascend_npus", lambda: smi.parse_npu_smi(NPU))
    gpu = collected(fallback.GpuCollector())
    util = {s.labels["gpu"]: s.value for s in gpu["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert util == {"0": 87.0, "1": 0.0}
    assert len(gpu["DCGM_FI_DEV_POWER_USAGE"].samples) == 1  # the [N/A] one is left out
    npu = collected(fallback.NpuCollector())
    assert {s.labels["id"]: s.value for s in npu["npu_chip_info_hbm_used_memory"].samples} \
        == {"0": 3161.0, "1": 2830.0}
    assert {s.labels["id"]: s.value for s in npu["npu_chip_info_health_status"].samples} \
        == {"0": 1.0, "1": 0.0}


def test_hardware_jobs_need_a_node_label():
    ok = parse_registration({"job_name": "dcgm-exporter", "targets": ["10.0.0.5:9400"],
                             "labels": {"node": "gpu-3"}})
    assert dict(ok[0].labels) == {"node": "gpu-3"}
    try:
        parse_registration({"job_name": "node-exporter", "targets": ["10.0.0.5:9100"]})
    except TargetError as exc:
        assert "needs a `node` label" in str(exc)
    else:
        raise AssertionError("a node-exporter target without node was accepted")
