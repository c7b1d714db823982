"""Node hardware: finding exporters on a node, and a fallback that serves CPU, memory,
disk and network (psutil) and GPU or NPU figures (nvidia-smi, npu-smi) under
node_exporter-, DCGM- and npu-exporter-compatible names."""
