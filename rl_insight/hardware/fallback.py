"""The fallback exporter: what a node without exporters still reports, under the names
the hardware dashboard queries (node_exporter's, DCGM's, npu-exporter's subset)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rl_insight.hardware import smi

log = logging.getLogger(__name__)


class NodeCollector(Collector):
    """node_exporter names from psutil."""

    def collect(self) -> Iterator:
        import psutil

        cpu = CounterMetricFamily("node_cpu_seconds_total",
                                  "Seconds the CPUs spent in each mode.", labels=["cpu", "mode"])
        for i, t in enumerate(psutil.cpu_times(percpu=True)):
            for mode in ("user", "system", "idle", "iowait", "irq", "softirq", "steal",
                         "nice"):
                if hasattr(t, mode):
                    cpu.add_metric([str(i), mode], getattr(t, mode))
        yield cpu
        vm = psutil.virtual_memory()
        yield GaugeMetricFamily("node_memory_MemTotal_bytes", "Memory information field "
                                "MemTotal_bytes.", value=vm.total)
        yield GaugeMetricFamily("node_memory_MemAvailable_bytes", "Memory information field "
                                "MemAvailable_bytes.", value=vm.available)
        load = os.getloadavg()
        yield GaugeMetricFamily("node_load1", "1m load average.", value=load[0])
        rx = CounterMetricFamily("node_network_receive_bytes_total",
                                 "Network device statistic receive_bytes.", labels=["device"])
        tx = CounterMetricFamily("node_network_transmit_bytes_total",
                                 "Network device statistic transmit_bytes.", labels=["device"])
        for dev, c in psutil.net_io_counters(pernic=True).items():
            rx.add_metric([dev], c.bytes_recv)
            tx.add_metric([dev], c.bytes_sent)
        yield rx
        yield tx
        rd = CounterMetricFamily("node_disk_read_bytes_total",
                                 "The total number of bytes read successfully.",
                                 labels=["device"])
        wr = CounterMetricFamily("node_disk_written_bytes_total",
                                 "The total number of bytes written successfully.",
                                 labels=["device"])
        for dev, c in (psutil.disk_io_counters(perdisk=True) or {}).items():
            rd.add_metric([dev], c.read_bytes)
            wr.add_metric([dev], c.write_bytes)
        yield rd
        yield wr


class GpuCollector(Collector):
    """DCGM exporter names from nvidia-smi."""

    def collect(self) -> Iterator:
        gpus = smi.nvidia_gpus()
        if not gpus:
            return
        labels = ["gpu", "UUID", "modelName"]
        fams = {
            "util": GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
                                      labels=labels),
            "mem_used_mib": GaugeMetricFamily("DCGM_FI_DEV_FB_USED",
                                              "Framebuffer memory used (in MiB).",
                                              labels=labels),
            "mem_free_mib": GaugeMetricFamily("DCGM_FI_DEV_FB_FREE",
                                              "Framebuffer memory free (in MiB).",
                                              labels=labels),
            "power_w": GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).",
                                         labels=labels),
            "temp_c": GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).",
                                        labels=labels),
            "sm_clock_mhz": GaugeMetricFamily("DCGM_FI_DEV_SM_CLOCK",
                                              "SM clock frequency (in MHz).", labels=labels),
        }
        for g in gpus:
            for attr, fam in fams.items():
                v = getattr(g, attr)
                if v is not None:
                    fam.add_metric([g.index, g.uuid, g.name], v)
        yield from fams.values()


class NpuCollector(Collector):
    """npu-exporter names from npu-smi."""

    def collect(self) -> Iterator:
        npus = smi.ascend_npus()
        if not npus:
            return
        labels = ["id", "model_name"]
        fams = {
            "aicore": GaugeMetricFamily("npu_chip_info_utilization", "AI Core utilization (%)",
                                        labels=labels),
            "hbm_used_mib": GaugeMetricFamily("npu_chip_info_hbm_used_memory",
                                              "HBM used (MB)", labels=labels),
            "hbm_total_mib": GaugeMetricFamily("npu_chip_info_hbm_total_memory",
                                               "HBM total (MB)", labels=labels),
            "power_w": GaugeMetricFamily("npu_chip_info_power", "Power (W)", labels=labels),
            "temp_c": GaugeMetricFamily("npu_chip_info_temperature", "Temperature (C)",
                                        labels=labels),
        }
        health = GaugeMetricFamily("npu_chip_info_health_status", "1 when healthy",
                                   labels=labels)
        for n in npus:
            for attr, fam in fams.items():
                v = getattr(n, attr)
                if v is not None:
                    fam.add_metric([n.id, n.name], v)
            health.add_metric([n.id, n.name], 1.0 if n.health.upper() == "OK" else 0.0)
        yield from fams.values()
        yield health
