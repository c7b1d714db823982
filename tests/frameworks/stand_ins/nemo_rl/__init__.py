"""FAKE NeMo-RL (NVIDIA-NeMo/RL 7ea279ab): the modules rl_insight.integrations.nemo_rl touches."""
