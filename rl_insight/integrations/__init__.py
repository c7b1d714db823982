"""RL frameworks beyond verl: the adapter that turns each one's logging on (one module a
framework, importing the framework only when used, calling only the public client API)
and what they share (kit.py, the tracker, the trace-file reader). The frameworks' tables
are data of their own (rl_insight/frameworks/), read here and by the server."""
