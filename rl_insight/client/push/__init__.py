"""The ``push`` backend: this process's metrics, spans and its rollout engines' metrics
handed to sinks of the user's own (``server.backend: push``, ``push.sinks``), beside the
server path where a server URL or OTLP endpoint is configured.

Built from upstream rl-insight's client after 0.3.0, read in verl-project/rl-insight
(the search index's stored versions; none of it is in a release, 0.3.0 being PyPI's
newest): ``rl_insight/client/push/`` at commits 99ae298f (``sinks/base.py``,
``tags.py``), 8bfafe83 (``driver.py``, ``client.py``), 213541cd (``metric_mapping``),
56d5cb88 (``packs/``, ``rollout_groups``), 9844c33a (``poller.py``), a0c0a451
(``sinks/logging.py``, the backend registered), and its tests under
``tests/monitor/ut/client/push/``. Facts carried over; the code here is ours.

- shape.py: the ``push`` section read and checked (warnings that say what to write)
- sinks/: ``PushSink``, the interface a user's driver implements, at upstream's import
  path ``rl_insight.client.push.sinks.base``; the built-in logging sink
- drivers.py: a sink from its ``driver: "package.module:factory"``
- fanout.py: the client's events as sink calls, stream by stream, on the buffer's thread
- rules.py, poller.py, packs/: the rollout engines' /metrics scraped and translated by
  rule packs (``vllm``, ``tq``) on a thread of their own
"""
