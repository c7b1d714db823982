"""Every panel of every RL-Insight dashboard, each defined once.

A panel is plain data (title, kind, queries, unit); `build.py` lays panels out and
writes Grafana's JSON. Queries use the template variables $project, $experiment_name,
$role (an engine's or a replica lane's role: the policy's rollout, a teacher, a reward
model), $replica, $lane_role and $node, and Grafana's $__rate_interval and $__range.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rl_insight.wire import laneid

RUN = 'project=~"$project",experiment_name=~"$experiment_name"'
# an engine's or a step-anatomy replica's role (rl_insight.wire.laneid): rows repeat per role
ROLE = RUN + ',role=~"$role"'
REPLICA = ROLE + ',replica=~"$replica"'
NODE = 'node=~"$node"'
M = "rl_insight_monitor_"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    datasource: str = "prometheus"  # or "tempo" (then expr is TraceQL)
    table: bool = False  # Prometheus answers as a table (columns: labels and Value)
    instant: bool = False  # one answer at the range's end (a table of the whole range)


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat | state-timeline | bargauge | traces | table
    description: str = ""
    width: int = 12
    height: int = 8
    stack: bool = False
    needs: str = ""  # what must run for data: "", "node-exporter", "dcgm-exporter", ...
    repeat: str = ""  # a variable: Grafana draws the panel once per value of it
    # what the panel says when its queries return nothing (Grafana's "No value" text): a
    # quiet panel says it is quiet, not Grafana's bare "No data"
    quiet: str = ""
    options: dict = field(default_factory=dict, hash=False, compare=False)


def ts(title: str, *queries: Query | tuple[str, str], unit: str = "short",
       description: str = "", **kw) -> Panel:
    qs = tuple(q if isinstance(q, Query) else Query(*q) for q in queries)
    return Panel(title, qs, unit=unit, description=description, **kw)


def gauge_key(key: str) -> str:
    """The exported name of a verl key, as its tracking backend writes it."""
    from rl_insight.wire import naming

    return naming.metric_name(key.replace("/", "_"), "gauge")[0]


def quantiles(metric: str, by: str, sel: str, qs=(0.5, 0.9, 0.99)) -> tuple[Query, ...]:
    return tuple(Query(f"histogram_quantile({q}, sum by (le, {by}) "
                       f"(rate({metric}_bucket{{{sel}}}[$__rate_interval])))",
                       f"p{int(q * 100)} {{{{{by}}}}}") for q in qs)


def per_replica_ratio(numerator: str, denominator: str) -> str:
    """The per-replica ratio of two counters' rates."""
    return (f"sum by (replica) (rate({numerator}{{{REPLICA}}}[$__rate_interval])) / "
            f"sum by (replica) (rate({denominator}{{{REPLICA}}}[$__rate_interval]))")


# -- training ----------------------------------------------------------------------------
def _g(key: str, legend: str | None = None) -> Query:
    return Query(f'{gauge_key(key)}{{{RUN}}}', legend or key)


TRAINING = (
    ts("Reward and score", _g("critic/score/mean"), _g("critic/rewards/mean"),
       description="Mean sequence score and reward per step (critic/score/mean, "
                   "critic/rewards/mean)."),
    ts("Validation", Query(f'{{__name__=~"{M}val_core_.*",{RUN}}}', "{{__name__}}"),
       description="Validation rewards (val-core/*), logged every N steps."),
    ts("Policy loss", _g("actor/pg_loss"), description="actor/pg_loss per step."),
    ts("KL and clip fraction", _g("actor/ppo_kl"), _g("actor/pg_clipfrac"),
       description="PPO KL to the old policy and the clipped fraction."),
    ts("Entropy", _g("actor/entropy")),
    ts("Gradient norm and learning rate", _g("actor/grad_norm"), _g("actor/lr")),
    ts("Response length", _g("response_length/mean"), _g("prompt_length/mean"),
       unit="short"),
    ts("Response clip ratio", _g("response_length/clip_ratio"), unit="percentunit"),
    ts("Step time by phase",
       Query(f'label_replace({{__name__=~"{M}timing_s_.*",__name__!="{M}timing_s_step",'
             f'{RUN}}}, "phase", "$1", "__name__", "{M}timing_s_(.*)")', "{{phase}}"),
       unit="s", stack=True, description="timing_s/* of each step, stacked: where a "
       "step's time goes (gen, old_log_prob, ref, update_actor, update_weights...)."),
    ts("Throughput", _g("perf/throughput", "tokens/s per GPU"), unit="short"),
    ts("Time per step", _g("perf/time_per_step"), unit="s"),
    # verl logs training/global_step in each step's dict; Tracking.log(step=) gives step
    ts("Global step", Query(f'max({M}training_global_step{{{RUN}}} or {M}step{{{RUN}}})',
                            "step"), kind="stat"),
)

def key_prefix(head: str) -> str:
    """The exported prefix of a verl key family: ``rollout_corr`` gives
    ``rl_insight_monitor_rollout_corr_``."""
    return gauge_key(head + "/x")[:-1]


def _keys(*keys: str) -> Query:
    """Several keys in one query, one line each (those a run's config leaves out are just
    absent: verl logs actor/reward_kl_penalty only with a KL penalty in the reward)."""
    names = "|".join(gauge_key(k) for k in keys)
    return Query(f'label_replace({{__name__=~"{names}",{RUN}}}, "key", "$1", "__name__", '
                 f'"{M}(.+)")', "{{key}}")


def _family(head: str) -> Query:
    """Every exported key of a verl family (``rollout_corr/*``), one line each."""
    name = key_prefix(head)
    return Query(f'label_replace({{__name__=~"{name}.+",{RUN}}}, "key", "$1", '
                 f'"__name__", "{name}(.+)")', "{{key}}")


# verl 0.9.1's families beyond the headline scalars (keys read from its metric code:
# verl/trainer/ppo/metric_utils.py, ray_trainer.py, rollout_corr_helper.py,
# workers/utils/losses.py; tests/verl_keys.py reads them, tests/test_dashboards.py checks
# each reaches a panel)
TRAINING_DETAIL = (
    ts("Actor losses", _keys("actor/loss", "actor/pg_loss", "actor/entropy_loss",
                             "actor/kl_loss", "actor/reward_kl_penalty"),
       description="actor/loss (the engine's total), actor/pg_loss, actor/entropy_loss, "
                   "actor/kl_loss (use_kl_loss) and actor/reward_kl_penalty."),
    ts("Actor ratios", _keys("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl",
                             "actor/kl_coef", "actor/reward_kl_penalty_coeff"),
       description="Clipped fractions (upper and lower), PPO KL, the KL loss's and the KL "
                   "penalty's coefficients."),
    ts("Score and reward range", *(_g(f"critic/{k}/{s}") for k in ("score", "rewards")
                                   for s in ("min", "mean", "max")),
       description="critic/score/* and critic/rewards/*: min, mean and max per step."),
    ts("Advantages and returns", *(_g(f"critic/{k}/{s}") for k in ("advantages", "returns")
                                   for s in ("min", "mean", "max"))),
    ts("Critic", _keys("critic/vf_loss", "critic/vf_clipfrac", "critic/vf_explained_var",
                       "critic/vpred_mean", "critic/values/min", "critic/values/mean",
                       "critic/values/max"),
       description="The value function: loss, clip fraction, explained variance, mean "
                   "prediction, values (PPO with a critic; GRPO has none).",
       needs="critic"),
    ts("Rollout correction", _family("rollout_corr"),
       description="rollout_corr/*: importance-sampling weights, rejection fractions and "
                   "the rollout/training mismatch (perplexity, KL); with verl's rollout "
                   "correction on.", needs="rollout-correction"),
    ts("Sequence-length balance", _family("global_seqlen"),
       description="global_seqlen/*: tokens per data-parallel rank after balancing "
                   "(min, max, their difference)."),
    ts("MFU", _keys("perf/mfu/actor", "perf/mfu/critic", "perf/mfu/actor_infer"),
       unit="percentunit", description="Model FLOPs utilisation per role (perf/mfu/*)."),
    ts("Memory", _keys(*(f"{p}perf/{k}" for p in ("", "actor/")
                         for k in ("max_memory_allocated_gb", "max_memory_reserved_gb",
                                   "cpu_memory_used_gb"))), unit="decgbytes",
       description="The trainer's peak GPU memory (allocated, reserved) and CPU memory: "
                   "perf/* (verl's legacy workers) or actor/perf/* (its engine workers, "
                   "whose metrics get the actor/ prefix)."),
    ts("Lengths: min, mean, max", *(_g(f"{k}/{s}") for k in ("response_length",
                                                            "prompt_length")
                                    for s in ("min", "mean", "max"))),
    ts("Non-aborted responses", _family("response_length_non_aborted"),
       _g("response/aborted_ratio"),
       description="response_length_non_aborted/* (lengths of the responses that were "
                   "not aborted) and response/aborted_ratio."),
    ts("Tokens per step", _g("perf/total_num_tokens"),
       description="perf/total_num_tokens: prompt and response tokens of the step's batch "
                   "(perf/throughput divides it by the step time and the GPUs)."),
    ts("Time per token by phase", _family("timing_per_token_ms"), unit="ms",
       description="timing_per_token_ms/*: each phase's time per token."),
    ts("Turns per sample", Query(
        f'label_replace({{__name__=~"{M}(training_)?num_turns_.+",{RUN}}}, "key", "$1", '
        f'"__name__", "{M}(.+)")', "{{key}}"),
       description="Multi-turn rollouts: turns per sample (min, mean, max), as "
                   "num_turns/* (ray_trainer) or training/num_turns/* (the V1 trainer)."),
    ts("Validation (auxiliary)", _family("val-aux"),
       description="val-aux/*: the validation metrics beyond the core ones."),
    ts("Off-policy trajectories", _family("training/off_policy"),
       description="verl's V1 trainer (TransferQueue): how many weight versions a batch's "
                   "trajectories span and how stale they are (training/off_policy/*; "
                   "0 when synchronous).", needs="v1-trainer"),
    ts("Rollout and training probabilities", _keys(
        *(f"training/rollout_probs_diff_{s}" for s in ("max", "mean", "std", "valid")),
        "training/rollout_actor_probs_pearson_corr"),
       description="rollout.calculate_log_probs: the engine's token probabilities against "
                   "the trainer's (the gap that rollout correction addresses).",
       needs="rollout-log-probs"),
)

