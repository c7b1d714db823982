"""What the server holds for a run beside its rows, as candidate series per step for
"what changed" (rl_insight/anatomy/association.py): the trainer's scalars, aligned by
the step the trainer logged with them; each replica's engine metrics and each node's
hardware, averaged over each step's window; and, for a run no longer in memory, its
rows from the ``rl_insight_step_*`` series.

Prometheus answers in points at a resolution; the run's window and resolution are
chosen so that no query asks for more than ``MAX_POINTS`` points a series.
"""

from __future__ import annotations

import bisect
import logging
import statistics
from collections.abc import Callable, Mapping, Sequence

from rl_insight.anatomy.association import (
    Candidate,
    engine_role,
    is_candidate,
    scalar_role,
)
from rl_insight.server.analyses.promapi import ApiUnavailable
from rl_insight.wire.naming import KEY_LABEL, PREFIX

log = logging.getLogger(__name__)
MAX_POINTS = 10_000  # per series per query (Prometheus refuses more than 11,000)
STEP_GAUGE = PREFIX + "step"  # the trainer's step (rl_insight.client.tracking.Tracking)
# the monitor's own series that are no trainer scalar: lane states, the agent loop's,
# the engines' router metrics pushed by Uni-Agent
NOT_SCALARS = ("lane_state", "lanes_in_state", "state_duration_seconds", "agent_loop_")
# engine gauges per replica and whether they can cause a slowdown (the KV cache) or only
# show one (running and waiting requests). Names: vLLM 0.33 vllm/v1/metrics/loggers.py
# and SGLang 0.5.23 srt/observability/metrics_collector.py (../shared/upstream/
# engine-metrics.md), both as served with colons and as prometheus_client >= 0.23 writes
# them when Prometheus negotiates OpenMetrics (colons to underscores)
ENGINE_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                 "vllm:num_requests_waiting", "sglang:token_usage",
                 "sglang:num_running_reqs", "sglang:num_queue_reqs")
# engine counters, as a rate per second: vLLM's preemptions (loggers.py), SGLang's
# retractions (its preemption: metrics_collector.py)
ENGINE_COUNTERS = ("vllm:num_preemptions_total", "sglang:num_retracted_reqs")
# hardware per node, the names the fallback exporter and DCGM's exporter share
# (rl_insight/hardware/fallback.py; NVIDIA dcgm-exporter default-counters.csv)
HARDWARE = ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")

Query = Callable[[str, float, float, float], list[dict]]  # (expr, start, end, step)
Windows = Mapping[int, tuple[float, float]]  # step -> (start, end), unix seconds


def _either(names: Sequence[str]) -> str:
    """A name regex matching each name with colons and with underscores."""
    out = []
    for n in names:
        out.append(n)
        if ":" in n:
            out.append(n.replace(":", "_"))
    return "|".join(out)


def _run(project: str, experiment: str) -> str:
    esc = [v.replace("\\", "\\\\").replace('"', '\\"') for v in (project, experiment)]
    return f'project="{esc[0]}",experiment_name="{esc[1]}"'


def resolution(start: float, end: float, step_s: float, scrape_s: float) -> float:
    """A query step: a third of a training step (at least the scrape interval), never
    more than MAX_POINTS points over the window."""
    return max(scrape_s, step_s / 3.0, (end - start) / MAX_POINTS, 0.001)


