"""The alerting rules generated for the managed Prometheus: one group, ``rl_insight``,
whose thresholds come from the ``alerts`` settings (plain data here, YAML on disk).

Every per-run alert keeps ``project`` and ``experiment_name`` and, except the engine
alerts, holds only for runs the server counts as active (``rl_insight_experiment_active``),
so a finished run stops alerting at once.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from rl_insight.config import ConfigError, Settings
from rl_insight.wire import laneid

GROUP = "rl_insight"
RULE_FILE = "rl-insight-alerts.yml"
RUN = ("project", "experiment_name")
ACTIVE = "rl_insight_experiment_active == 1"
# the jobs of registered engine and TransferQueue targets (docs/server.md, the target table)
ENGINE_JOBS = ("vllm", "sglang", "vllm_omni", "transfer_queue", "transfer_queue_storage")
# Prometheus' duration syntax (prometheus/common model.ParseDuration)
_DURATION_RE = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
_NAME_RE = re.compile(r"^[a-zA-Z0-9_:]+$")
RUN_LABEL = "{{ $labels.project }}/{{ $labels.experiment_name }}"


def duration(key: str, value: str, nonzero: bool = False) -> str:
    """A Prometheus/Alertmanager duration, checked here so that a typo is a clear error at
    start instead of a service that refuses its config."""
    text = str(value).strip()
    if text == "0" and not nonzero:
        return text
    if not text or not _DURATION_RE.match(text):
        raise ConfigError(f"{key}: expected a duration like 30s, 5m or 1h, got {value!r}")
    if nonzero and not re.search(r"[1-9]", text):
        raise ConfigError(f"{key}: must be longer than 0, got {value!r}")
    return text


def num(x: float) -> str:
    """A PromQL number literal: 3 rather than 3.0, full precision otherwise."""
    return format(float(x), ".15g")


def metric_names(key: str, csv: str) -> list[str]:
    names = [n.strip() for n in csv.split(",") if n.strip()]
    for n in names:
        if not _NAME_RE.match(n):
            raise ConfigError(f"{key}: {n!r} is not a metric name (letters, digits, _ and :)")
    return names


def active(expr: str) -> str:
    """``expr`` only for runs whose status is active."""
    return f"({expr})\nand on({', '.join(RUN)}) {ACTIVE}"


def _rule(name: str, expr: str, for_: str, severity: str, summary: str,
          description: str) -> dict:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def training_stalled(settings: Settings, for_: str) -> dict:
    a = settings.alerts
    # both gauges come from the server's own /metrics (the step anatomy), one series per
    # run with the same labels, so the comparison matches them one to one
    expr = (f"(time() - rl_insight_step_last_end_timestamp_seconds)\n"
            f"> clamp_min({num(a.stall_factor)} * rl_insight_step_median_duration_seconds, "
            f"{num(a.stall_min_s)})")
    return _rule(
        "RLInsightTrainingStalled", active(expr), for_, "critical",
        f"{RUN_LABEL}: no training step has ended for {{{{ $value | humanizeDuration }}}}",
        f"The run's last step ended {{{{ $value | humanizeDuration }}}} ago, over "
        f"{num(a.stall_factor)}x its recent median step time (and at least "
        f"{num(a.stall_min_s)}s). Open the State timeline dashboard to see which replica "
        "or rank is still busy (a hung generate request, a stuck weight sync, a dead "
        "rank), read the trainer's log, and run `rl-insight doctor --project "
        "{{ $labels.project }} --experiment-name {{ $labels.experiment_name }}`.")


def nonfinite_metric(settings: Settings, for_: str) -> dict:
    names = metric_names("alerts.nonfinite_metrics", settings.alerts.nonfinite_metrics)
    selector = f'{{__name__=~"rl_insight_monitor_({"|".join(names)})"}}'
    # the metric's name goes into a label first: comparisons between vectors and abs()
    # match and keep series without their names, so two metrics of one run would collide
    x = f'label_replace({selector}, "metric", "$1", "__name__", "rl_insight_monitor_(.+)")'
    # NaN is the one value != itself; the infinities are compared as they are (abs()
    # would report -Inf as +Inf)
    expr = f"({x} != {x})\nor\n({x} == +Inf)\nor\n({x} == -Inf)"
    return _rule(
        "RLInsightNonFiniteMetric", active(expr), for_, "critical",
        f"{RUN_LABEL}: {{{{ $labels.metric }}}} is {{{{ $value }}}}",
        "The trainer reported a NaN or infinite {{ $labels.metric }}: training has "
        "diverged or a batch is broken. Stop the run or roll back to the last good "
        "checkpoint; check the learning rate, gradient clipping, and the rewards and "
        "advantages of the step where it started (Training overview dashboard).")


def replica_stuck(settings: Settings, for_: str) -> dict:
    a = settings.alerts
    window = duration("alerts.state_stuck_window", a.state_stuck_window, nonzero=True)
    # replica lanes of every role (verl main's <role>_replica_<n> too): rl_insight.wire.laneid
    lane = f'{{state_lane_id=~"{laneid.REPLICA_LANES}"}}'
    key = "project, experiment_name, role, state_lane_id, state_name"
    # per (run, lane, state): a restarted lane actor pushes under another lane_actor, so
    # both sides are aggregated to one series per key before they are compared (the
    # histogram's _sum and _count carry no `le`)
    since = f"max by ({key}) (rl_insight_monitor_lane_state_since_seconds{lane} > 0)"
    usual = (f"sum by ({key}) (increase(rl_insight_monitor_state_duration_seconds_sum{lane}"
             f"[{window}]))\n  / sum by ({key}) (increase("
             f"rl_insight_monitor_state_duration_seconds_count{lane}[{window}]))")
    # a lane reports its current state once a tick, so a state stays on its series up to
    # one client.lane_flush_interval_s after it ended: that much is added to the threshold
    tick = num(settings.client.lane_flush_interval_s)
    expr = (f"(time() - {since})\n> on({key})\nclamp_min({num(a.state_stuck_factor)} * "
            f"(\n  {usual}\n), {num(a.state_stuck_min_s)}) + {tick}")
    return _rule(
        "RLInsightReplicaStuckInState", active(expr), for_, "warning",
        f"{RUN_LABEL}: {{{{ $labels.state_lane_id }}}} has been in "
        "{{ $labels.state_name }} for {{ $value | humanizeDuration }}",
        f"Far longer than usual: over {num(a.state_stuck_factor)}x its mean time in this "
        f"state over the last {window} (and at least {num(a.state_stuck_min_s)}s). Read "
        "that replica's engine log and its Rollout dashboard row: stuck in generate "
        "usually means a hung request or a full KV cache, stuck in wake_up or "
        "resume_kv_cache a failed weight sync.")


def kv_cache_saturated(settings: Settings, for_: str) -> dict:
    m = num(settings.alerts.kv_cache_usage_max)
    # vllm:kv_cache_usage_perc: vLLM 0.33.0 vllm/v1/metrics/loggers.py (gauge, fraction
    # 0..1; vLLM-Omni 0.30 exports the same family); sglang:token_usage: SGLang 0.5.23
    # srt/observability/metrics_collector.py (gauge, fraction of KV tokens in use)
    expr = f"(vllm:kv_cache_usage_perc > {m})\nor\n(sglang:token_usage > {m})"
    return _rule(
        "RLInsightKVCacheSaturated", expr, for_, "warning",
        f"{RUN_LABEL}: {{{{ $labels.job }}}} replica {{{{ $labels.replica }}}} KV cache "
        "{{ $value | humanizePercentage }} full",
        f"Above {m} of the KV cache: new requests wait and running ones are preempted "
        "(vLLM) or retracted (SGLang). Lower max_num_seqs or the rollout batch, raise "
        "gpu_memory_utilization (mem_fraction_static in SGLang), shorten responses, or "
        "add replicas.")


def preemption_burst(settings: Settings, for_: str) -> dict:
    p = num(settings.alerts.preemptions_per_s_max)
    # vllm:num_preemptions_total: vLLM 0.33.0 vllm/v1/metrics/loggers.py (counter).
    # SGLang 0.5.23 has no preemption counter; its gauge sglang:num_retracted_reqs
    # (srt/observability/metrics_collector.py) counts requests retracted for lack of KV
    expr = (f"(rate(vllm:num_preemptions_total[1m]) > {p})\nor\n"
            "(sglang:num_retracted_reqs > 0)")
    return _rule(
        "RLInsightPreemptionBurst", expr, for_, "warning",
        f"{RUN_LABEL}: {{{{ $labels.job }}}} replica {{{{ $labels.replica }}}} preempting "
        "or retracting requests ({{ $value }})",
        f"More than {p} preemptions/s (vLLM) or retracted requests (SGLang): the KV cache "
        "is too small for the load, so work is recomputed. Lower max_num_seqs or the "
        "rollout batch, raise gpu_memory_utilization, or add replicas.")


def target_down(settings: Settings) -> dict:
    for_ = duration("alerts.target_down_for", settings.alerts.target_down_for)
    expr = f'up{{job=~"{"|".join(ENGINE_JOBS)}"}} == 0'
    return _rule(
        "RLInsightTargetDown", active(expr), for_, "warning",
        f"{RUN_LABEL}: {{{{ $labels.job }}}} target {{{{ $labels.instance }}}} is down",
        f"Prometheus has not scraped it for {for_}. If the engine still runs, the "
        "address or a firewall is wrong: `rl-insight server experiments show --project "
        "{{ $labels.project }} --experiment {{ $labels.experiment_name }}` shows "
        "Prometheus' scrape error and `rl-insight doctor` checks the path; if it died, "
        "read its log.")


def dropping_events(settings: Settings, for_: str) -> dict:
    w = duration("alerts.dropped_window", settings.alerts.dropped_window, nonzero=True)
    # the hub's (collector/hub.py), the lane actors' (collector/lanes.py) and the
    # server's own (server/analyses/selfmetrics.py) drop counters; a `counter` label tells them
    # apart, as increase() drops the names
    parts = [f'label_replace(increase({name}[{w}]) > 0, "counter", "{label}", "", "")'
             for name, label in (("rl_insight_hub_events_dropped_total", "hub_events"),
                                 ("rl_insight_lane_spans_dropped_total", "lane_spans"),
                                 ("rl_insight_spans_dropped_total", "server_spans"))]
    return _rule(
        "RLInsightDroppingEvents", "\nor\n".join(parts), for_, "warning",
        f"RL-Insight dropped {{{{ $value }}}} {{{{ $labels.counter }}}} in the last {w}",
        "Monitoring data is being lost: a process's buffer, a lane actor's backlog or the "
        "server's span spool was full, or a series limit was hit. Check `rl-insight "
        "server status` (is Tempo up?) and the Monitoring health dashboard; raise "
        "client.buffer_max_events, client.lane_max_pending_spans, "
        "client.max_series_per_run or traces.spool_max_bytes.")


def step_time_regressed(settings: Settings, for_: str) -> dict:
    """A run's steps slowed and stayed slower (rl_insight/anatomy/changes.py decides it;
    the series: rl_insight/server/analyses/changes.py). The labels that change as the
    ranking does (the cause, the part, the replica or node) stay out of the alert's own,
    so a better ranking is not a new alert: the description reads them."""
    expr = ("max without (signal, cause, part, scope) "
            "(rl_insight_step_regression_seconds) > 0")
    this = ('{project=%q,experiment_name=%q,onset_step=%q}" $labels.project '
            '$labels.experiment_name $labels.onset_step')
    what = ('{{ with printf "rl_insight_step_regression_seconds' + this + ' | query }}'
            '{{ with first . }}')
    signal = what + '{{ .Labels.signal }}{{ end }}{{ end }}'
    cause = (what + 'in {{ .Labels.part }}{{ with .Labels.scope }} on {{ . }}{{ end }}; '
             'first cause: {{ .Labels.cause }}{{ end }}{{ end }}')
    ratio = ('{{ with printf "rl_insight_step_regression_ratio' + this + ' | query }}'
             '{{ with first . }}{{ .Value | humanizePercentage }}{{ end }}{{ end }}')
    return _rule(
        "StepTimeRegressed", active(expr), for_, "warning",
        f"{RUN_LABEL}: steps {{{{ $value | printf \"%.3g\" }}}} s slower ({ratio}) since "
        "step {{ $labels.onset_step }}",
        f"The run's {signal} has stayed {{{{ $value | printf \"%.3g\" }}}} s ({ratio}) "
        f"over its baseline since step {{{{ $labels.onset_step }}}}, {cause}. "
        "Run `rl-insight report --changes --project {{ $labels.project }} "
        "--experiment-name {{ $labels.experiment_name }}` for what moved with it, or open "
        "the What changed section of the Step anatomy dashboard.")


def render(settings: Settings) -> dict:
    """The rule file as plain data."""
    for_ = duration("alerts.pending_for", settings.alerts.pending_for)
    return {"groups": [{"name": GROUP, "rules": [
        training_stalled(settings, for_),
        nonfinite_metric(settings, for_),
        replica_stuck(settings, for_),
        kv_cache_saturated(settings, for_),
        preemption_burst(settings, for_),
        target_down(settings),
        dropping_events(settings, for_),
        step_time_regressed(settings, for_),
    ]}]}


class _Dumper(yaml.SafeDumper):
    """Multi-line expressions as YAML block scalars, so the file reads like PromQL."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def dump(rules: dict) -> str:
    return yaml.dump(rules, Dumper=_Dumper, sort_keys=False, width=100)


def rule_file(settings: Settings) -> Path:
    """Where the rule file is written, beside prometheus.yml."""
    return settings.generated_dir / "prometheus" / RULE_FILE


def write(settings: Settings) -> Path:
    # imported here: the services package imports this module (durations, the rules)
    from rl_insight.common.files import write_atomic

    path = rule_file(settings)
    write_atomic(path, dump(render(settings)))
    return path