# -- VeRL-Omni's trainers (tests/verl_omni_keys.py names each key's source): diffusion
# (main_diffusion), diffusion V1 with TransferQueue (main_diffusion_v1), omni (main_omni)
def _exclude(head: str, *others: str) -> Query:
    """A family's keys without the longer families that share its prefix (val/* without
    val-core/* and val-aux/*)."""
    name = key_prefix(head)
    drop = "|".join(key_prefix(o) + ".+" for o in others)
    return Query(f'label_replace({{__name__=~"{name}.+",__name__!~"{drop}",{RUN}}}, "key", '
                 f'"$1", "__name__", "{name}(.+)")', "{{key}}")


IMAGES_PER_GPU = "suffix: img/s/GPU"
DIFFUSION = (
    ts("Reward per image", *(_g(f"critic/rewards/{s}") for s in ("min", "mean", "max")),
       description="critic/rewards/*: each generated image's (or video's) reward, its "
                   "timesteps averaged (diffusion_metric_utils.compute_data_metrics_"
                   "diffusion)."),
    ts("Reward functions", Query(
        f'label_replace({{__name__=~"{M}(critic_reward|train_reward)_.+",{RUN}}}, "fn", '
        f'"$1", "__name__", "{M}(?:critic_reward|train_reward)_(.+)")', "{{fn}}"),
       description="Each reward function of the multi-reward manager: critic/reward/"
                   "<name>/mean (and <name>/<field>), critic/reward/combined/mean, the "
                   "weighted sum that trains."),
    ts("Groups without signal", _g("critic/rewards/zero_std_ratio"), unit="percentunit",
       description="Share of prompts whose images all got the same reward: no advantage, "
                   "no learning from them (critic/rewards/zero_std_ratio)."),
    ts("Reward spread in a group", _g("critic/rewards/std_mean"),
       _g("critic/rewards/group_size"),
       description="Mean within-prompt reward std, and images per prompt (rollout.n)."),
    ts("Throughput", _g("perf/throughput", "images/s per GPU"), unit=IMAGES_PER_GPU,
       description="perf/throughput: images (or videos) generated per second per GPU, "
                   "over every GPU of the run (compute_throughput_metrics_diffusion)."),
    ts("Images per step", _g("perf/total_num_images"),
       description="perf/total_num_images: samples generated in the step (prompts x n)."),
    ts("Time per image by phase", _family("timing_per_image_ms"), unit="ms",
       description="timing_per_image_ms/*: each phase's time per generated image."),
    ts("Step time by phase",
       Query(f'label_replace({{__name__=~"{M}timing_s_.*",__name__!~"{M}timing_s_(step|'
             f'agent_loop_.*)",{RUN}}}, "phase", "$1", "__name__", "{M}timing_s_(.*)")',
             "{{phase}}"),
       unit="s", stack=True, description="timing_s/* per step, stacked (agent-loop "
       "statistics apart: they are per sample)."),
    ts("Agent loop per sample", _family("timing_s/agent_loop"), unit="s",
       description="timing_s/agent_loop/*: per-sample generation and scoring time "
                   "(min, mean, max; num_preempted is a count)."),
    ts("Policy ratio and clipping", _keys("actor/ratio_mean", "actor/ratio_std",
                                          "actor/pg_clipfrac", "actor/pg_clipfrac_higher",
                                          "actor/pg_clipfrac_lower", "actor/ppo_kl"),
       description="FlowGRPO's importance ratio (mean, std), clipped fractions and KL."),
    ts("Losses", _keys("actor/loss", "actor/kl_loss", "actor/kl_coef", "actor/pg_loss"),
       description="actor/loss (the engine's total) and the KL loss with its coefficient."),
    ts("Preference losses (DPO, DiffusionNFT)", _keys(
        "actor/dpo_loss", "actor/implicit_acc", "actor/policy_loss", "actor/positive_loss",
        "actor/negative_loss", "actor/ref_kl_loss", "actor/total_loss", "actor/old_deviate"),
       description="algorithm.trainer_type=direct_preference: the DPO and DiffusionNFT "
                   "losses.", needs="direct-preference"),
    ts("Old policy (DiffusionNFT)", _family("old_policy"),
       description="old_policy/*: whether the old adapter was updated this step, by copy "
                   "or EMA, and the decay.", needs="direct-preference"),
)
DIFFUSION_V1 = (
    ts("Trajectory staleness", _family("training/off_policy/trajectory_staleness"),
       _family("training/off_policy/trajectory_staleness_worst"),
       description="How many trainer steps old the batch's trajectories are (newest and "
                   "worst; VeRL-Omni counts trainer steps, verl's LLM trainer weight "
                   "versions)."),
    ts("Trajectory spans", _family("training/off_policy/trajectory_spans"),
       description="Trainer steps a trajectory's generation spanned."),
    ts("Rollout failures", _family("training/rollout_failure"),
       description="drop_incomplete_groups: failed groups evicted, their trajectories, the "
                   "prompts refilled and the refill rounds (summed over the step)."),
    ts("Dropped, evicted and filtered samples", _keys(
        "training/off_policy/dropped_samples", "training/off_policy/evicted_samples",
        "training/filter_groups/evicted_samples",
        "training/filter_groups/discarded_surplus_samples"),
       _family("training/off_policy/dropped_samples_staleness"),
       description="Samples the replay buffer dropped as too stale, evicted, or filtered "
                   "out with their group."),
)
OMNI_TRAINING = (
    ts("DPO (offline omni)", _keys("actor/dpo_loss", "actor/reward_accuracy",
                                   "actor/reward_margin", "actor/chosen_rewards",
                                   "actor/rejected_rewards"),
       description="The omni DPO trainer's loss, preference accuracy and reward margin.",
       needs="direct-preference"),
    ts("Validation per modality", _exclude("val", "val-core", "val-aux"),
       description="val/* (the omni DPO trainer): per modality (audio, image, video) and "
                   "in all.", needs="direct-preference"),
    ts("Agentic rewards", _family("agentic_reward"),
       description="agentic_reward/* (VeRL-Omni's dev/agentic_rl branch logs them to wandb "
                   "directly; shown here when forwarded through Tracking).",
       needs="agentic-reward"),
)

# -- every trainer key, one click away ---------------------------------------------------------
# One collapsed row per verl key head (the part before the first "/"), holding a panel
# repeated over the run's exported names of that head; the last row holds the names no
# head claims (a key nobody curated, a framework other than verl). The heads are verl
# 0.9.1's (tests/verl_keys.py reads them from its metric code).
TRAINER_HEADS = ("actor", "critic", "perf", "timing_s", "timing_per_token_ms",
                 "response_length", "response_length_non_aborted", "response",
                 "prompt_length", "global_seqlen", "training", "num_turns",
                 "tool_call_counts", "rollout_corr", "rollout", "val-core", "val-aux",
                 "validation", "variance_proxy", "separate_async", "gdpo",
                 # VeRL-Omni's (tests/verl_omni_keys.py): diffusion timings per image, the
                 # DiffusionNFT old policy, omni DPO validation, agentic rewards
                 "timing_per_image_ms", "old_policy", "val", "agentic_reward", "train")
# RL-Insight's own families under the same prefix: on their own dashboards
OWN_FAMILIES = ("lane_state", "lanes_in_state", "state_duration_seconds", "agent_loop_",
                "step")
# Uni-Agent's agent-aware router, through this API (uni_agent/agent_aware_router/types/
# emit_spec.py at f7842723, EMIT_SPECS: name, type, labels): on the agent-loop dashboard
ROUTER_GAUGES = ("prompt_tokens", "prompt_tokens_cached", "external_prefix_cache_hits",
                 "estimated_flops_per_gpu", "kv_cache_usage_perc", "num_requests_running",
                 "num_requests_waiting", "kv_cache_load", "inflight_tokens",
                 "inflight_avg_turn")
ROUTER_COUNTERS = ("dispatched_count", "completed_count", "prompt_len_sum", "kv_evictions")
ROUTER_HISTOGRAMS = ("load", "s_cache", "avail", "need", "remaining",
                     "route_latency_seconds")
ROUTER_NAMES = "|".join(
    [*ROUTER_GAUGES, *(f"{c}_total" for c in ROUTER_COUNTERS),
     *(f"{h}_(bucket|sum|count)" for h in ROUTER_HISTOGRAMS)])


@dataclass(frozen=True)
class KeyGroup:
    title: str
    variable: str
    include: str  # a regex over __name__
    exclude: str = ""

    def selector(self) -> str:
        drop = f',__name__!~"{self.exclude}"' if self.exclude else ""
        return f'{{__name__=~"{self.include}"{drop},{RUN}}}'


