"""What a framework's table says, and how it is read: its step key, its timing keys as
parts of a step's anatomy, and its own spans as lanes and states.

Plain data in, plain data out. The client's framework trackers read a table to pick the
step and the timing keys out of each logged dict; the server reads the same tables to
map a framework's own spans (OpenTelemetry, Chrome traces) into lanes and step marks.
A framework is a table (one module of this package each), never a code path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache

# the parts of a step that have a fixed meaning; any other part is a named phase
GENERATE = "generate"  # the policy's rollout generating (no replica breakdown)
WEIGHTS = "update_weights"  # the weight sync to the rollout engines
IDLE = "idle"  # time the framework itself says was spent waiting (not work)
# what a wait waited for (an IDLE key's cause: which side bounds the run,
# rl_insight/anatomy/bound.py, spells its causes with these)
WAITING_FOR_SAMPLES = "waiting_for_samples"  # the trainer starved: the rollout's to make
WAITING_FOR_SYNC = "weight_sync"  # paused for the weight sync
WAITING_FOR_SLOWEST = "waiting_for_slowest"  # a straggler: a slower rank or replica

# lanes a span rule can put a span on
DRIVER = "driver"  # the framework's step loop: the phases it runs one after another
RANK = "rank"  # a trainer rank's lane, rank_<n>: the rank from the span's resource
STEP = "step"  # the step itself: a step mark on lane `trainer`

BUCKETS = ("productive", "overhead", "idle", "wasted")  # NeMo-RL's goodput buckets


@dataclass(frozen=True)
class Timing:
    """A timing key's part of the step; an IDLE key's ``cause``, what it waited for."""

    part: str
    cause: str = ""


def t(part: str, cause: str = "") -> Timing:
    """A timing key that is ``part`` of its step (a wait: what it waited for)."""
    return Timing(part, cause)


@dataclass(frozen=True)
class Headline:
    """A panel of the framework's dashboard: its title, unit and the framework's own keys
    it plots (a key a run's config leaves out is just absent from it)."""

    title: str
    unit: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class SpanRule:
    """Where one of the framework's span names goes: a lane (``DRIVER``, ``RANK`` or
    ``STEP``) and our state name; ``step_attr`` the attribute holding the step number."""

    lane: str
    state: str
    step_attr: str | None = None
    step_offset: int = 0  # added to the attribute's step (a 0-based trace, 1-based logs)


@dataclass(frozen=True, eq=False)  # hashed by identity: one table per framework
class Framework:
    """One framework's table. Keys are as the framework logs them (``perf/rollout_time``);
    a key holding ``*`` matches like a shell pattern (``*/time/compute_advantage``, per
    data domain). Span rules are keyed by span name, or ``<service.name>:<span name>``
    where the same name means different work in different processes."""

    name: str  # rl_insight.integrations name, also the value of `framework` attributes
    title: str
    source: str  # the framework's files and commit (or release) the table was read from
    step_key: str | None = None  # the dict key holding the step number, if any
    # the key of the dict that ends a step, where a step logs several (slime: its perf
    # dict, the training rank's last): only that dict marks the step's end
    step_ends_with: str | None = None
    step_time_key: str | None = None  # the current step's wall time, seconds
    timings: Mapping[str, Timing] = field(default_factory=dict)
    # timing keys that add up others (perf/train_time = log-probs + actor train + ...):
    # kept as scalars, never counted as a part (it would count their time twice)
    containers: frozenset[str] = frozenset()
    # timing keys that lie outside the step's own timer where a dict holds the marker key
    # (SkyRL's fully-async trainer, told by its own timer, saves after its step timer
    # ends; its synchronous trainer inside it): marker -> those keys, kept as scalars.
    # The step-time key among them is then no step time (ROLL's RLVR pipeline logs the
    # step before's as its time/step_total, its agentic pipeline the step's own)
    outside_step: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # timing keys timed inside another part's timer, as the framework's source nests them:
    # the enclosing key -> the keys it encloses. The enclosing key is a part only for what
    # it holds beyond them (its own share), so a step's parts add up to the step and what
    # grew inside it is told once, as itself (NeMo-RL's refit bubble holds its weight sync)
    encloses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    spans: Mapping[str, SpanRule] = field(default_factory=dict)
    scopes: frozenset[str] = frozenset()  # OTLP instrumentation scopes that name it
    # (resource attribute, pattern with one group) giving a span's trainer rank
    rank_from: tuple[str, str] | None = None
    bucket_attr: str | None = None  # the span attribute holding a goodput bucket
    # a framework with no step span: the attribute that tells each event's step (its
    # trace importer makes the step marks from the events that carry it)
    step_from_attr: str | None = None
    key_prefixes: tuple[str, ...] = ()  # key groups its dashboard shows, in order
    headlines: tuple[Headline, ...] = ()  # its dashboard's first panels
    # the framework's own timer names -> our states, for an adapter that marks a rank's
    # lane as the framework's timers run (slime's Timer)
    timers: Mapping[str, str] = field(default_factory=dict)
    engines: str = ""  # the engines its adapter registers (their panels on its dashboard)
    # modules of the framework -> the adapter's function that patches each, called when a
    # process imports the module itself (rl_insight.ray.hooks.worker_setup installs them:
    # never importing the framework, or what it imports, into a process that did not)
    on_import: Mapping[str, str] = field(default_factory=dict)

    def timing(self, key: str) -> Timing | None:
        """The part a logged key is, or None (a scalar like any other)."""
        return _timing(self, key)

    def rule(self, name: str, service: str | None = None) -> SpanRule | None:
        """The rule for a span of this framework (a rule's name may be a pattern)."""
        return _rule(self, name, service or "")

    def rank(self, resource: Mapping[str, object]) -> int | None:
        """The trainer rank a resource says its spans come from."""
        if self.rank_from is None:
            return None
        key, pattern = self.rank_from
        value = resource.get(key)
        if value is None:
            return None
        m = re.fullmatch(pattern, str(value))
        return int(m.group(1)) if m else None


@lru_cache(maxsize=8192)
def _timing(fw: Framework, key: str) -> Timing | None:
    if key in fw.containers or any("*" in c and fnmatchcase(key, c)
                                   for c in fw.containers):
        return None
    hit = fw.timings.get(key)
    if hit is not None:
        return hit
    for pattern, t in fw.timings.items():
        if "*" in pattern and fnmatchcase(key, pattern):
            return t
    return None


@lru_cache(maxsize=8192)
def _rule(fw: Framework, name: str, service: str) -> SpanRule | None:
    for key in ((f"{service}:{name}", name) if service else (name,)):
        hit = fw.spans.get(key)
        if hit is not None:
            return hit
    for key in ((f"{service}:{name}", name) if service else (name,)):
        for pattern, rule in fw.spans.items():
            if "*" in pattern and fnmatchcase(key, pattern):
                return rule
    return None


def timing_values(fw: Framework, items: Iterable[tuple[str, float]]
                  ) -> dict[str, float]:
    """The framework's timing keys among a logged dict's (key, number) pairs, finite and
    not negative (a NaN or a clock jump is no part of a step)."""
    items = list(items)
    outside: set[str] = set()
    if fw.outside_step:
        present = {k for k, _ in items}
        for marker, keys in fw.outside_step.items():
            if marker in present:
                outside |= keys
    out = {}
    for key, value in items:
        wanted = (key == fw.step_time_key or fw.timing(key) is not None) and \
            key not in outside
        if wanted and value == value and 0 <= value < 1e7:
            out[key] = float(value)
    return out


@dataclass
class Parts:
    """A step's anatomy as its timing keys tell it: seconds per part, the step's own
    time when the framework logs one."""

    generate_s: float = 0.0
    weight_update_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # part -> seconds
    idle_s: float = 0.0
    # the IDLE keys by name: what the step waited for, as the framework's timers say
    waits: dict[str, float] = field(default_factory=dict)
    step_s: float | None = None


def own_shares(fw: Framework, values: Mapping[str, float]) -> dict[str, float]:
    """Each timing key's seconds, an enclosing key's (:attr:`Framework.encloses`) only
    what it holds beyond the keys it encloses, never below 0: the time inside it is the
    inner keys' own. Where an inner key is also timed outside it (the framework sums its
    timers), all of it is taken off: the enclosing key's share is then a lower bound, and
    what it held of its own the row's ``other``."""
    out = dict(values)
    for outer, inner in fw.encloses.items():
        if outer in values:
            out[outer] = max(0.0, values[outer] - sum(values.get(k, 0.0) for k in inner))
    return out


def wait_causes(fw: Framework, keys: Iterable[str]) -> dict[str, str]:
    """What each of these wait keys waited for, where the table says (unsaid: none)."""
    out = {}
    for key in keys:
        hit = fw.timing(key)
        if hit is not None and hit.cause:
            out[key] = hit.cause
    return out


def parts(fw: Framework, values: Mapping[str, float]) -> Parts:
    """Sum each key's seconds into its part (several keys may make one part, e.g. a
    data domain each), an enclosing key's own share only (:func:`own_shares`)."""
    out = Parts()
    for key, seconds in own_shares(fw, values).items():
        if key == fw.step_time_key:
            out.step_s = seconds
            continue
        t = fw.timing(key)
        if t is None:
            continue
        if t.part == GENERATE:
            out.generate_s += seconds
        elif t.part == IDLE:
            out.idle_s += seconds
            out.waits[key] = out.waits.get(key, 0.0) + seconds
        else:
            if t.part == WEIGHTS:
                out.weight_update_s += seconds
            out.phases[t.part] = out.phases.get(t.part, 0.0) + seconds
    return out
