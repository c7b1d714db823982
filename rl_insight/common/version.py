"""The client API level. verl (0.9.1, ``verl/utils/tracking.py``) compares it with 0.3.0
and turns ``trace_span`` and ``agent_loop_session`` off below it; this package implements
that API, so the package version and the API level are one number."""

__version__ = "0.3.0"