def key_groups() -> tuple[KeyGroup, ...]:
    """The groups of the "All trainer metrics" rows: each exported name in exactly one."""
    out = []
    for head in TRAINER_HEADS:
        own = key_prefix(head)
        # a longer head that starts with this one's name has its own row
        longer = [key_prefix(h) for h in TRAINER_HEADS if h != head
                  and key_prefix(h).startswith(own)]
        out.append(KeyGroup(f"{head}/*", "k_" + own[len(M):-1], own + ".+",
                            "|".join(f"{x}.+" for x in longer)))
    claimed = "|".join(key_prefix(h) + ".+" for h in TRAINER_HEADS)
    own = "|".join([M + f + (".*" if f.endswith("_") else "(_.+)?") for f in OWN_FAMILIES]
                   + [f"{M}({ROUTER_NAMES})"])
    out.append(KeyGroup("Other keys", "k_other", M + ".+", f"{claimed}|{own}"))
    return tuple(out)


def key_panel(group: KeyGroup) -> Panel:
    var = "${" + group.variable + "}"
    return Panel(var, (Query(f'{{__name__=~"{var}",{RUN}}}', "{{__name__}}"),),
                 width=6, height=6, repeat=group.variable,
                 description=f"Every key of {group.title} the run logged, one panel each.")


# -- rollout: vLLM (and vLLM-Omni, which serves vLLM's engine metrics) -----------------------
VLLM = (
    ts("Running requests", Query(f"sum by (replica) (vllm:num_requests_running{{{REPLICA}}})",
                                 "replica {{replica}}")),
    ts("Waiting requests", Query(f"sum by (replica) (vllm:num_requests_waiting{{{REPLICA}}})",
                                 "replica {{replica}}")),
    # vLLM < 0.9 spelled it vllm:gpu_cache_usage_perc: either is read
    ts("KV-cache usage", Query(f"max by (replica) (vllm:kv_cache_usage_perc{{{REPLICA}}} or "
                               f"vllm:gpu_cache_usage_perc{{{REPLICA}}})",
                               "replica {{replica}}"), unit="percentunit"),
    ts("Token throughput",
       Query(f"sum by (replica) (rate(vllm:generation_tokens_total{{{REPLICA}}}"
             "[$__rate_interval]))", "generated {{replica}}"),
       Query(f"sum by (replica) (rate(vllm:prompt_tokens_total{{{REPLICA}}}"
             "[$__rate_interval]))", "prompt {{replica}}"), unit="short",
       description="Tokens per second per replica."),
    ts("Time to first token", *quantiles("vllm:time_to_first_token_seconds", "replica",
                                         REPLICA), unit="s"),
    ts("End-to-end request latency", *quantiles("vllm:e2e_request_latency_seconds",
                                                "replica", REPLICA), unit="s"),
    ts("Queue, prefill and decode time (p90)",
       *(Query(f"histogram_quantile(0.9, sum by (le) (rate(vllm:request_{p}_time_seconds_bucket"
               f"{{{REPLICA}}}[$__rate_interval])))", p)
         for p in ("queue", "prefill", "decode")), unit="s"),
    ts("Inter-token latency", *quantiles("vllm:inter_token_latency_seconds", "replica",
                                         REPLICA, (0.5, 0.9)), unit="s"),
    ts("Preemptions", Query(f"sum by (replica) (increase(vllm:num_preemptions_total"
                            f"{{{REPLICA}}}[$__rate_interval]))", "replica {{replica}}")),
    ts("Finished requests by reason",
       Query(f"sum by (finished_reason) (rate(vllm:request_success_total{{{REPLICA}}}"
             "[$__rate_interval]))", "{{finished_reason}}"), unit="reqps"),
    ts("Prefix-cache hit rate",  # vLLM < 0.9: vllm:gpu_prefix_cache_{hits,queries}
       Query(f"sum by (replica) (rate({{__name__=~\"vllm:(gpu_)?prefix_cache_hits_total\","
             f"{REPLICA}}}[$__rate_interval])) / sum by (replica) (rate({{__name__=~"
             f"\"vllm:(gpu_)?prefix_cache_queries_total\",{REPLICA}}}[$__rate_interval]))",
             "replica {{replica}}"), unit="percentunit"),
    ts("Tokens per request (p50)",
       Query(f"histogram_quantile(0.5, sum by (le) (rate(vllm:request_prompt_tokens_bucket"
             f"{{{REPLICA}}}[$__rate_interval])))", "prompt"),
       Query(f"histogram_quantile(0.5, sum by (le) (rate(vllm:request_generation_tokens_bucket"
             f"{{{REPLICA}}}[$__rate_interval])))", "generated"),
       Query(f"histogram_quantile(0.5, sum by (le) (rate(vllm:iteration_tokens_total_bucket"
             f"{{{REPLICA}}}[$__rate_interval])))", "per engine step")),
    ts("Time per output token", *quantiles("vllm:request_time_per_output_token_seconds",
                                           "replica", REPLICA, (0.5, 0.9)), unit="s"),
    ts("Waiting requests by reason",
       Query(f"sum by (reason) (vllm:num_requests_waiting_by_reason{{{REPLICA}}})",
             "{{reason}}"),
       description="capacity: no KV-cache room; deferred: held back by the scheduler."),
    ts("Weight-update operations (p90)",
       Query(f"histogram_quantile(0.9, sum by (le, operation) (rate("
             f"vllm:rl_weight_update_operation_duration_seconds_bucket{{{REPLICA}}}"
             "[$__rate_interval])))", "{{operation}}"), unit="s",
       description="vLLM's own timing of RL weight sync (start, update, finish); vLLM "
                   "exports it with VLLM_SERVER_DEV_MODE=1."),
    ts("Speculative decoding: accepted share",
       Query(per_replica_ratio("vllm:spec_decode_num_accepted_tokens_total",
                               "vllm:spec_decode_num_draft_tokens_total"),
             "all positions {{replica}}"),
       Query(f"sum by (position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total"
             f"{{{REPLICA}}}[$__rate_interval])) / ignoring (position) group_left sum(rate("
             f"vllm:spec_decode_num_drafts_total{{{REPLICA}}}[$__rate_interval]))",
             "position {{position}}"), unit="percentunit",
       description="Share of drafted tokens the target model accepted, overall and per "
                   "draft position; only with speculative decoding configured."),
    ts("Speculative decoding: tokens per draft",
       Query("1 + " + per_replica_ratio("vllm:spec_decode_num_accepted_tokens_total",
                                        "vllm:spec_decode_num_drafts_total"),
             "replica {{replica}}"),
       description="Mean tokens emitted per verification step (1 + accepted per draft)."),
    ts("Engine awake", Query(f'max by (replica) (vllm:engine_sleep_state{{{REPLICA},'
                             f'sleep_state="awake"}})', "replica {{replica}}"),
       kind="state-timeline", width=24, height=6,
       description="1 while the engine is awake; 0 while it sleeps (weights offloaded or "
                   "everything discarded) between generation phases.",
       options={"mappings": {"0": ("asleep", "blue"), "1": ("awake", "green")}}),
)

# -- rollout: vLLM-Omni (vllm-omni 0.30.0, vllm_omni/metrics/: vllm:* labelled stage and the
# engine's own replica, which arrives as engine_replica; its own vllm_omni:* families) ---------
# vLLM's dev-mode routes, and a speculative config vLLM-Omni's LLM stage does not run here
VLLM_ONLY = ("Weight-update operations (p90)", "Speculative decoding: accepted share",
             "Speculative decoding: tokens per draft")
# a synchronous (colocated) run sleeps its engines between generation phases
VLLM_SYNC = (
    ts("Sleep and wake operations (p90)",
       Query(f"histogram_quantile(0.9, sum by (le, operation) (rate("
             f"vllm:sleep_mode_operation_duration_seconds_bucket{{{REPLICA}}}"
             "[$__rate_interval])))", "{{operation}}"), unit="s",
       description="vLLM's own timing of sleep, wake and KV-cache release between "
                   "generation phases; exported with VLLM_SERVER_DEV_MODE=1."),
)


def per_stage(panel: Panel) -> Panel:
    """A vLLM panel split by pipeline stage as well as by RL replica."""
    def split(q: Query) -> Query:
        expr = q.expr.replace("by (replica)", "by (replica, stage)").replace(
            "by (le, replica)", "by (le, replica, stage)")
        return Query(expr, q.legend.replace("{{replica}}", "{{replica}} stage {{stage}}"),
                     q.datasource)
    return replace(panel, queries=tuple(split(q) for q in panel.queries))


