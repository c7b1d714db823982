"""The names and bounds a run's configuration crosses to the server with, spelled once:
the client's hand-over (rl_insight/client/runconfig.py) and the server's route, store
and series (rl_insight/server/ingest/runconfigs.py) read them here."""

from rl_insight.wire.paths import EXPERIMENT_CONFIG

# POST (a hand-over) and GET (a run's) of one run's configuration
CONFIG_PATH = EXPERIMENT_CONFIG

# the body: {"project", "experiment_name", "source", "values", "masked", "cut"}
VALUES = "values"  # dotted key -> str, int, float, bool or None
MASKED = "masked"  # how many values were masked as secrets
CUT = "cut"  # what the bounds left out, by kind (CUT_KINDS)
SOURCE = "source"  # who handed it over: "verl", "trl", "log_config", ...
CUT_KINDS = ("keys", "values", "depth")  # keys left out, values cut short, nodes not entered

MAX_KEYS = 2_000  # keys a run keeps (verl 0.9.1's whole PPO config: 915)
MAX_KEY_CHARS = 256
MAX_VALUE_BYTES = 1_024  # UTF-8 bytes of one value; a longer one is cut, ending TRUNCATED
MAX_RUN_BYTES = 128 * 1024  # keys and values of one run (verl's: 46 KB)
MAX_DEPTH = 24  # nesting entered; deeper containers are one value, counted as cut depth
MAX_NODES = 50_000  # what one flattening visits at most: a bounded time, whatever it is given
MAX_SOURCE_CHARS = 64
MAX_BODY_BYTES = 1024 * 1024  # a hand-over's JSON body at the server

MASK = "***"  # a secret's value
TRUNCATED = "\u2026"  # ends a value cut to MAX_VALUE_BYTES

# the server's /metrics: each run's keys as an info series (a few hundred a run, the keys
# that differ between the project's runs first), values cut for a label
INFO_METRIC = "rl_insight_run_config_info"
KEYS_METRIC = "rl_insight_run_config_keys"
EXPOSED_KEYS = 300
EXPOSED_VALUE_CHARS = 100

# the body's field names are everyday words (other bodies, JSON keys): left out of
# tests/test_wire.py's scan
EVERYDAY = frozenset({"VALUES", "MASKED", "CUT", "SOURCE", "CUT_KINDS"})
