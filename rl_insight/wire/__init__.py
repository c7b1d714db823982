"""The names the client and the server share, each spelled once: what a training process
(the client API, the hub, the lane actors, the adapters, the CLI) and the server (its
routes, intake and analyses) must agree on byte for byte. One module per kind of name:

- attributes.py     span attribute names and values (the lane, the state, the segment)
- paths.py          the server's HTTP paths and headers, the routes and their callers
- events.py         the records a process hands to the hub and the lane actors
- laneid.py         lane ids and what they say (replica of which role, rank, trainer)
- naming.py         Prometheus-safe metric and label names (the ``rl_insight_monitor_``
                    prefix, the raw key's label)
- otlp.py           OTLP values written and OTLP/JSON read
- rank_evidence.py  the span attributes that carry a rank's evidence (its collectives)
- frameworks.py     the names a framework's data crosses with (step timings, imports)
- runconfig.py      a run's configuration as it crosses: body fields, bounds, series

Both sides import these; nothing here imports the rest of the package, so any part may.
tests/test_wire.py fails on any of these values spelled as a literal elsewhere in
rl_insight/ (a value that is also an everyday word a module lists in ``EVERYDAY`` is left
out of that scan); adding a name here adds it to the scan. The values are a public
contract (dashboards, alerts, upstream's callers): change a name's spelling, never its
value."""