VO = "vllm_omni:"
OMNI = (
    ts("Pipeline requests",
       Query(f"sum by (replica) ({VO}num_requests_running{{{REPLICA}}})", "running {{replica}}"),
       Query(f"sum by (replica) ({VO}num_requests_waiting{{{REPLICA}}})", "waiting {{replica}}"),
       description="Requests anywhere in the pipeline, and waiting to enter it."),
    ts("Pipeline end-to-end latency", *quantiles(f"{VO}e2e_request_latency_s", "replica",
                                                 REPLICA), unit="s"),
    ts("Finished and failed requests",
       Query(f"sum by (finished_reason) (rate({VO}requests_success_total{{{REPLICA}}}"
             "[$__rate_interval]))", "{{finished_reason}}"),
       Query(f"sum by (reason) (rate({VO}requests_failed_total{{{REPLICA}}}"
             f'[$__rate_interval])) or label_replace(0 * sum(rate({VO}requests_success_total'
             f'{{{REPLICA}}}[$__rate_interval])), "reason", "none", "", "")',
             "failed: {{reason}}"), unit="reqps",
       description="Failures by reason (client_abort, client_disconnect, stage_error, "
                   "unknown); a 0 line labelled none while nothing fails."),
    ts("Generation time per stage (p90)",
       Query(f"histogram_quantile(0.9, sum by (le, stage, stage_type) (rate("
             f"{VO}stage_gen_time_s_bucket{{{REPLICA}}}[$__rate_interval])))",
             "stage {{stage}} ({{stage_type}})"), unit="s"),
    ts("Waiting per stage",
       Query(f"sum by (stage) ({VO}stage_waiting_requests{{{REPLICA}}})", "stage {{stage}}"),
       Query(f"histogram_quantile(0.9, sum by (le) (rate({VO}request_queue_wait_s_bucket"
             f"{{{REPLICA}}}[$__rate_interval])))", "queue wait p90 (s)")),
    ts("Diffusion time (p90)",
       *(Query(f"histogram_quantile(0.9, sum by (le) (rate({VO}{name}_bucket{{{REPLICA}}}"
               "[$__rate_interval])))", legend)
         for name, legend in (("diffusion_exec_s", "denoising"),
                              ("diffusion_exec_per_step_s", "per denoising step"),
                              ("vae_decode_s", "VAE decode"),
                              ("diffusion_preprocess_s", "preprocess"),
                              ("diffusion_postprocess_s", "postprocess"),
                              ("stage_in_queue_s", "scheduler queue"))), unit="s"),
    ts("Denoise step latency", *quantiles(f"{VO}denoise_step_latency_s", "stage", REPLICA,
                                          (0.5, 0.9)), unit="s"),
    ts("Diffusion steps per request", *quantiles(f"{VO}num_inference_steps", "replica",
                                                 REPLICA, (0.5,))),
    ts("Images generated", Query(f"sum by (replica) (rate({VO}image_count_total{{{REPLICA}}}"
                                 "[$__rate_interval]))", "replica {{replica}}"),
       unit="short"),
    ts("Cross-stage transfer (p90)",
       *(Query(f"histogram_quantile(0.9, sum by (le, from_stage, to_stage) (rate("
               f"{VO}transfer_{name}_s_bucket{{{REPLICA}}}[$__rate_interval])))",
               f"{name} {{{{from_stage}}}}→{{{{to_stage}}}}")
         for name in ("tx", "rx", "in_flight")),
       unit="s"),
    ts("Transfer size (p50)",
       Query(f"histogram_quantile(0.5, sum by (le, from_stage, to_stage) (rate("
             f"{VO}transfer_size_bytes_bucket{{{REPLICA}}}[$__rate_interval])))",
             "{{from_stage}}→{{to_stage}}"), unit="bytes"),
    ts("Peak GPU memory per stage", Query(f"max by (stage) ({VO}peak_memory_mb{{{REPLICA}}})",
                                          "stage {{stage}}"), unit="mbytes"),
)
VLLM_OMNI = tuple(per_stage(p) for p in VLLM if p.title not in VLLM_ONLY) + OMNI

# -- rollout: SGLang ----------------------------------------------------------------------------
SGLANG = (
    ts("Running requests", Query(f"sum by (replica) (sglang:num_running_reqs{{{REPLICA}}})",
                                 "replica {{replica}}")),
    ts("Queued requests", Query(f"sum by (replica) (sglang:num_queue_reqs{{{REPLICA}}})",
                                "replica {{replica}}")),
    ts("Token (KV-cache) usage", Query(f"max by (replica) (sglang:token_usage{{{REPLICA}}})",
                                       "replica {{replica}}"), unit="percentunit"),
    ts("Generation throughput",
       Query(f"sum by (replica) (sglang:gen_throughput{{{REPLICA}}})", "reported {{replica}}"),
       Query(f"sum by (replica) (rate(sglang:generation_tokens_total{{{REPLICA}}}"
             "[$__rate_interval]))", "generated {{replica}}"),
       Query(f"sum by (replica) (rate(sglang:prompt_tokens_total{{{REPLICA}}}"
             "[$__rate_interval]))", "prompt {{replica}}")),
    ts("Time to first token", *quantiles("sglang:time_to_first_token_seconds", "replica",
                                         REPLICA), unit="s"),
    ts("End-to-end request latency", *quantiles("sglang:e2e_request_latency_seconds",
                                                "replica", REPLICA), unit="s"),
    ts("Prefix-cache hit rate", Query(f"avg by (replica) (sglang:cache_hit_rate{{{REPLICA}}})",
                                      "replica {{replica}}"), unit="percentunit"),
    ts("Cached prompt tokens",
       Query(f"sum by (cache_source) (rate(sglang:cached_tokens_total{{{REPLICA}}}"
             "[$__rate_interval]))", "{{cache_source}}"),
       description="Prompt tokens per second served from the prefix cache, by where they "
                   "were found (device, host, storage)."),
    ts("Paused and retracted requests",
       Query(f"sum by (replica) (sglang:num_paused_reqs{{{REPLICA}}})", "paused {{replica}}"),
       Query(f"sum by (replica) (sglang:num_retracted_reqs{{{REPLICA}}})",
             "retracted {{replica}}"),
       description="Paused: held during an asynchronous weight sync. Retracted: sent back "
                   "to the queue for want of KV cache (vLLM's preemptions)."),
    ts("Queue time", *quantiles("sglang:queue_time_seconds", "replica", REPLICA, (0.5, 0.9)),
       unit="s"),
    ts("Inter-token latency", *quantiles("sglang:inter_token_latency_seconds", "replica",
                                         REPLICA, (0.5, 0.9)), unit="s"),
    ts("Latency per request stage (p90)",
       Query(f"histogram_quantile(0.9, sum by (le, stage) (rate("
             f"sglang:per_stage_req_latency_seconds_bucket{{{REPLICA}}}[$__rate_interval])))",
             "{{stage}}"), unit="s"),
)

# -- TransferQueue (transferqueue 0.1.11, transfer_queue/metrics.py: the controller's
# endpoint, job transfer_queue; each storage unit's own, job transfer_queue_storage) -----------
TQ_REQ = '{__name__=~"tq_(controller|storage)_request_%s",' + RUN + "}"
TQ = (
    ts("Partitions", Query(f"max(tq_partitions_total{{{RUN}}})", "partitions"),
       description="Live partitions (verl: train and val)."),
    ts("Samples per partition", Query(f"max by (partition_id) (tq_partition_samples_total"
                                      f"{{{RUN}}})", "{{partition_id}}")),
    ts("Production progress",
       Query(f"min by (partition_id, task_name) (tq_partition_production_progress{{{RUN}}})",
             "{{partition_id}} {{task_name}}"), unit="percentunit",
       description="Share of a partition's samples with data written; task all counts "
                   "every sample."),
    ts("Consumption progress",
       Query(f"min by (partition_id, task_name) (tq_partition_consumption_progress"
             f"{{{RUN}}})", "{{partition_id}} {{task_name}}"), unit="percentunit",
       description="Share of a partition's samples each consumer task has read. Counted "
                   "for readers that name a task (get_meta with task_name); verl 0.9.1's V1 "
                   "trainer reads by key, which shows under samples produced and cleared."),
    ts("Samples produced and cleared",
       Query(f'sum(rate(tq_controller_request_samples_total{{{RUN},'
             f'op_type="NOTIFY_DATA_UPDATE"}}[$__rate_interval]))', "produced"),
       Query(f'sum(rate(tq_controller_request_samples_total{{{RUN},op_type="CLEAR_META"}}'
             "[$__rate_interval]))", "cleared"),
       description="Samples per second written (data updates) and cleared; cleared "
                   "lagging produced means the queue grows."),
    ts("Controller requests", Query(f"sum by (op_type) (rate(tq_controller_request_total"
                                    f"{{{RUN}}}[$__rate_interval]))", "{{op_type}}"),
       unit="reqps"),
    ts("Controller request duration (p99)",
       *quantiles("tq_controller_request_duration_seconds", "op_type", RUN, (0.99,)),
       unit="s"),
    ts("Request errors",
       Query(f"sum by (op_type) (rate({TQ_REQ % 'errors_total'}[$__rate_interval])) or "
             f"0 * sum by (op_type) (rate({TQ_REQ % 'total'}[$__rate_interval]))",
             "{{op_type}}"), unit="reqps",
       description="Failed controller and storage requests per second, by request type "
                   "(0 for each type served without error)."),
    ts("Storage requests", Query(f"sum by (op_type) (rate(tq_storage_request_total{{{RUN}}}"
                                 "[$__rate_interval]))", "{{op_type}}"), unit="reqps",
       description="PUT_DATA, GET_DATA and CLEAR_DATA, from every storage unit's own "
                   "endpoint."),
    ts("Storage request latency (p99)",
       *quantiles("tq_storage_request_duration_seconds", "op_type", RUN, (0.99,)), unit="s"),
    # transferqueue 0.1.11, transfer_queue/metrics.py: gauges the storage units compute
    # themselves and send to the controller (labels storage_unit_id, op_type)
    ts("Storage requests processed (per unit)",
       Query(f"sum by (storage_unit_id, op_type) (tq_storage_request_ops{{{RUN}}})",
             "{{storage_unit_id}} {{op_type}}"),
       description="tq_storage_request_ops: requests each storage unit has completed, by "
                   "type, as the units report them to the controller."),
    ts("Storage request latency (units' own p50, p99)",
       Query(f"max by (storage_unit_id, op_type) (tq_storage_request_latency_p50{{{RUN}}})",
             "p50 {{storage_unit_id}} {{op_type}}"),
       Query(f"max by (storage_unit_id, op_type) (tq_storage_request_latency_p99{{{RUN}}})",
             "p99 {{storage_unit_id}} {{op_type}}"), unit="s"),
    ts("Controller uptime", Query(f"max(tq_controller_uptime_seconds{{{RUN}}})", "uptime"),
       unit="s", kind="stat", width=6, height=5,
       description="tq_controller_uptime_seconds (transferqueue 0.1.11): a drop is a "
                   "restarted controller."),
    ts("Storage keys and capacity",
       Query(f"sum by (storage_unit_id) (tq_storage_active_keys_total{{{RUN}}})",
             "keys {{storage_unit_id}}"),
       Query(f"sum(tq_storage_capacity_total{{{RUN}}})", "capacity (all units)"),
       description="Active keys per storage unit; capacity is reported when "
                   "total_storage_size is set (verl's default: 100000)."),
    ts("Storage utilisation", Query(f"max by (storage_unit_id) (tq_storage_utilization_ratio"
                                    f"{{{RUN}}})", "{{storage_unit_id}}"), unit="percentunit"),
    ts("Global indexes",
       Query(f"max(tq_global_index_allocated_total{{{RUN}}})", "allocated"),
       Query(f"max(tq_global_index_reusable_total{{{RUN}}})", "reusable"),
       description="Sample slots the controller has handed out, and cleared ones "
                   "waiting for reuse."),
    ts("Memory", Query(f"max(tq_controller_memory_rss_bytes{{{RUN}}})", "controller"),
       Query(f"max by (storage_unit_id) (tq_storage_memory_rss_bytes{{{RUN}}})",
             "{{storage_unit_id}}"), unit="bytes"),
)

