"""Push sinks: the interface (``base.PushSink``) and the built-in logging sink."""

from rl_insight.client.push.sinks.base import PushSink, TagMap
from rl_insight.client.push.sinks.logging import LoggingSink

__all__ = ["LoggingSink", "PushSink", "TagMap"]