def scalars(query: Query, project: str, experiment: str, start: float, end: float,
            res: float, max_series: int) -> list[Candidate]:
    """The trainer's scalars per step: at each point, the value each series had and the
    step gauge of the same push group said (the trainer logs them together)."""
    # the lanes' own series (one per lane and state: thousands at 1,000 GPUs) are no
    # scalars: Prometheus leaves them out rather than this server after the transfer
    others = "|".join(f"{PREFIX}{n}.*" for n in NOT_SCALARS)
    expr = (f'{{__name__=~"{PREFIX}.+",__name__!~"{others}",'
            f'{_run(project, experiment)}}}')
    try:
        result = query(expr, start, end, res)
    except ApiUnavailable as exc:
        log.info("what changed: the trainer's scalars are unavailable (%s)", exc)
        return []
    steps: dict[tuple, dict[float, int]] = {}
    for s in result:
        if s["metric"].get("__name__") == STEP_GAUGE:
            steps[_group(s["metric"])] = {float(t): int(float(v)) for t, v in s["values"]}
    out = []
    for s in result:
        labels = s["metric"]
        name = labels.get("__name__", "")
        if name == STEP_GAUGE or any(k in name for k in NOT_SCALARS):
            continue
        at = steps.get(_group(labels)) or (next(iter(steps.values())) if steps else None)
        if not at:
            continue
        values: dict[int, float] = {}
        for t, v in s["values"]:
            step = at.get(float(t))
            if step is not None:
                values[step] = float(v)  # the last point of a step is its value
        if len(values) < 3:
            continue
        key = labels.get(KEY_LABEL) or name[len(PREFIX):]
        if not is_candidate(key):
            continue
        own = {k: labels[k] for k in ("replica", "node") if labels.get(k)}
        out.append(Candidate(key, "scalar", values, own, scalar_role(key)))
        if len(out) >= max_series:
            break
    return out


def _group(labels: Mapping[str, str]) -> tuple:
    """The push group a series came in: its labels but the name and the raw key."""
    return tuple(sorted((k, v) for k, v in labels.items()
                        if k not in ("__name__", KEY_LABEL)))


def per_step(points: Sequence, windows: Windows) -> dict[int, float]:
    """The mean of the points inside each step's window."""
    times = [float(t) for t, _ in points]
    out = {}
    for step, (a, b) in windows.items():
        lo, hi = bisect.bisect_right(times, a), bisect.bisect_right(times, b)
        vals = [float(points[i][1]) for i in range(lo, hi)]
        vals = [v for v in vals if v == v]  # not NaN
        if vals:
            out[step] = statistics.fmean(vals)
    return out


def engines(query: Query, project: str, experiment: str, windows: Windows, res: float,
            rate_s: float) -> list[Candidate]:
    """Each replica's engine gauges and counter rates, per step."""
    if not windows:
        return []
    start, end = min(a for a, _ in windows.values()), max(b for _, b in windows.values())
    run = _run(project, experiment)
    exprs = [(f'{{__name__=~"{_either(ENGINE_GAUGES)}",{run}}}', None)]
    exprs += [(f'sum by (replica) (rate({{__name__=~"{_either([c])}",{run}}}'
               f'[{max(rate_s, 2 * res):.0f}s]))', c.replace("_total", "")) for c in
              ENGINE_COUNTERS]
    out = []
    for expr, name in exprs:
        try:
            result = query(expr, start, end, res)
        except ApiUnavailable as exc:
            log.info("what changed: engine metrics are unavailable (%s)", exc)
            return out
        by: dict[tuple[str, str], list] = {}
        for s in result:
            metric = name or s["metric"].get("__name__", "")
            rep = s["metric"].get("replica", "")
            by.setdefault((metric, rep), []).extend(s["values"])
        for (metric, rep), points in by.items():
            values = per_step(sorted(points, key=lambda p: float(p[0])), windows)
            if len(values) >= 3:
                out.append(Candidate(metric.replace("_", ":", 1) if ":" not in metric and
                                     metric.startswith(("vllm_", "sglang_")) else metric,
                                     "engine", values, {"replica": rep} if rep else {},
                                     engine_role(metric)))
    return out