# -- state timeline: a row of lanes per role (rl_insight.wire.laneid: the policy's rollout,
# reward models, teachers, the trainer ranks), each lane's series labelled with its role
LANE_SECONDS = (f'{M}lane_state_seconds_total{{{RUN},role=~"$lane_role",'
                f'state_lane_id=~"{laneid.DEDICATED_LANES}"}}')


def dominant_state(seconds: str, window: str = "$__interval") -> str:
    """Per lane and interval, the state with the most seconds in it (collector/lanes.py
    STATE_SECONDS), as 1: one state per lane at every instant, and a state shorter than
    a push or a scrape still shows where it held its lane longest. A series new in the
    window counts all of its seconds (``increase`` would need two samples of it)."""
    moved = (f"sum by (state_lane_id, state_name) (({seconds} - {seconds} offset {window}) "
             f"or ({seconds} unless {seconds} offset {window}))")
    return (f"(({moved}) > 0) == on (state_lane_id) group_left "
            f"max by (state_lane_id) ({moved}) > bool 0")


TIMELINE_PROM = (
    ts("Lane states · $lane_role",
       Query(dominant_state(LANE_SECONDS), "{{state_lane_id}} {{state_name}}"),
       kind="state-timeline", width=24, height=10, repeat="lane_role",
       description="Which state each lane of this role was in (replicas of the policy's "
                   "rollout, of a reward model or a teacher; the trainer ranks): per "
                   "interval, the state that held the lane longest, from each lane's "
                   "seconds per state, so a state shorter than the scrape interval shows "
                   "too (works without Tempo; the Tempo timeline below is exact).",
       options={"mappings": {"1": ("in state", "green")}, "repeat_direction": "v"}),
    ts("Time in each state, per lane",
       Query(f"sum by (role, state_lane_id, state_name) (increase("
             f"{M}state_duration_seconds_sum{{{RUN}}}[$__range]))",
             "{{role}} · {{state_lane_id}} {{state_name}}"),
       kind="bargauge", unit="s", width=12, height=12),
    ts("State time share",
       Query(f"sum by (state_name) (rate({M}state_duration_seconds_sum{{{RUN}}}"
             "[$__rate_interval]))", "{{state_name}}"), unit="s", stack=True,
       description="Seconds per second spent in each state, summed over lanes."),
    ts("State duration (p90)",
       *quantiles(f"{M}state_duration_seconds", "state_name", RUN, (0.9,)), unit="s"),
    ts("Pooled lanes in each state",
       Query(f"sum by (state_name) ({M}lanes_in_state{{{RUN}}})", "{{state_name}}"),
       description="Per-request and per-trajectory lanes (agent loops), summarised."),
)
TRACEQL_RUN = ('{ resource.service.name = "rl_insight_monitor" && span.project = "$project" '
               '&& span.experiment_name = "$experiment_name" }')
TIMELINE_TEMPO = (
    ts("State spans (Tempo)",
       Query(TRACEQL_RUN + " | select(span.state_lane_id, span.state_name, span.step)",
             "", "tempo"),
       kind="table", width=24, height=12,
       description="Every state span of the run, exact to the nanosecond, with its lane, "
                   "state and step; a trace id opens the whole trace."),
    ts("Failed states (Tempo)",
       Query('{ resource.service.name = "rl_insight_monitor" && span.project = "$project" '
             '&& span.experiment_name = "$experiment_name" && status = error }', "", "tempo"),
       kind="table", width=24, height=8),
)

# -- step anatomy (server/analyses/anatomy.py: one sample per step, at the step's end) ---
ST = "rl_insight_step_"


def per_step(metric: str, sel: str = RUN, by: str = "") -> str:
    """A step-anatomy series only at the query step just after each step's sample, so a
    bar chart shows one bar per RL step instead of repeating the last one."""
    expr = (f"{ST}{metric}{{{sel}}} and timestamp({ST}{metric}{{{sel}}}) > time() - "
            "$__interval_ms / 1000")
    return f"max by ({by}) ({expr})" if by else expr


NOTHING_CHANGED = "nothing changed"
NOTHING_FIRING = "nothing firing"
# the culprit ranks' and the profiles' tables (issue 49) on a balanced run
BALANCED = "balanced: no step waited for one rank"
NO_PROFILE = "no profile taken: rl-insight profile --rank N, or a change on one rank"
ALERTS_RUN = f'ALERTS{{alertstate="firing",{RUN}}}'
ALERT_PANELS = (
    ts("Alerts firing", Query(f"count({ALERTS_RUN}) or vector(0)", "firing"), kind="stat",
       width=6, description="RL-Insight's alerting rules (training stalled, NaN loss, a "
       "replica stuck, KV-cache saturation, preemption bursts, targets down, dropped "
       "events) firing for this run; `rl-insight alerts` lists them.",
       options={"thresholds": ((None, "green"), (1, "red"))}),
    ts("Firing alerts", Query(f"max by (alertname, state_lane_id, replica, job) "
                              f"({ALERTS_RUN})", "{{alertname}}", table=True),
       kind="table", width=18, needs="alerts", quiet=NOTHING_FIRING,
       description="Each alert firing now, with the lane, replica or target it is about."),
)
ALL_ALERTS = ts("Firing alerts, every run",
                Query('max by (alertname, project, experiment_name, state_lane_id, replica, '
                      'job) (ALERTS{alertstate="firing"})', "{{alertname}}", table=True),
                kind="table", width=24, needs="alerts", quiet=NOTHING_FIRING,
                description="Every RL-Insight alert firing now, across runs; the monitoring's "
                            "own (dropped events) carry no run.")
ANATOMY = (
    ts("Where each step's time went",
       Query(per_step("role_generate_seconds", ROLE, "role"), "{{role}} generating"),
       Query(per_step("trainer_phase_seconds", by="phase"), "{{phase}}"),
       Query(per_step("other_seconds"), "other (driver: reward, advantages, logging)"),
       unit="s", stack=True, width=24, height=10, options={"bars": True},
       description="One stacked bar per step: each role's generating time (the policy's "
                   "rollout, a teacher, a reward model), each trainer phase (union over "
                   "ranks) and the rest. Where roles or rollout and training overlap "
                   "(separate-asynchronous), the bar can exceed the step."),
    ts("Step duration", Query(per_step("duration_seconds"), "step"),
       Query(per_step("weight_update_seconds"), "weight update"), unit="s",
       options={"bars": True},
       description="Wall time from one step mark to the next, and the weight update in it."),
    ts("Straggler ratio", Query(per_step("role_straggler_ratio", ROLE, "role"),
                                "{{role}}: slowest / median replica"),
       options={"bars": True},
       description="Per role, the slowest replica's generating time over the median "
                   "replica's: 1 is balanced; 2 means one replica made the others of its "
                   "role wait as long again. A teacher's straggler is its own, not the "
                   "policy rollout's."),
    ts("Stragglers, step by step",
       Query(per_step("number"), "step", table=True),
       Query(per_step("slowest_replica"), "slowest replica", table=True),
       Query(per_step("straggler_ratio"), "straggler ratio", table=True),
       Query(per_step("median_generate_seconds"), "median generating s", table=True),
       Query(per_step("duration_seconds"), "step s", table=True),
       kind="table", width=24, height=8,
       options={"transformations": [{"id": "joinByField",
                                     "options": {"byField": "Time", "mode": "outer"}}]},
       description="Per step: which replica of the policy's rollout generated longest "
                   "and by how much (each role's own: Straggler ratio)."),
    ts("Replica generating time", Query(per_step("replica_generate_seconds", REPLICA,
                                                 "role, replica"), "{{role}} {{replica}}"),
       unit="s", options={"bars": True}),
    ts("Replica waiting for the straggler",
       Query(per_step("replica_wait_seconds", REPLICA, "role, replica"),
             "{{role}} {{replica}}"),
       unit="s", options={"bars": True},
       description="From a replica's last generation in the step to the slowest one's "
                   "of its role."),
    ts("Idle fraction",
       Query(per_step("replica_idle_ratio", REPLICA, "role, replica"),
             "{{role}} {{replica}}"),
       Query(per_step("trainer_idle_ratio"), "trainer ranks"), unit="percentunit",
       description="Share of each step a replica was not generating, and no trainer rank "
                   "was in a phase."),
    ts("Trainer ranks: compute and wait",
       Query(per_step("rank_compute_seconds", by="rank"), "rank {{rank}} computing"),
       Query(per_step("rank_wait_seconds", by="rank"), "rank {{rank}} waiting"),
       unit="s", width=16, options={"bars": True},
       description="Per step, each trainer rank's time in its phases split into computing "
                   "and waiting for the others (at their collectives, from torch's Flight "
                   "Recorder when TORCH_FR_BUFFER_SIZE is set, else from the phases' "
                   "boundaries); rank \"median\" is the median rank. Ranks that meet at "
                   "every collective end each phase together: the one that waited least "
                   "kept the others waiting. At most the 8 ranks that waited least are "
                   "kept per step."),
    ts("The rank each step waited for",
       Query(per_step("culprit_rank", by="rank, phase, kind, role, node, gpu"),
             "rank", table=True),
       Query(per_step("culprit_lead_seconds", by="rank, phase, kind, role, node, gpu"),
             "longer by (s)", table=True),
       Query(per_step("culprit_waited_seconds", by="rank, phase, kind, role, node, gpu"),
             "the others waited (s)", table=True),
       kind="table", width=8, needs="rank-straggler", quiet=BALANCED,
       options={"transformations": [{"id": "joinByField",
                                     "options": {"byField": "Time", "mode": "outer"}}]},
       description="The culprit: the rank a step waited for, its phase, whether it "
                   "computed longer (compute) or its data came late (input), its role, "
                   "node and GPU. No row: the ranks were balanced. `rl-insight report "
                   "--step N` says why in words."),
    ts("The ranks' code: profiles",
       Query("max by (rank, profile, frame, reason) "
             f"(rl_insight_profile_frame_share{{{RUN}}})", "{{frame}}", table=True),
       kind="table", width=24, height=6, unit="percentunit", needs="rank-straggler",
       quiet=NO_PROFILE,
       description="Each profile of a rank of this run (`rl-insight profile --rank N`, "
                   "or taken by the server when a change lives on one rank: reason "
                   "\"change ...\"): the functions its samples were in, by their own "
                   "share. The whole profile: GET /api/v1/profiles/<profile>/speedscope on "
                   "the RL-Insight server (speedscope and Perfetto open it); `rl-insight "
                   "report --step N` names the culprit's frames too."),
    ts("Rollout and training overlap", Query(per_step("overlap_seconds"), "overlap"),
       unit="s", options={"bars": True},
       description="Separate-asynchronous runs: time rollout and training ran at once."),
    ts("Staleness", Query(per_step("staleness"), "weight updates behind"),
       options={"bars": True},
       description="Weight updates between the start of the generation the trainer "
                   "consumed and the trainer using it: 0 on-policy, 1 one step off."),
)

