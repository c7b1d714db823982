"""FAKE prime_rl (PrimeIntellect-ai/prime-rl 559b4477, Python 3.12 and GPUs, not on PyPI):
the modules its trainer and orchestrator use to report, as they are at that commit."""
