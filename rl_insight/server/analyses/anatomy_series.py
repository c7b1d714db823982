"""A step-anatomy row as ``rl_insight_step_*`` families for the server's /metrics, its
labels in a fixed order, its samples stamped with the step's end (one sample per step;
series per run, replica and phase, never per step)."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from rl_insight.anatomy.bound import CAUSES, PATH
from rl_insight.anatomy.rows import StepRow
from rl_insight.anatomy.verdict import VERDICTS

PREFIX = "rl_insight_step_"
RUN = ("project", "experiment_name")
MAX_PHASES = 32
MAX_EXPERT_CELLS = 8192  # tokens-per-expert series a step may export (layers x experts)
GPU_SERIES = (("rank_gpu_busy_seconds", "busy_s"), ("rank_gpu_idle_seconds", "idle_s"),
              ("rank_gpu_comm_seconds", "comm_s"), ("rank_gpu_overlap_seconds", "overlap_s"))


class Families:
    """Builds the families of :meth:`AnatomyStore.collect`, labels in a fixed order."""

    DOCS = {
        "number": "The step these step-anatomy samples describe",
        "duration_seconds": "Wall time from the previous step mark to this one",
        "generate_seconds": "Time any replica of the policy's rollout was generating",
        "other_seconds": "Time no replica of any role generated and no trainer rank was "
                         "busy (driver-side work: reward, advantages, logging)",
        "replica_generate_seconds": "Time this replica was generating",
        "replica_idle_seconds": "Time this replica was not generating",
        "replica_idle_ratio": "Share of the step this replica was not generating",
        "replica_wait_seconds": "Time from this replica's last generation to the slowest "
                                "of its role's",
        "straggler_ratio": "The policy's rollout: slowest replica's generating time over "
                           "the median replica's",
        "slowest_replica": "The policy's rollout replica that generated longest",
        "median_generate_seconds": "The median rollout replica's generating time",
        "role_generate_seconds": "Time any replica of this role was generating",
        "role_straggler_ratio": "This role's slowest replica's generating time over its "
                                "median replica's",
        "role_slowest_replica": "The number of this role's replica that generated longest",
        "role_replicas": "Replica lanes of this role in the step",
        "weight_update_seconds": "Time any trainer rank was in update_weights",
        "trainer_phase_seconds": "Time any trainer rank was in this phase",
        "trainer_busy_seconds": "Time any trainer rank was in some phase",
        "trainer_idle_seconds": "Time no trainer rank was in any phase",
        "trainer_idle_ratio": "Share of the step no trainer rank was in any phase",
        "overlap_seconds": "Time rollout and training ran at once (separate-async)",
        "staleness": "Weight updates the batch the trainer consumed is behind",
        "request_count": "Engine requests of this role that ended in the step",
        "request_e2e_seconds": "End-to-end time of the step's engine requests of this "
                               "role (quantile p50, p90, p99, max)",
        "request_phase_seconds": "Mean time the step's engine requests of this role spent "
                                 "in each phase (queue, prefill, decode)",
        "request_completion_tokens": "Tokens the step's engine requests of this role "
                                     "generated",
        "request_preemptions": "Preemptions of the step's engine requests of this role",
        "tail_share": "Share of the step after 90% of its engine requests had finished",
        "requests_dropped": "Engine request spans of the step the server could not hold "
                            "(over anatomy.max_requests_per_run): its request figures are "
                            "short by these",
        "gpu_seconds": "GPU-seconds of the step per role, busy or idle (weight_sync: the "
                       "ranks' update_weights)",
        "tokens_per_gpu_second": "Tokens generated per GPU-second of the step",
        "wait_seconds": "Time of the step the framework's own timers say it waited, per "
                        "timing key (SkyRL's generation buffer, OpenRLHF's vLLM lock)",
        "bucket_seconds": "Time of the step the framework's own spans put in each goodput "
                          "bucket (productive, overhead, idle, wasted: NeMo-RL's rl.bucket)",
        "from_timing_keys": "1 when this step's anatomy comes from the framework's timing "
                            "keys (no replica breakdown, no straggler), 0 from its lanes",
        "rank_compute_seconds": "Time this trainer rank computed in the step's phases (its "
                                "phase time less its wait; rank=median: the median rank)",
        "rank_wait_seconds": "Time this trainer rank waited for others in the step's phases "
                             "(at their collectives, from torch's Flight Recorder, or from "
                             "the phases' boundaries; rank=median: the median rank)",
        "culprit_rank": "The trainer rank the step waited for (rl_insight/anatomy/ranks.py)",
        "culprit_lead_seconds": "How much longer the culprit rank took than the median other "
                                "rank in its phase",
        "culprit_waited_seconds": "What the median other rank waited for the culprit rank",
        "rank_gpu_busy_seconds": "Time this trainer rank's GPU ran any kernel in the step's "
                                 "phases, from the profiler's kernels (rank=median: the "
                                 "median rank)",
        "rank_gpu_idle_seconds": "Time of the step's phases this trainer rank's GPU ran no "
                                 "kernel (rank=median: the median rank)",
        "rank_gpu_comm_seconds": "Time this trainer rank's GPU ran communication kernels "
                                 "(NCCL, HCCL) in the step's phases (rank=median: the median "
                                 "rank)",
        "rank_gpu_overlap_seconds": "Time this trainer rank's GPU communicated while it also "
                                    "computed (communication hidden under computation; "
                                    "rank=median: the median rank)",
        "gpu_longest_rank": "The trainer rank whose kernels ran longest in the step",
        "gpu_longest_lead_seconds": "How much longer the longest rank's kernels ran than the "
                                    "median rank's",
        "expert_tokens": "Tokens routed to this expert of this MoE layer in the phase, the "
                         "step's ranks summed (msprobe's grouped-matmul dumps)",
        "expert_top_share": "The share of its layer's tokens the step's most loaded expert "
                            "took (1/experts when balanced)",
        "path_seconds": "The step's wall time by what ran (rl_insight/anatomy/bound.py): "
                        "the rollout alone (the trainer waiting for samples), its tail, "
                        "training alone (the rollout waiting for the trainer), both, other "
                        "roles, the weight sync alone, validation, other",
        "gpu_cause_seconds": "GPU-seconds of the step per role by cause (busy, waiting for "
                             "samples, for the slowest, for the trainer, weight sync, asleep, "
                             "startup, validation, other): they add up to the role's GPUs "
                             "times the step",
        "verdict": "1 for the side that bounds the run's newest steps (anatomy."
                   "median_steps of them): rollout-, training-, weight-sync- or tail-bound, "
                   "or balanced; 0 for the others",
        "whatif_step_seconds": "The step time predicted over the run's newest steps with one "
                               "change (rl_insight/anatomy/whatif.py); change=as it is: "
                               "their median as measured",
    }

    def __init__(self) -> None:
        self.families: dict[str, GaugeMetricFamily] = {}

    def add(self, name: str, doc: str, labels: list[str], value: float,
            extra: tuple[str, ...] = (), ts: float | None = None) -> None:
        fam = self.families.get(name)
        if fam is None:
            fam = self.families[name] = GaugeMetricFamily(PREFIX + name, doc,
                                                          labels=[*RUN, *extra])
        fam.add_metric(labels, value, timestamp=ts)

    def row(self, run: list[str], r: StepRow) -> None:
        ts = r.end_ns / 1e9
        one = {"number": r.step, "duration_seconds": r.duration_s,
               "generate_seconds": r.generate_s,
               "other_seconds": max(0.0, r.other_s),
               "weight_update_seconds": r.weight_update_s,
               "trainer_busy_seconds": r.trainer_busy_s,
               "trainer_idle_seconds": r.trainer_idle_s,
               "trainer_idle_ratio": r.trainer_idle_s / r.duration_s if r.duration_s else 0,
               "overlap_seconds": r.overlap_s,
               "from_timing_keys": float(r.source == "timing_keys")}
        if r.straggler_ratio is not None:
            one["straggler_ratio"] = r.straggler_ratio
            one["median_generate_seconds"] = r.median_generate_s
            number = r.slowest_replica.rpartition("_")[2] if r.slowest_replica else ""
            if number.isdigit():
                one["slowest_replica"] = int(number)
        if r.staleness is not None:
            one["staleness"] = r.staleness
        if r.requests_dropped:
            one["requests_dropped"] = r.requests_dropped
        for name, value in one.items():
            self.add(name, self.DOCS[name], run, float(value), ts=ts)
        for rep, v in r.replicas.items():
            for name, value in (("replica_generate_seconds", v.generate_s),
                                ("replica_idle_seconds", v.idle_s),
                                ("replica_idle_ratio",
                                 v.idle_s / r.duration_s if r.duration_s else 0.0),
                                ("replica_wait_seconds", v.wait_s)):
                self.add(name, self.DOCS[name], [*run, rep, v.role], value,
                         ("replica", "role"), ts)
        for role, v in r.roles.items():
            per_role = {"role_generate_seconds": v.generate_s, "role_replicas": v.replicas}
            if v.straggler_ratio is not None:
                per_role["role_straggler_ratio"] = v.straggler_ratio
            slowest = v.slowest_replica.rpartition("_")[2] if v.slowest_replica else ""
            if slowest.isdigit():
                per_role["role_slowest_replica"] = int(slowest)
            for name, value in per_role.items():
                self.add(name, self.DOCS[name], [*run, role], float(value), ("role",), ts)
        for role, q in r.requests.items():
            self.add("request_count", self.DOCS["request_count"], [*run, role],
                     q["requests"], ("role",), ts)
            self.add("request_completion_tokens", self.DOCS["request_completion_tokens"],
                     [*run, role], q["completion_tokens"], ("role",), ts)
            self.add("request_preemptions", self.DOCS["request_preemptions"],
                     [*run, role], q["preemptions"], ("role",), ts)
            for quant in ("p50", "p90", "p99", "max"):
                v = q[f"e2e_{quant}_s"]
                if v is not None:
                    self.add("request_e2e_seconds", self.DOCS["request_e2e_seconds"],
                             [*run, role, quant], v, ("role", "quantile"), ts)
            for phase in ("queue", "prefill", "decode"):
                v = q[f"{phase}_s_mean"]
                if v is not None:
                    self.add("request_phase_seconds", self.DOCS["request_phase_seconds"],
                             [*run, role, phase], v, ("role", "phase"), ts)
        if r.tail_share is not None:
            self.add("tail_share", self.DOCS["tail_share"], run, r.tail_share, ts=ts)
        if r.tokens_per_gpu_second is not None:
            self.add("tokens_per_gpu_second", self.DOCS["tokens_per_gpu_second"], run,
                     r.tokens_per_gpu_second, ts=ts)
        for role, g in r.gpu_seconds.items():
            for use, v in g.items():
                self.add("gpu_seconds", self.DOCS["gpu_seconds"], [*run, role, use], v,
                         ("role", "use"), ts)
        for bucket, seconds in r.buckets.items():
            self.add("bucket_seconds", self.DOCS["bucket_seconds"], [*run, bucket], seconds,
                     ("bucket",), ts)
        for key, seconds in r.waits.items():
            self.add("wait_seconds", self.DOCS["wait_seconds"], [*run, key], seconds,
                     ("wait",), ts)
        self.ranks(run, r, ts)
        self.gpu(run, r, ts)
        self.experts(run, r, ts)
        self.bound(run, r, ts)
        for phase, seconds in sorted(r.phases.items())[:MAX_PHASES]:
            self.add("trainer_phase_seconds", self.DOCS["trainer_phase_seconds"],
                     [*run, phase], seconds, ("phase",), ts)

    def bound(self, run: list[str], r: StepRow, ts: float) -> None:
        """The step's path and its GPU-seconds per role and cause."""
        if r.bound is None:
            return
        for part, seconds in zip(PATH, r.bound.path, strict=True):
            self.add("path_seconds", self.DOCS["path_seconds"], [*run, part], seconds,
                     ("part",), ts)
        for role, rb in r.bound.roles.items():
            for cause, v in zip(CAUSES, rb.causes, strict=True):
                self.add("gpu_cause_seconds", self.DOCS["gpu_cause_seconds"],
                         [*run, role, cause], v, ("role", "cause"), ts)

    def summary(self, run: list[str], s: dict, ts: float) -> None:
        """The verdict and the what-if over the run's newest steps, at its newest step."""
        for v in VERDICTS:
            self.add("verdict", self.DOCS["verdict"], [*run, v],
                     float(s["verdict"] == v), ("verdict",), ts)
        for w in s.get("what_if", []):
            if w.get("known"):
                self.add("whatif_step_seconds", self.DOCS["whatif_step_seconds"],
                         [*run, w["change"], w["kind"]], w["step_s"], ("change", "kind"), ts)

    def ranks(self, run: list[str], r: StepRow, ts: float) -> None:
        """Each kept rank's compute and wait, the median rank's, and the culprit (its
        phase, kind, role, node and GPU as labels: one series per culprit seen)."""
        figures = {**r.ranks, **({"median": r.rank_median} if r.rank_median else {})}
        for rank, v in figures.items():
            for name, key in (("rank_compute_seconds", "compute_s"),
                              ("rank_wait_seconds", "wait_s")):
                self.add(name, self.DOCS[name], [*run, rank], v[key], ("rank",), ts)
        c = r.culprit
        if not c or not str(c.get("rank", "")).isdigit():
            return
        labels = [*run, c["rank"], c.get("phase", ""), c.get("kind", ""),
                  c.get("role", ""), c.get("node", ""), c.get("gpu", "")]
        extra = ("rank", "phase", "kind", "role", "node", "gpu")
        self.add("culprit_rank", self.DOCS["culprit_rank"], labels, float(c["rank"]),
                 extra, ts)
        self.add("culprit_lead_seconds", self.DOCS["culprit_lead_seconds"], labels,
                 c["lead_s"], extra, ts)
        self.add("culprit_waited_seconds", self.DOCS["culprit_waited_seconds"], labels,
                 c["waited_s"], extra, ts)

    def gpu(self, run: list[str], r: StepRow, ts: float) -> None:
        """Each kept rank's GPU busy, idle, communication and overlap, the median rank's,
        and the rank whose kernels ran longest."""
        figures = {**r.gpu_ranks, **({"median": r.gpu_median} if r.gpu_median else {})}
        for rank, v in figures.items():
            for name, key in GPU_SERIES:
                self.add(name, self.DOCS[name], [*run, rank], v[key], ("rank",), ts)
        top = r.gpu_longest
        if top and str(top.get("rank", "")).isdigit():
            self.add("gpu_longest_rank", self.DOCS["gpu_longest_rank"], run,
                     float(top["rank"]), ts=ts)
            self.add("gpu_longest_lead_seconds", self.DOCS["gpu_longest_lead_seconds"], run,
                     top["lead_s"], ts=ts)

    def experts(self, run: list[str], r: StepRow, ts: float) -> None:
        """Tokens per expert per MoE layer of each phase (at most MAX_EXPERT_CELLS a
        step), and the most loaded expert's share."""
        cells = 0
        for phase, s in r.experts.items():
            top = s.get("top")
            if top:
                self.add("expert_top_share", self.DOCS["expert_top_share"],
                         [*run, phase, str(top["layer"]), str(top["expert"])], top["share"],
                         ("phase", "layer", "expert"), ts)
            for layer, tokens in (s.get("layers") or {}).items():
                cells += len(tokens)
                if cells > MAX_EXPERT_CELLS:
                    return
                for expert, t in enumerate(tokens):
                    self.add("expert_tokens", self.DOCS["expert_tokens"],
                             [*run, phase, layer, str(expert)], float(t),
                             ("phase", "layer", "expert"), ts)