# -- the ranks' GPUs from an imported profile's kernels (rl_insight/anatomy/gpu.py) and an
# MoE model's expert load from msprobe's dumps (anatomy/experts.py): `rl-insight import
# --profiler ...` makes them; `report --step N` says them in words
PROFILED = "profiler-import"
KERNELS = (
    ts("Trainer ranks' GPUs: busy and idle (profiled steps)",
       Query(per_step("rank_gpu_busy_seconds", by="rank"), "rank {{rank}} busy"),
       Query(per_step("rank_gpu_idle_seconds", by="rank"), "rank {{rank}} idle"),
       unit="s", width=12, options={"bars": True}, needs=PROFILED,
       quiet="no profiled step: rl-insight import --profiler torch|nvtx|mstx",
       description="Per profiled step, each trainer rank's GPU in its phases: busy (any "
                   "kernel or collective ran, on any stream) and idle (no kernel ran), from "
                   "the profiler's own kernels; rank \"median\" is the median rank. At most "
                   "the 8 ranks whose kernels ran longest are kept per step."),
    ts("Communication, and how much of it computation hid",
       Query(per_step("rank_gpu_comm_seconds", by="rank"), "rank {{rank}} communicating"),
       Query(per_step("rank_gpu_overlap_seconds", by="rank"),
             "rank {{rank}} communicating under computation"),
       unit="s", width=12, options={"bars": True}, needs=PROFILED,
       quiet="no profiled step: rl-insight import --profiler torch|nvtx|mstx",
       description="Per profiled step, each rank's time in communication kernels (NCCL, "
                   "HCCL) and the part of it that ran while the GPU also computed; the "
                   "difference is communication nothing hid."),
    ts("The rank whose kernels ran longest",
       Query(per_step("number"), "step", table=True),
       Query(per_step("gpu_longest_rank"), "rank", table=True),
       Query(per_step("gpu_longest_lead_seconds"), "longer than the median rank (s)",
             table=True),
       kind="table", width=8, needs=PROFILED, unit="s",
       quiet="no profiled step: rl-insight import --profiler torch|nvtx|mstx",
       options={"transformations": [{"id": "joinByField",
                                     "options": {"byField": "Time", "mode": "outer"}}]},
       description="Per profiled step, the trainer rank whose kernels ran longest and by "
                   "how much more than the median rank's: a rank that computes more, or "
                   "on a slower GPU."),
    ts("The most loaded expert, step by step",
       Query(per_step("expert_top_share", by="phase, layer, expert"),
             "{{phase}} layer {{layer}} expert {{expert}}", table=True),
       kind="table", width=8, needs=PROFILED, unit="percentunit",
       quiet="no expert load: import verl's msprobe dumps of an MoE model",
       description="Per profiled step and stage, the expert that took the largest share "
                   "of its MoE layer's tokens (balanced: 1 / the layer's experts), from "
                   "the grouped matmul's group_list in msprobe's dumps."),
    ts("Tokens per expert per layer (the newest profiled step)",
       Query(f"max by (phase, layer, expert) (last_over_time({ST}expert_tokens{{{RUN}}}"
             "[$__range]))", "tokens", table=True, instant=True),
       kind="table", width=8, needs=PROFILED,
       quiet="no expert load: import verl's msprobe dumps of an MoE model",
       options={"transformations": [{"id": "groupingToMatrix", "options": {
           "columnField": "expert", "rowField": "layer", "valueField": "Value"}}]},
       description="Upstream RL-Insight's expert heatmap as a table: a row per MoE layer "
                   "(the grouped matmul's calls in order, a layer's repeated call once), a "
                   "column per expert, the tokens routed to it, the step's ranks summed."),
)

# -- which side bounds the run: each step's path and GPU-seconds by role and cause
# (rl_insight/anatomy/bound.py), the verdict and the what-if over the newest steps
# (verdict.py, whatif.py); `rl-insight report --bound` says the same in words
BOUND = (
    ts("Which side bounds the run",
       Query(per_step("verdict", by="verdict") + " == 1", "{{verdict}}"),
       kind="state-timeline", width=24, height=4,
       description="Over the run's newest steps (anatomy.median_steps), the side its wall "
                   "time waited on: rollout-bound (the trainer waited for samples), "
                   "training-bound (the rollout waited for the trainer), weight-sync-bound, "
                   "tail-bound (the wait was mostly the fleet's slowest replicas or longest "
                   "responses) or balanced. `rl-insight report --bound` gives the numbers.",
       options={"mappings": {"1": ("bound", "orange")}}),
    ts("What each step waited on",
       Query(per_step("path_seconds", by="part"), "{{part}}"),
       unit="s", stack=True, width=12, height=9, options={"bars": True},
       description="Each step's wall time cut by what ran, each instant once: the "
                   "rollout alone (the trainer waiting for samples) and its tail (after "
                   "half the replicas had finished), training alone (the rollout waiting "
                   "for the trainer), both at once, other roles (a teacher, a reward "
                   "model), the weight sync alone, validation, and other (the driver's "
                   "own work). The bars add up to the step."),
    ts("Where the GPUs wait: GPU-seconds by role and cause",
       Query(per_step("gpu_cause_seconds", by="role, cause"), "{{role}} {{cause}}"),
       unit="s", stack=True, width=12, height=9, options={"bars": True},
       description="Every GPU-second of each step, per role (the rollout's replicas, "
                   "teachers and reward models, the trainer's ranks) by cause: busy, "
                   "waiting for samples, for the slowest replica or rank, for the trainer, "
                   "in the weight sync, asleep (offloaded by the hybrid engine), starting "
                   "up, validation, other. A role's causes add up to its GPUs times the "
                   "step (GPUs per lane: anatomy.gpus_per_replica, gpus_per_rank; one "
                   "assumed where not told)."),
    ts("What a change would buy",
       Query(f"max by (change) ({ST}whatif_step_seconds{{{RUN}}})", "{{change}}",
             table=True),
       kind="table", width=24, height=7, unit="s",
       quiet="no step of this run accounted yet (a step is, seconds after it ends)",
       description="The step time predicted over the run's newest steps with one change: "
                   "the slowest replica as fast as the median, more or fewer rollout "
                   "replicas, the trainer twice as fast, the weight sync free, the longest "
                   "1 % of responses cut (with the engines' request spans). From each "
                   "step's critical path: a side made faster saves at most what the other "
                   "waited for it. Checked against the runs made again with the change "
                   "(docs/anatomy.md)."),
)

# -- run against run (rl_insight/anatomy/compare.py; `rl-insight compare` ranks the same
# in words, with its significance): run A is $project/$experiment_name, run B
# $project_b/$experiment_b; the dashboard's time range must hold both runs' steps
RUN_B = 'project=~"$project_b",experiment_name=~"$experiment_b"'
CONFIG = "rl_insight_run_config_info"


def _mean_of(metric: str, sel: str, by: str) -> str:
    """A step series' mean over the dashboard's range, per ``by``: the run's mean step."""
    return f"sum by ({by}) (avg_over_time({ST}{metric}{{{sel}}}[$__range]))"


