"""The unit each metric the dashboards plot is reported in, by its source, and the
Grafana unit that shows it as it is (tests/test_dashboards.py holds every panel to it).

A measured case: on an NVIDIA H200, DCGM_FI_DEV_FB_USED read 39,287 and the GPU memory
panel showed 39.3 GB in `decmbytes` (decimal megabytes) where the GPU held 41.2 GB: DCGM and
nvidia-smi report MiB, which is Grafana's `mbytes`.

Grafana's unit ids (grafana/packages/grafana-data/src/valueFormats/categories.ts):
`bytes` (IEC bytes), `mbytes` (mebibytes), `decmbytes` (decimal megabytes), `Bps` (bytes a
second), `MBs` (decimal megabytes a second), `s`, `ms`, `percent` (0-100),
`percentunit` (0-1), `watt`, `celsius`, `short` (a plain number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    pattern: str  # a regex over the metric's name, whole
    unit: str  # the Grafana unit of its value as reported
    source: str  # where the unit is said (project, file or page, version)


SOURCES = (
    # NVIDIA DCGM (dcgm-exporter etc/default-counters.csv, 4.x; DCGM field docs) and this
    # package's fallback from `nvidia-smi --query-gpu=memory.used,...,nounits` (MiB, W, C,
    # %, MHz: nvidia-smi --help-query-gpu)
    Source(r"DCGM_FI_DEV_FB_(USED|FREE)", "mbytes",
           "dcgm-exporter default-counters.csv: framebuffer memory used/free (in MiB)"),
    Source(r"DCGM_FI_DEV_POWER_USAGE", "watt",
           "dcgm-exporter default-counters.csv: power draw (in W)"),
    Source(r"DCGM_FI_DEV_GPU_TEMP", "celsius",
           "dcgm-exporter default-counters.csv: GPU temperature (in C)"),
    Source(r"DCGM_FI_DEV_GPU_UTIL", "percent",
           "dcgm-exporter default-counters.csv: GPU utilization (in %)"),
    # Huawei MindCluster NPU Exporter, Prometheus Metrics API (hiascend.com, mindcluster
    # 6.0.RC2 dlug_api_004): HBM in MB as the driver counts it, 32,255 on a 32 GB (32,768
    # MiB) Atlas 910: mebibytes; power W, temperature C, utilisation %, bandwidth MB/s
    Source(r"npu_chip_info_hbm_(used|total)_memory", "mbytes",
           "MindCluster NPU Exporter metrics API: HBM memory, MB (MiB: 32,255 of 32 GiB)"),
    Source(r"npu_chip_info_power", "watt", "MindCluster NPU Exporter metrics API: power, W"),
    Source(r"npu_chip_info_temperature", "celsius",
           "MindCluster NPU Exporter metrics API: temperature, C"),
    Source(r"npu_chip_info_(utilization|hbm_utilization)", "percent",
           "MindCluster NPU Exporter metrics API: utilisation, %"),
    Source(r"npu_chip_info_bandwidth_(rx|tx)", "MBs",
           "MindCluster NPU Exporter metrics API: network bandwidth, MB/s"),
    # node_exporter (prometheus/node_exporter collector/*: base units, bytes and seconds)
    Source(r"node_(network_(receive|transmit)|disk_(read|written))_bytes_total", "bytes",
           "node_exporter collector/netdev_linux.go, diskstats_linux.go: bytes"),
    Source(r"node_memory_\w+_bytes", "bytes", "node_exporter collector/meminfo.go: bytes"),
    # vLLM-Omni 0.30.0: peak_memory_mb is the peak reserved bytes / 1024**2, mebibytes
    # (vllm_omni/diffusion/worker/diffusion_model_runner.py _sample_peak_memory_mb);
    # transfer sizes in bytes (metrics/definitions.py)
    Source(r"vllm_omni:peak_memory_mb", "mbytes",
           "vllm-omni 0.30.0 diffusion/worker/diffusion_model_runner.py: bytes / 1024**2"),
    Source(r"vllm_omni:transfer_size_bytes(_bucket)?", "bytes",
           "vllm-omni 0.30.0 metrics/definitions.py: transfer size, bytes"),
    # TransferQueue 0.1.11 transfer_queue/metrics.py: process RSS in bytes
    Source(r"tq_\w+_memory_rss_bytes", "bytes",
           "transferqueue 0.1.11 transfer_queue/metrics.py: RSS, bytes"),
    # vLLM 0.33 vllm/v1/metrics/loggers.py, SGLang 0.5.23 metrics_collector.py: KV-cache
    # use as a fraction of 1
    Source(r"vllm:kv_cache_usage_perc|sglang:token_usage", "percentunit",
           "vllm 0.33 v1/metrics/loggers.py, sglang 0.5.23 metrics_collector.py: 0-1"),
    # this package's own series (rl_insight/server/analyses/anatomy.py, changes.py)
    Source(r"rl_insight_step_\w+_seconds", "s", "rl_insight/server/analyses/anatomy.py"),
    Source(r"rl_insight_step_\w+_ratio", "percentunit",
           "rl_insight/server/analyses/anatomy.py, changes.py"),
    Source(r"rl_insight_profile_frame_share", "percentunit",
           "rl_insight/server/analyses/profiles.py: a share of samples, 0-1"),
)
# what a rate of a counter in a unit is shown in
PER_SECOND = {"bytes": "Bps"}
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_RATE = re.compile(r"\b(rate|irate|increase)\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)")


def unit_of(metric: str) -> Source | None:
    return next((s for s in SOURCES if re.fullmatch(s.pattern, metric)), None)


def expected(expr: str) -> tuple[str, list[str]] | None:
    """The unit a query's value is in when it plots one source unit as it is (selected,
    aggregated, or a rate of bytes); None when it computes something else (arithmetic,
    counts, several units). With the metrics it read."""
    if re.search(r"(?<![<>=!])[*/]|\bcount\b|histogram_quantile|\bscalar\b", expr):
        return None
    names = [n for n in _NAME.findall(re.sub(r'"[^"]*"', "", expr)) if unit_of(n)]
    units = {unit_of(n).unit for n in names}
    if len(units) != 1:
        return None
    unit = units.pop()
    rated = {m for _, m in _RATE.findall(expr)}
    if rated & set(names):
        if unit not in PER_SECOND or not set(names) <= rated:
            return None
        unit = PER_SECOND[unit]
    return unit, names