def hardware(query: Query, windows: Windows, res: float) -> list[Candidate]:
    """Each node's GPU figures (averaged over its GPUs), per step: every node's, a
    shared cluster's included (the ranking finds the ones that moved with the run)."""
    if not windows:
        return []
    start, end = min(a for a, _ in windows.values()), max(b for _, b in windows.values())
    out = []
    for name in HARDWARE:
        try:
            result = query(f"avg by (node) ({name})", start, end, res)
        except ApiUnavailable as exc:
            log.info("what changed: hardware metrics are unavailable (%s)", exc)
            return out
        for s in result:
            node = s["metric"].get("node", "")
            values = per_step(s["values"], windows)
            if len(values) >= 3:
                out.append(Candidate(name, "hardware", values,
                                     {"node": node} if node else {}))
    return out


# the rl_insight_step_* series a row is made of again (rl_insight/server/analyses/
# anatomy.py exports them, one sample per step at its end)
ROW_SERIES = {"duration_seconds": "duration_s", "other_seconds": "other_s",
              "weight_update_seconds": "weight_update_s",
              "tokens_per_gpu_second": "tokens_per_gpu_second", "number": "step"}


def rows(samples: Callable[[str, float, float], list[dict]], project: str,
         experiment: str, start: float, end: float) -> list[dict]:
    """A finished run's rows from Prometheus' raw samples (``samples(expr, start, end)``:
    every sample of the matching series in the window): its duration, parts, replicas
    and request statistics per step, what ``report --changes`` needs when the server no
    longer holds the run. Every series of a row carries the step's end as its time."""
    got = samples(f'{{__name__=~"rl_insight_step_.+",{_run(project, experiment)}}}',
                  start, end)
    step_at: dict[float, int] = {}
    for s in got:
        if s["metric"].get("__name__") == "rl_insight_step_number":
            for t, v in s["values"]:
                step_at[float(t)] = int(float(v))
    out: dict[int, dict] = {}
    for s in got:
        labels = s["metric"]
        name = labels.get("__name__", "")[len("rl_insight_step_"):]
        for t, v in s["values"]:
            step = step_at.get(float(t))
            if step is not None:
                _put(out.setdefault(step, {"step": step, "end_ns": int(float(t) * 1e9),
                                           "roles": {}, "phases": {}, "replicas": {},
                                           "requests": {}}),
                     name, labels, float(v))
    done = [r for _, r in sorted(out.items()) if "duration_s" in r]
    for r in done:  # the step's window, for the series averaged over it
        r["start_ns"] = r["end_ns"] - int(r["duration_s"] * 1e9)
    return done


def _put(row: dict, name: str, labels: Mapping[str, str], value: float) -> None:
    role = labels.get("role", "")
    if name in ROW_SERIES:
        row[ROW_SERIES[name]] = value
    elif name == "role_generate_seconds":
        row["roles"].setdefault(role, {})["generate_s"] = value
    elif name == "trainer_phase_seconds":
        row["phases"][labels.get("phase", "")] = value
    elif name == "replica_generate_seconds":
        row["replicas"].setdefault(labels.get("replica", ""), {})["generate_s"] = value
    elif name in REQUEST_SERIES:
        row["requests"].setdefault(role, {})[REQUEST_SERIES[name]] = value
    elif name == "request_e2e_seconds":  # e2e_p50_s ... e2e_max_s, as summarize() names
        row["requests"].setdefault(role, {})[f"e2e_{labels.get('quantile', '')}_s"] = value
    elif name == "path_seconds":  # the step's path (rl_insight/anatomy/bound.py)
        _bound(row)["path"][labels.get("part", "")] = value
    elif name == "gpu_cause_seconds":
        role_of = _bound(row)["roles"].setdefault(labels.get("role", ""),
                                                  {"gpu_seconds": {}})
        role_of["gpu_seconds"][labels.get("cause", "")] = value


def _bound(row: dict) -> dict:
    """A row's accounting as far as its series tell it: the path, each role's causes
    (no GPU count, no what-if inputs: those stay with the server that followed it)."""
    return row.setdefault("bound", {"path": {}, "roles": {}, "inputs": None,
                                    "source": "prometheus", "missing": []})


REQUEST_SERIES = {"request_count": "requests", "request_completion_tokens":
                  "completion_tokens", "request_preemptions": "preemptions"}