JOIN = {"transformations": [{"id": "merge", "options": {}}]}
RUN_VS_RUN = (
    ts("Step time, A and B", Query(per_step("duration_seconds"), "A: step"),
       Query(per_step("duration_seconds", RUN_B), "B: step"), unit="s", width=24,
       options={"bars": True},
       description="Each run's steps as they ran (the time range must hold both runs); "
                   "`rl-insight compare` says whether the difference is significant "
                   "given each run's own spread."),
    ts("The mean step, part by part",
       Query(_mean_of("path_seconds", RUN, "part"), "A", table=True, instant=True),
       Query(_mean_of("path_seconds", RUN_B, "part"), "B", table=True, instant=True),
       Query(f'{_mean_of("path_seconds", RUN_B, "part")} - '
             f'{_mean_of("path_seconds", RUN, "part")}', "B - A", table=True,
             instant=True),
       kind="table", width=12, height=9, unit="s", options=JOIN,
       description="Each run's mean step cut by what it waited on (the rollout alone, its "
                   "tail, training alone, both at once, other roles, the weight sync, "
                   "validation, other): the parts add up to the mean step, so their "
                   "differences (B - A) add up to the mean step's difference; sort by it "
                   "to rank what it cost."),
    ts("Where each run's GPUs waited",
       Query(_mean_of("gpu_cause_seconds", RUN, "role, cause"), "A", table=True,
             instant=True),
       Query(_mean_of("gpu_cause_seconds", RUN_B, "role, cause"), "B", table=True,
             instant=True),
       kind="table", width=12, height=9, unit="s", options=JOIN,
       description="Each run's mean GPU-seconds a step per role and cause (busy, waiting "
                   "for samples, for the slowest, for the trainer, weight sync, asleep, "
                   "startup, validation, other)."),
    ts("Which side bounds each",
       Query(f"max by (verdict) (last_over_time({ST}verdict{{{RUN}}}[$__range]) == 1)",
             "A: {{verdict}}", table=True, instant=True),
       Query(f"max by (verdict) (last_over_time({ST}verdict{{{RUN_B}}}[$__range]) == 1)",
             "B: {{verdict}}", table=True, instant=True),
       kind="table", width=8, height=6,
       description="The verdict over each run's newest steps: rollout-, training-, "
                   "weight-sync- or tail-bound, or balanced."),
    ts("Tokens per GPU-second",
       Query(_mean_of("tokens_per_gpu_second", RUN, "experiment_name"), "A", table=True,
             instant=True),
       Query(_mean_of("tokens_per_gpu_second", RUN_B, "experiment_name"), "B",
             table=True, instant=True),
       kind="table", width=8, height=6, needs="engine-traces",
       description="Tokens generated per GPU-second, each run's mean over its steps (with "
                   "the engines' request spans)."),
    ts("Request latency p90",
       Query(_mean_of("request_e2e_seconds", RUN + ',quantile="p90"', "role"), "A",
             table=True, instant=True),
       Query(_mean_of("request_e2e_seconds", RUN_B + ',quantile="p90"', "role"), "B",
             table=True, instant=True),
       kind="table", width=8, height=6, unit="s", needs="engine-traces",
       description="The engines' requests' p90 end to end, per role, each run's mean over "
                   "its steps (with the engines' request spans)."),
    ts("Configuration: the keys that differ",
       Query(f"max by (key, value) ({CONFIG}{{{RUN}}} unless on (key, value) "
             f"{CONFIG}{{{RUN_B}}})", "A", table=True, instant=True),
       Query(f"max by (key, value) ({CONFIG}{{{RUN_B}}} unless on (key, value) "
             f"{CONFIG}{{{RUN}}})", "B", table=True, instant=True),
       kind="table", width=24, height=9, needs="config", quiet="the same configuration",
       description="Each configuration key whose value differs between the runs (or is "
                   "in one only), with each run's value: what each framework hands its "
                   "tracker, flattened, secrets masked (docs/client.md)."),
)

# -- what changed: a run's sustained regressions, found as its steps are finalized
# (rl_insight/anatomy/changes.py) and the server's rl_insight_step_regression_* series;
# `rl-insight report --changes` says the same in words
REG = "rl_insight_step_regression_"


def _changed(*args, **kw) -> Panel:
    """A panel with data while a run's steps stay slower than their baseline; without
    one it says so."""
    return ts(*args, needs="regression", quiet=NOTHING_CHANGED, **kw)


CHANGES = (
    _changed("Open regressions",
             Query(f"max by (onset_step, signal, part, cause, scope) "
                   f"({REG}seconds{{{RUN}}})", "{{signal}}", table=True),
             kind="table", width=24, height=6, unit="s",
             description="Each change of the run that holds now: its signal (the step "
                         "time, a part, the throughput), the step it began, how much "
                         "slower (seconds, and over the baseline), the part it lives in, "
                         "the one replica or node it is on, and what moved with it "
                         "first."),
    _changed("Step time against its baseline",
             Query(per_step("duration_seconds"), "step"),
             Query(f'max by (signal) ({REG}baseline{{{RUN},signal="step_time"}})',
                   "baseline (before the change)"),
             unit="s", options={"bars": True},
             description="Each step's wall time, and the baseline an open change is "
                         "measured against: the median of the calm steps before it."),
    _changed("What moved with it",
             Query(f"max by (onset_step, rank, candidate, where, direction) "
                   f"({REG}candidate_change_ratio{{{RUN}}})", "{{candidate}}", table=True),
             kind="table", width=12, height=8, unit="percentunit",
             description="What moved with each open change, ranked: causes (the work, "
                         "the KV cache and preemptions, the hardware, the weight sync, the "
                         "trainer's scalars) before symptoms (queueing, waiting requests), "
                         "then by how closely they moved with it step by step; the value "
                         "is the candidate's change since the onset."),
)
# the step anatomy dashboard's annotations: a region per open change
CHANGE_ANNOTATION = {
    "expr": f"max by (signal, onset_step, cause) ({REG}seconds{{{RUN}}})",
    "title": "{{signal}} regressed since step {{onset_step}}",
    "text": "first cause: {{cause}}",
}

# -- why was a step slow: the engines' own request spans (rl_insight/anatomy/requests.py,
# joined to steps by the server) and the step's goodput; `rl-insight report --step N`
# says the same in words
def _traced(*args, **kw) -> Panel:
    """A panel of the engines' request spans: empty unless they trace (docs/requests.md)."""
    return ts(*args, needs="engine-traces", **kw)


REQUESTS_TRACEQL = ('{ name = "llm_request" && .project = "$project" && '
                    '.experiment_name = "$experiment_name" && .replica =~ "$replica" }')
WHY = (
    ts("Step time against the recent median",
       Query(per_step("duration_seconds"), "step"),
       Query(f"quantile_over_time(0.5, {ST}duration_seconds{{{RUN}}}[30m])",
             "median of the last 30 min"), unit="s",
       description="Each step's wall time beside the median of the recent ones: a bar "
                   "above the line is a slow step; `rl-insight report --step N` ranks "
                   "what made it slow."),
    _traced("Request latency per role", Query(
        per_step("request_e2e_seconds", ROLE, "role, quantile"), "{{role}} {{quantile}}"),
        unit="s", options={"bars": True},
        description="End to end, the step's engine requests per role: p50, p90, p99 and "
                    "the slowest: a max far above p99 is the long tail."),
    _traced("Where the requests' time went", Query(
        per_step("request_phase_seconds", ROLE, "role, phase"), "{{role}} {{phase}}"),
        unit="s", stack=True, options={"bars": True},
        description="Mean time per request in the engine's queue, prefill and decode: "
                    "queueing is too little capacity, decode is long answers."),
    _traced("Tokens generated and preemptions", Query(
        per_step("request_completion_tokens", ROLE, "role"), "{{role}} tokens"),
        Query(per_step("request_preemptions", ROLE, "role"), "{{role}} preemptions"),
        options={"bars": True}),
    _traced("Goodput: GPU-seconds per role", Query(
        per_step("gpu_seconds", RUN, "role, use"), "{{role}} {{use}}"), unit="s",
        stack=True, options={"bars": True},
        description="What the step's GPUs did: busy and idle per replica role, the trainer "
                    "ranks' work and their weight sync (anatomy.gpus_per_replica, "
                    "gpus_per_rank)."),
    _traced("Tokens per GPU-second and the tail's share",
            Query(per_step("tokens_per_gpu_second"), "tokens per GPU-second"),
            Query(per_step("tail_share"), "share of the step after 90% of requests "
                  "finished"), options={"bars": True}),
    _traced("Slowest requests (Tempo)", Query(
        REQUESTS_TRACEQL + " | select(.replica, .role, span.gen_ai.request.id, "
        "span.gen_ai.usage.completion_tokens, span.gen_ai.latency.time_in_queue, "
        "span.gen_ai.latency.time_in_model_decode, span.gen_ai.latency.e2e)", "", "tempo"),
        kind="table", width=24, height=10,
        description="Every traced engine request of the run (or of $replica): sort by "
                    "duration; a trace id opens the request's trace. Step -> replica -> "
                    "request: pick the replica above, then the request."),
)

