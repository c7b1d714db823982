"""HTTP routes, one module per concern; each exposes ``router(state)``."""