# -- agent loops (rl_insight.agent_loop: bounded families, per-session detail in Tempo) ----------
AL = f"{M}agent_loop_"
AGENT_LOOP = (
    ts("Sessions finished", Query(f"sum by (status) (rate({AL}sessions_total{{{RUN}}}"
                                  "[$__rate_interval]))", "{{status}}"), unit="ops",
       description="Agent-loop sessions finished per second, by status."),
    ts("Trajectories finished", Query(f"sum by (runner_name) (rate({AL}trajectories_total"
                                      f"{{{RUN}}}[$__rate_interval]))", "{{runner_name}}"),
       unit="ops"),
    ts("Trajectory reward", *quantiles(f"{AL}trajectory_reward", "reward_source", RUN,
                                       (0.1, 0.5, 0.9)),
       Query(f"sum(rate({AL}trajectory_reward_sum{{{RUN}}}[$__rate_interval])) / "
             f"sum(rate({AL}trajectory_reward_count{{{RUN}}}[$__rate_interval]))", "mean"),
       description="Reward of each finished trajectory: quantiles and the mean."),
    ts("Turns per trajectory", *quantiles(f"{AL}trajectory_turns", "runner_name", RUN,
                                          (0.5, 0.9))),
    ts("Session duration", *quantiles(f"{AL}session_duration_seconds", "status", RUN),
       unit="s"),
    ts("Trajectories per session", *quantiles(f"{AL}trajectories_per_session", "status",
                                              RUN, (0.5, 0.9))),
    ts("Global step of the agent loops", Query(f"max({AL}global_step{{{RUN}}})", "step"),
       kind="stat"),
    ts("Sessions (Tempo)",
       Query('{ resource.service.name = "rl_insight_monitor" && name = "agent_session" && '
             'span.project = "$project" && span.experiment_name = "$experiment_name" } | '
             "select(span.sample, span.session, span.status, span.num_trajectories, "
             "span.reward_mean, span.global_steps, span.state_lane_id)", "", "tempo"),
       kind="table", width=24, height=10,
       description="Every finished session of the run; open one for its trajectories "
                   "(agent_trajectory spans) and the states of its lane."),
)

# Uni-Agent's agent-aware router (emit_spec.py above): per rollout replica it routes to
def _router(*args, **kw) -> Panel:
    """A panel of Uni-Agent's agent-aware router: empty unless the run has one."""
    return ts(*args, needs="uni-agent-router", **kw)


ROUTER = (
    _router("Router: requests dispatched and completed",
       Query(f"sum by (replica) (rate({M}dispatched_count_total{{{RUN}}}[$__rate_interval]))",
             "dispatched {{replica}}"),
       Query(f"sum by (replica) (rate({M}completed_count_total{{{RUN}}}[$__rate_interval]))",
             "completed {{replica}}"), unit="reqps",
       description="Requests the agent-aware router sent to each replica, and finished."),
    _router("Router: running and waiting requests",
       Query(f"max by (replica) ({M}num_requests_running{{{RUN}}})", "running {{replica}}"),
       Query(f"max by (replica) ({M}num_requests_waiting{{{RUN}}})", "waiting {{replica}}"),
       description="Each replica's engine queue as the router polls it."),
    _router("Router: KV-cache load",
       Query(f"max by (replica) ({M}kv_cache_load{{{RUN}}})", "router {{replica}}"),
       Query(f"max by (replica) ({M}kv_cache_usage_perc{{{RUN}}})", "engine {{replica}}"),
       unit="percentunit",
       description="The router's own KV occupancy (retained blocks over GPU blocks) beside "
                   "the engine's KV-cache usage, both fractions."),
    _router("Router: in-flight tokens and turns",
       Query(f"max by (replica) ({M}inflight_tokens{{{RUN}}})", "tokens {{replica}}"),
       Query(f"max by (replica) ({M}inflight_avg_turn{{{RUN}}})", "avg turn {{replica}}"),
       description="Prompt tokens of the requests in flight per replica, and their mean "
                   "turn (multi-turn sessions pile up on one replica)."),
    _router("Router: prefix-cache hit share",
       Query(f"sum by (replica) (rate({M}prompt_tokens_cached{{{RUN}}}[$__rate_interval])) / "
             f"(sum by (replica) (rate({M}prompt_tokens_cached{{{RUN}}}[$__rate_interval])) + "
             f"sum by (replica) (rate({M}prompt_tokens{{{RUN}}}[$__rate_interval])))",
             "{{replica}}"), unit="percentunit",
       description="Prompt tokens served from the prefix cache over all prompt tokens "
                   "(cumulative gauges the router forwards from vLLM)."),
    _router("Router: scores", *quantiles(f"{M}load", "replica", RUN, (0.5,)),
       *quantiles(f"{M}s_cache", "replica", RUN, (0.5,)),
       description="Median prefix-load-aware load score (first) and three-layer cache hit "
                   "rate (second) the router computed per replica, both 0..1."),
    _router("Router: scoring latency", *quantiles(f"{M}route_latency_seconds", "project", RUN,
                                             (0.5, 0.99)), unit="s",
       description="Time the router's policy took to score the replicas for a request."),
    _router("Router: KV evictions",
       Query(f"sum by (replica) (rate({M}kv_evictions_total{{{RUN}}}[$__rate_interval]))",
             "{{replica}}"), unit="ops"),
)

# -- hardware -----------------------------------------------------------------------------------
NODE_EXPORTER = (
    ts("CPU busy", Query(f'100 * (1 - avg by (node) (rate(node_cpu_seconds_total{{mode="idle",'
                         f'{NODE}}}[$__rate_interval])))', "{{node}}"), unit="percent",
       needs="node-exporter"),
    ts("Memory used", Query(f"1 - node_memory_MemAvailable_bytes{{{NODE}}} / "
                            f"node_memory_MemTotal_bytes{{{NODE}}}", "{{node}}"),
       unit="percentunit", needs="node-exporter"),
    ts("Network", Query(f'sum by (node) (rate(node_network_receive_bytes_total{{{NODE},'
                        f'device!="lo"}}[$__rate_interval]))', "rx {{node}}"),
       Query(f'sum by (node) (rate(node_network_transmit_bytes_total{{{NODE},device!="lo"}}'
             "[$__rate_interval]))", "tx {{node}}"), unit="Bps", needs="node-exporter"),
    ts("Disk I/O", Query(f"sum by (node) (rate(node_disk_read_bytes_total{{{NODE}}}"
                         "[$__rate_interval]))", "read {{node}}"),
       Query(f"sum by (node) (rate(node_disk_written_bytes_total{{{NODE}}}"
             "[$__rate_interval]))", "write {{node}}"), unit="Bps", needs="node-exporter"),
)
DCGM = (
    ts("GPU utilisation", Query(f"avg by (node, gpu) (DCGM_FI_DEV_GPU_UTIL{{{NODE}}})",
                                "{{node}} gpu {{gpu}}"), unit="percent", needs="dcgm-exporter"),
    ts("GPU memory used", Query(f"sum by (node, gpu) (DCGM_FI_DEV_FB_USED{{{NODE}}})",
                                "{{node}} gpu {{gpu}}"), unit="mbytes", needs="dcgm-exporter"),
    ts("GPU power", Query(f"sum by (node, gpu) (DCGM_FI_DEV_POWER_USAGE{{{NODE}}})",
                          "{{node}} gpu {{gpu}}"), unit="watt", needs="dcgm-exporter"),
    ts("GPU temperature", Query(f"max by (node, gpu) (DCGM_FI_DEV_GPU_TEMP{{{NODE}}})",
                                "{{node}} gpu {{gpu}}"), unit="celsius", needs="dcgm-exporter"),
)
NPU = (
    ts("NPU utilisation", Query(f"avg by (node, id) (npu_chip_info_utilization{{{NODE}}})",
                                "{{node}} npu {{id}}"), unit="percent", needs="npu-exporter"),
    ts("NPU HBM used", Query(f"sum by (node, id) (npu_chip_info_hbm_used_memory{{{NODE}}})",
                             "{{node}} npu {{id}}"), unit="mbytes", needs="npu-exporter"),
    ts("NPU power", Query(f"sum by (node, id) (npu_chip_info_power{{{NODE}}})",
                          "{{node}} npu {{id}}"), unit="watt", needs="npu-exporter"),
    ts("NPU temperature", Query(f"max by (node, id) (npu_chip_info_temperature{{{NODE}}})",
                                "{{node}} npu {{id}}"), unit="celsius", needs="npu-exporter"),
    # Ascend npu-exporter: npu_chip_info_hbm_utilization, npu_chip_info_bandwidth_{rx,tx}
    # (MB/s, the chip's network ports) in plugins/inputs/npu/npu.go @19470bcb;
    # npu_chip_info_health_status (1 healthy, 0 not) in collector/npu_collector.go @0516e8af
    ts("NPU HBM utilisation", Query(f"avg by (node, id) (npu_chip_info_hbm_utilization"
                                    f"{{{NODE}}})", "{{node}} npu {{id}}"), unit="percent",
       needs="npu-exporter"),
    ts("NPU network bandwidth",
       Query(f"sum by (node, id) (npu_chip_info_bandwidth_rx{{{NODE}}})", "rx {{node}} {{id}}"),
       Query(f"sum by (node, id) (npu_chip_info_bandwidth_tx{{{NODE}}})", "tx {{node}} {{id}}"),
       unit="MBs", needs="npu-exporter"),
    ts("NPU health", Query(f"min by (node, id) (npu_chip_info_health_status{{{NODE}}})",
                           "{{node}} npu {{id}}"), kind="state-timeline", width=24, height=5,
       needs="npu-exporter",
       options={"mappings": {"0": ("unhealthy", "red"), "1": ("healthy", "green")}}),
)

# -- RL-Insight itself --------------------------------------------------------------------------
SELF = (
    ts("Events into the hub", Query("sum(rate(rl_insight_hub_events_received_total"
                                    "[$__rate_interval]))", "received"),
       Query("sum(rate(rl_insight_hub_events_dropped_total[$__rate_interval]))", "dropped"),
       unit="short", description="Metric events per second handed to the hub, and dropped."),
    ts("Spans", Query("sum(rate(rl_insight_spans_received_total[$__rate_interval]))",
                      "received"),
       Query("sum(rate(rl_insight_spans_relayed_total[$__rate_interval]))", "relayed to Tempo"),
       Query("sum(rl_insight_spool_spans)", "waiting in the spool")),
    ts("Services up", Query("max by (service) (rl_insight_service_ready)", "{{service}}"),
       kind="state-timeline", width=24, height=5,
       options={"mappings": {"0": ("not ready", "red"), "1": ("ready", "green")}}),
)
