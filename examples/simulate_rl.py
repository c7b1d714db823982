"""A simulated verl-style RL run on Ray, monitored by RL-Insight, for a laptop without
GPUs: rollout replicas (FAKE vLLM, vLLM-Omni or SGLang engines serving real /metrics),
the real TransferQueue (on CPU, driven as verl's V1 trainer drives it), trainer ranks, and
a trainer loop that logs verl's keys.

    python examples/simulate_rl.py --steps 5 --replicas 2 --ranks 2 --mode sync
    python examples/simulate_rl.py --mode async --backend sglang --step-seconds 4

Set RL_INSIGHT_SERVER_URL to the server (`rl-insight server start` prints it). Ray:
a local cluster, or the one RAY_ADDRESS names. Everything is registered and reported
through the client API, as a framework would do it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
import time
from pathlib import Path

import ray

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data_queue  # noqa: E402
import drifts  # noqa: E402
import fake_engines  # noqa: E402
import trainer_keys  # noqa: E402

import rl_insight  # noqa: E402

for _module in (fake_engines, data_queue, drifts):  # workers need not import them
    ray.cloudpickle.register_pickle_by_value(_module)


@ray.remote(num_cpus=0)
class RolloutReplica:
    """One rollout replica: a FAKE engine and the replica's state lane."""

    def __init__(self, index: int, backend: str, project: str = "",
                 experiment: str = "", slowdown: float = 1.0,
                 kv_capacity_tokens: int = 0, hang: tuple[int, float] = (0, 0.0),
                 lane: str = "", port: int = 0, traces: bool = False,
                 extra: tuple = (), slots: int = 0, tokens: tuple[int, int] = (32, 600),
                 long_in_batch: bool = False, seed: int = 0) -> None:
        self.index = index
        self.project, self.experiment = project, experiment
        # verl 0.9.1 and VeRL-Omni: replica_<r>; verl main: <role>_replica_<r>
        # (RLInsightLogger.rollout_state_lane_id(replica_rank, state_lane_prefix))
        self.lane = lane or f"replica_{index}"
        self.generate_state = "sglang_generate" if backend == "sglang" else "vllm_generate"
        # verl 0.9.1 passes engine_kwargs.vllm.otlp_traces_endpoint to vLLM unchanged:
        # the engine's own request spans go to the server (or the platform's endpoint)
        endpoint = ""
        if traces:
            server = os.environ.get("RL_INSIGHT_SERVER_URL", "").rstrip("/")
            endpoint = server + "/v1/traces" if server else \
                os.environ.get("RL_INSIGHT_OTLP_ENDPOINT", "")
        self.engine = fake_engines.FakeEngine(backend, seed=index + 1000 * seed,
                                              kv_capacity_tokens=kv_capacity_tokens,
                                              port=port, otlp_traces_endpoint=endpoint,
                                              slots=slots, tokens=tokens)
        # (kind, step, amount[, seconds]): ("long", step, tokens, seconds) one long-tail
        # request (step 0: every step); ("burst", step, n) n more requests at once,
        # queued behind each other
        self.extra = extra
        self.long_in_batch = long_in_batch  # a long request is one of the batch's (--batch)
        self.slowdown = slowdown  # a straggler generates this many times as long
        self.hang = hang  # (step, seconds): a request that hangs in that step
        self.generated: list[tuple[int, int, int]] = []  # ground truth: (step, start, end)
        self.kv_reference: int | None = None  # --drift kv-shrink: the peak it shrinks from

    def address(self) -> str:
        return f"{ray.util.get_node_ip_address()}:{self.engine.port}"

    def drift(self, length_factor: float, kv_capacity: float) -> int:
        """examples/drifts.py: responses ``length_factor`` as long; a KV cache of
        ``kv_capacity`` (a share of full) sized so that at 1 the batch fills KV_NEED of
        it (the peak the engine saw so far); the preemptions of the last step."""
        with self.engine.lock:
            self.engine.length_factor = length_factor
            if kv_capacity < 1.0:
                if self.kv_reference is None:  # the batch's peak before the drift
                    self.kv_reference = max(self.engine.peak_tokens, 1)
                self.engine.s.kv_capacity_tokens = max(
                    1, int(self.kv_reference / drifts.KV_NEED * kv_capacity))
            preempted, self.engine.preempted = self.engine.preempted, 0
        return preempted

    def generate(self, n: int, timeout: float, step: int, phase: str = "train",
                 keys: list[str] | None = None) -> float:
        """Generate ``n`` requests; with ``keys``, write the responses to TransferQueue
        (partition ``train`` or ``val``) as a V1 rollout worker does."""
        t0 = time.perf_counter()
        with rl_insight.trace_state(self.generate_state, state_lane_id=self.lane, step=step,
                                    phase=phase, requests=n):
            wall0 = time.time_ns()  # in the block: the first one also enables monitoring
            injected = [(k, a, *more) for k, st, a, *more in self.extra
                        if st in (step, 0) and phase == "train"]
            longs = sum(1 for k, *_ in injected if k == "long")
            self.engine.submit(max(0, n - longs) if self.long_in_batch else n)
            for kind, amount, *more in injected:
                if kind == "long":
                    self.engine.submit_long(amount, seconds=more[0] if more else 6.0)
                else:
                    self.engine.submit(amount)
            if injected:  # the step waits for them, as verl waits for every request
                timeout += 30.0
            agents = [threading.Thread(target=self.agent_loop, args=(step, i), daemon=True)
                      for i in range(4 if phase != "teacher" else 0)]
            for a in agents:
                a.start()
            end = time.monotonic() + timeout
            while self.engine.busy() and time.monotonic() < end:
                time.sleep(0.02)
            for a in agents:
                a.join()
            if self.slowdown > 1:  # the straggler: still generating
                time.sleep((self.slowdown - 1) * (time.perf_counter() - t0))
            if step == self.hang[0] and phase == "train":  # stuck in generation
                time.sleep(self.hang[1])
            self.generated.append((step, wall0, time.time_ns()))
        if keys:
            rng = random.Random(step * 1000 + self.index)
            data_queue.put_responses("val" if phase == "validation" else "train", keys,
                                     step, [rng.randint(32, 600) for _ in keys])
        return time.perf_counter() - t0

    def ground_truth(self) -> list[tuple[int, int, int]]:
        return self.generated

    def stop_metrics(self) -> None:
        """The engine's /metrics goes away (a crashed engine): its target is down."""
        self.engine.server.shutdown()
        self.engine.server.server_close()

    def agent_loop(self, step: int, i: int) -> None:
        """A multi-turn agent session as Uni-Agent runs one (uni_agent/framework/
        framework.py ``_run_agent_episode``, rl_insight/adapter.py, the agent-aware
        router's emitter): the session's identity, a model turn through the gateway
        (``gateway_generation``), a tool call, another turn, the task's span
        (``agent_task``), the router's metrics with ``init()`` before each, then the
        session's finish. Thousands of these share the node's lane actor."""
        session = rl_insight.agent_loop_session(
            project=self.project, experiment_name=self.experiment, sample=f"s{step}r{self.index}",
            session=i, traj=0, uid=f"uid-{step}-{i}", global_steps=step,
            session_id=f"session-sample-{step}-rollout-{i}")
        ident = session.identity
        task_start = time.time_ns()
        for turn, (state, seconds) in enumerate((("agent_generate", 0.15),
                                                 ("agent_tool_call", 0.25),
                                                 ("agent_generate", 0.1))):
            start = time.time_ns()
            with rl_insight.trace_state(state, state_lane_id=ident["state_lane_id"], step=step):
                time.sleep(seconds)
            if state == "agent_generate":
                self.gateway_generation(ident, start, turn, tool=turn == 0)
        reward = round(random.Random(step * 100 + i).uniform(0, 1), 3)
        rl_insight.trace_span(name="agent_task", start_time_ns=task_start,
                              end_time_ns=time.time_ns(), attributes={
                                  **ident, "monitor.trace_source": "task",
                                  "task_name": "simulated", "image_ref": "",
                                  "prompt_hash": f"{step:08x}{i:08x}", "status": "success",
                                  "reward": reward, "accuracy": float(reward > 0.5),
                                  "finished": True, "reward_posted": False, "error": ""})
        session.finish(trajectories=[{"chain_id": 1, "reward_score": reward, "num_turns": 2}],
                       status="success", runner_name="simulated", reward_source="rule",
                       finished=True)

    def gateway_generation(self, ident: dict, start: int, turn: int, tool: bool) -> None:
        """One model call through Uni-Agent's gateway: its span, as
        uni_agent/rl_insight/adapter.py ``GenerationSpan.report`` sends it (lists as JSON
        text, the trajectory's lane from ``agent_loop_lane_id``), and the router's
        metrics as its emitter sends them (``init()`` first, every time)."""
        from rl_insight.agent_loop import agent_loop_lane_id

        chain_id = 1
        rl_insight.trace_span(name="gateway_generation", start_time_ns=start,
                              end_time_ns=time.time_ns(), attributes={
            **ident, "monitor.trace_source": "gateway",
            "state_lane_id": agent_loop_lane_id(ident["experiment_name"], ident["sample"],
                                                ident["session"], chain_id - 1),
            "traj": str(chain_id - 1), "chain_id": chain_id, "status": "success",
            "error": "", "finish_reason": "tool_calls" if tool else "stop", "turn": turn,
            "type": "tool" if tool else "llm",
            "tools": json.dumps(["search"] if tool else []),
            "tool_args": json.dumps(['{"q": "x"}'] if tool else []),
            "reasoning": "", "content": "", "prompt_tokens": 280 + 40 * turn,
            "completion_tokens": 64})
        snap = self.engine.snapshot()
        replica = str(self.index)
        for kind, name, value in (
                ("count", "dispatched_count", 1.0), ("count", "completed_count", 1.0),
                ("count", "prompt_len_sum", 280.0),
                ("gauge", "num_requests_running", snap["running"]),
                ("gauge", "num_requests_waiting", snap["waiting"]),
                ("gauge", "kv_cache_usage_perc", snap["kv"]),
                ("gauge", "kv_cache_load", snap["kv"] * 0.9),
                ("gauge", "inflight_tokens", 280.0 * snap["running"]),
                ("gauge", "inflight_avg_turn", 1.5),
                ("gauge", "prompt_tokens", snap["prompt_tokens"]),
                ("gauge", "prompt_tokens_cached", snap["prompt_tokens"] * 0.3),
                ("count", "kv_evictions", 2.0),
                ("histogram", "load", min(1.0, snap["kv"] + 0.1)),
                ("histogram", "s_cache", 0.3),
                ("histogram", "route_latency_seconds", 0.0004)):
            rl_insight.init()  # uni_agent/rl_insight/__init__.py: before every emit
            emit = {"count": rl_insight.metric_count, "gauge": rl_insight.metric_gauge,
                    "histogram": rl_insight.metric_histogram}[kind]
            labels = {} if name == "route_latency_seconds" else {"replica": replica}
            emit(name, value, "", **labels)

    def state(self, name: str, seconds: float, step: int, sleep_level: int | None = None
              ) -> None:
        """A short replica state: sleep, wake up, KV-cache release and resume, waits."""
        with rl_insight.trace_state(name, state_lane_id=self.lane, step=step):
            if sleep_level is not None:
                self.engine.set_sleep(sleep_level)
            # the engine's own record of the same operation (vLLM's dev-mode metrics)
            op = {"vllm_sleep": ("sleep_mode", "sleep"), "vllm_wake_up": ("sleep_mode", "wake"),
                  "vllm_release_kv_cache": ("sleep_mode", "release_kv_cache_memory"),
                  "vllm_resume_kv_cache": ("rl_weight_update", "update"),
                  "switch_wait": ("rl_weight_update", "update")}.get(name)
            if op is not None:
                self.engine.operation(*op, seconds)
            else:
                time.sleep(seconds)


@ray.remote(num_cpus=0)
class TrainerRank:
    def __init__(self, rank: int) -> None:
        self.lane = f"rank_{rank}"
        self.phases: list[tuple[str, int, int]] = []  # ground truth: (state, start, end)

    def phase(self, name: str, seconds: float, step: int) -> None:
        with rl_insight.trace_state(name, state_lane_id=self.lane, step=step):
            t0 = time.time_ns()
            time.sleep(seconds)
            self.phases.append((name, t0, time.time_ns()))

    def ground_truth(self) -> list[tuple[str, int, int]]:
        return self.phases


@ray.remote(num_cpus=0)
def flood(n: int) -> None:
    """A worker whose buffer is far too small for what it records: the drops it counts
    reach the hub (rl_insight_hub_events_dropped_total)."""
    rl_insight.init(config={"client": {"buffer_max_events": 64, "batch_size": 32}})
    for i in range(n):
        rl_insight.metric_gauge("flood/value", float(i))
    rl_insight.flush(5)


class Simulation:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        s = args.step_seconds
        # the share of a step each phase takes, as in a typical synchronous PPO step
        self.t = {"sleep": 0.03 * s, "reward": 0.05 * s, "old_log_prob": 0.1 * s,
                  "ref": 0.08 * s, "values": 0.03 * s, "adv": 0.02 * s,
                  "update_actor": 0.18 * s, "update_weights": 0.06 * s, "switch": 0.02 * s}
        # a step's generation waits this long at most for the engine's requests; with a
        # drift it waits for all of them (a shrinking KV cache or longer responses make
        # the engine slower, and the step with it)
        # --batch: the whole batch waited for, spread over the replicas (a replica's
        # share of it: its time, where its engine runs few requests at once)
        self.gen_timeout = (10.0 if args.drift or args.batch else 0.6) * s
        self.requests = max(8, int(16 * 0.4 * s / 0.7))
        for key in ("old_log_prob", "ref", "update_actor", "switch"):  # --trainer-speed
            self.t[key] /= args.trainer_speed
        self.t["update_weights"] *= args.weight_sync_scale
        self.rng = random.Random(args.seed)
        placement = {"resources": {args.rollout_resource: 0.01}} \
            if args.rollout_resource else {}
        slow = dict(args.straggler or [])
        hangs = {r: (step, seconds) for r, step, seconds in args.hang or []}
        prefix = "rollout_" if args.lanes == "verl-main" else ""
        extra: dict[int, list] = {}
        for r, step, tokens, *seconds in args.long_request or []:
            extra.setdefault(r, []).append(("long", step, tokens, *seconds))
        for r, step, n in args.queue_burst or []:
            extra.setdefault(r, []).append(("burst", step, n))
        self.replicas = [RolloutReplica.options(**placement).remote(
            i, args.backend, args.project, args.experiment_name, slow.get(i, 1.0),
            2_000 if i in (args.kv_pressure or []) else 0, hangs.get(i, (0, 0.0)),
            f"{prefix}replica_{i}", args.engine_base_port + i if args.engine_base_port else 0,
            args.engine_traces, tuple(extra.get(i, ())), slots=args.engine_slots,
            tokens=args.response_tokens, long_in_batch=bool(args.batch), seed=args.seed)
            for i in range(args.replicas)]
        # each replica's share of the batch, per step (--batch: verl spreads one batch)
        self.shares = [args.batch // args.replicas + (i < args.batch % args.replicas)
                       for i in range(args.replicas)] if args.batch else \
            [self.requests] * args.replicas
        # verl main's teacher (on-policy distillation): its own replicas and engines,
        # lanes teacher_<key>_replica_<r> (teacher_model.py: name_suffix = the teacher's
        # key), engines registered as replica "teacher_<key>_<r>"
        self.teacher_prefix = f"teacher_{args.teacher}" if args.teacher else ""
        self.teachers = [RolloutReplica.options(**placement).remote(
            100 + i, args.backend, args.project, args.experiment_name,
            args.teacher_slowdown if i == 1 else 1.0, 0, (0, 0.0),
            f"{self.teacher_prefix}_replica_{i}")
            for i in range(args.teacher_replicas if args.teacher else 0)]
        self.ranks = [TrainerRank.remote(r) for r in range(args.ranks)]
        # verl's init_workers ends putting every replica to sleep to load the checkpoint
        # (verl 0.9.1 trainer/ppo/ray_trainer.py: checkpoint_manager.sleep_replicas()),
        # before fit() makes the Tracking that names the run
        self.replicas_state("vllm_sleep", self.t["sleep"] / 2, 0, sleep_level=1)
        self.tq = data_queue.config() if args.transfer_queue else None
        self.tq_endpoint: str | None = None
        self.live: list[tuple[str, list[str]]] = []  # batches in TransferQueue
        # the run's configuration handed over with it, as verl's Tracking(config=) does
        self.tracking = rl_insight.Tracking(args.project, args.experiment_name,
                                            handed_config(args))
        self.total_tokens = 0
        self.drifts = list(args.drift or [])
        self.preempted: dict[int, list[int]] = {}  # step -> preemptions per replica
        self.logged: list[tuple[int, int, float]] = []  # (step, log time ns, timing_s/step)

    def drift_truth(self) -> list[dict]:
        """Each drift, and the first step it made slower: a shrinking KV cache's first
        step with preemptions on its replica, as the engine counted them."""
        out = []
        for d in self.drifts:
            onset = d.start
            if d.kind == "kv-shrink":
                onset = next((st for st, got in sorted(self.preempted.items())
                              if st >= d.start and got[d.target] > 0), None)
            out.append({"kind": d.kind, "start": d.start, "target": d.target,
                        "onset": onset, "causes": sorted(map(list, drifts.causes(d)))})
        return out

    def register(self) -> dict:
        """Register the engines' and the controller's endpoints, as verl does."""
        addresses = ray.get([r.address.remote() for r in self.replicas])
        if self.args.lanes == "verl-main":  # verl's LLMServerManager, rollout name as job
            rl_insight.update_prometheus_config(addresses, self.args.backend,
                                                [{"replica": i} for i in
                                                 range(len(addresses))])
        else:
            rl_insight.register_rollout_replicas(addresses, self.args.backend,
                                                 disable_log_stats=False)
        out = {"replicas": addresses}
        if self.teachers:  # verl main's TeacherModelManager._initialize_llm_servers
            teachers = ray.get([r.address.remote() for r in self.teachers])
            rl_insight.update_prometheus_config(
                teachers, self.args.backend,
                [{"replica": f"{self.teacher_prefix}_{i}"} for i in range(len(teachers))])
            out["teachers"] = teachers
        if self.tq is not None:  # verl: tq.init in the TaskRunner, then Tracking registers
            self.tq_endpoint = data_queue.start(self.tq)
            out["transfer_queue"] = self.tq_endpoint
            rl_insight.update_prometheus_config([self.tq_endpoint], "transfer_queue", None)
        return out

    # -- phases ---------------------------------------------------------------------------
    def ranks_phase(self, name: str, step: int, key: str) -> float:
        t0 = time.perf_counter()
        ray.get([r.phase.remote(name, self.t[key], step) for r in self.ranks])
        return time.perf_counter() - t0

    def replicas_state(self, name: str, seconds: float, step: int,
                       sleep_level: int | None = None) -> None:
        ray.get([r.state.remote(name, seconds, step, sleep_level) for r in self.replicas])

    def generate(self, step: int, phase: str = "train"):
        """Dispatch a batch to every replica; with TransferQueue, its prompts are put
        first and the replicas write the responses."""
        keys = [[f"{phase}-{step}-r{i}-{j}" for j in range(self.shares[i])]
                for i in range(len(self.replicas))] if self.tq is not None else \
            [None] * len(self.replicas)
        if self.tq is not None:
            partition = "val" if phase == "validation" else "train"
            batch = [k for ks in keys for k in ks]
            data_queue.submit(partition, batch, step)
            self.live.append((partition, batch))
        return [r.generate.remote(n, self.gen_timeout, step, phase, ks)
                for r, n, ks in zip(self.replicas, self.shares, keys, strict=True)]

    def read_batch(self, step: int, phase: str = "train") -> None:
        """The trainer reads the finished batch of ``step`` from TransferQueue."""
        for partition, batch in self.live if self.tq is not None else []:
            if batch and batch[0].startswith(f"{phase}-{step}-"):
                data_queue.consume(partition, batch)

    def clear_batches(self, keep: int = 0) -> None:
        """Clear finished batches from TransferQueue, keeping the newest ``keep``."""
        while self.tq is not None and len(self.live) > keep:
            data_queue.clear(*self.live.pop(0))

    def timed(self, key: str) -> float:
        seconds = self.t[key] * (drifts.noise(self.rng) if self.drifts else 1.0)
        time.sleep(seconds)
        return seconds

    # -- one step -----------------------------------------------------------------------------
    def teacher_phase(self, step: int) -> float:
        """The teacher scores the batch (on-policy distillation): its replicas generate
        on lanes of their own; with --teacher-slowdown its replica 1 is the straggler."""
        if not self.teachers:
            return 0.0
        return max(ray.get([t.generate.remote(max(2, self.requests // 4), self.gen_timeout,
                                              step, "teacher") for t in self.teachers]))

    def apply_drifts(self, step: int) -> None:
        """--drift: each replica's responses and KV cache for this step; the preemptions
        each had in the step before (the ground truth of a shrinking cache)."""
        if not self.drifts:
            return
        got = ray.get([r.drift.remote(
            math.prod(d.response_factor(step) for d in self.drifts),
            math.prod(d.kv_capacity(step) for d in self.drifts
                      if d.kind == "kv-shrink" and d.target == i))
            for i, r in enumerate(self.replicas)])
        if step > 1:
            self.preempted[step - 1] = got

    def sync_step(self, step: int) -> dict:
        timing = {}
        t_step = time.perf_counter()
        self.apply_drifts(step)
        timing["gen"] = max(ray.get(self.generate(step)))
        self.read_batch(step)
        if self.teachers:
            timing["teacher"] = self.teacher_phase(step)
        t0 = time.perf_counter()
        self.replicas_state("vllm_release_kv_cache", self.t["sleep"] / 2, step)
        self.replicas_state("vllm_sleep", self.t["sleep"] / 2, step, sleep_level=1)
        timing["sleep"] = time.perf_counter() - t0
        timing["reward"] = self.timed("reward")
        timing["old_log_prob"] = self.ranks_phase("actor_compute_log_prob", step,
                                                  "old_log_prob")
        timing["ref"] = self.ranks_phase("ref_compute_log_prob", step, "ref")
        timing["values"] = self.timed("values")
        timing["adv"] = self.timed("adv")
        timing["update_actor"] = self.ranks_phase("actor_update", step, "update_actor")
        timing["update_weights"] = self.update_weights(step)
        self.clear_batches()
        timing["step"] = time.perf_counter() - t_step
        return timing

    def async_step(self, step: int, pending: list) -> tuple[dict, list]:
        """Separate-asynchronous: batch ``step`` was generated while the ranks trained on
        the one before; the next batch starts before training on this one."""
        timing = {}
        t_step = time.perf_counter()
        timing["gen"] = max(ray.get(pending))
        self.read_batch(step)
        nxt = self.generate(step + 1) if step < self.args.steps else []
        timing["switch_to_trainer"] = self.ranks_phase("switch_to_trainer", step, "switch")
        timing["old_log_prob"] = self.ranks_phase("actor_compute_log_prob", step,
                                                  "old_log_prob")
        timing["ref"] = self.ranks_phase("ref_compute_log_prob", step, "ref")
        timing["reward"] = self.timed("reward")
        timing["adv"] = self.timed("adv")
        timing["update_actor"] = self.ranks_phase("actor_update", step, "update_actor")
        timing["switch_to_rollout"] = self.ranks_phase("switch_to_rollout", step, "switch")
        t0 = time.perf_counter()
        waits = [r.state.remote("switch_wait", self.t["update_weights"], step)
                 for r in self.replicas]  # queued behind the replica's generation
        ray.get([r.phase.remote("update_weights", self.t["update_weights"], step)
                 for r in self.ranks])
        ray.get(waits)
        timing["update_weights"] = time.perf_counter() - t0
        self.clear_batches(keep=1)  # the next batch is still being generated
        timing["step"] = time.perf_counter() - t_step
        return timing, nxt

    def validate(self, step: int) -> dict:
        """verl's _validate: the core metric is acc where the reward function gives one
        (data_source openai/gsm8k: verl's examples/data_preprocess/gsm8k.py)."""
        t0 = time.perf_counter()
        ray.get(self.generate(step, phase="validation"))
        self.read_batch(step, "validation")
        if self.args.trainer in ("diffusion", "diffusion-v1"):
            return trainer_keys.diffusion_validation(step, time.perf_counter() - t0,
                                                     self.rng)
        score = self.score(step) + 0.05
        return {"val-core/openai/gsm8k/acc/mean@1": score - 0.04,
                "val-aux/openai/gsm8k/reward/mean@1": score,
                "val-aux/num_turns/min": 1.0, "val-aux/num_turns/max": 4.0,
                "val-aux/num_turns/mean": 2.2, "timing_s/testing": time.perf_counter() - t0}

    def score(self, step: int) -> float:
        return 0.25 + 0.5 * (1 - math.exp(-step / 6)) + self.rng.uniform(-0.02, 0.02)

    def metrics(self, step: int, timing: dict) -> dict:
        if self.drifts:  # steady but for the drifts: 1 % noise (examples/drifts.py)
            response = 380 * drifts.noise(self.rng) * math.prod(
                d.response_factor(step) for d in self.drifts)
        else:
            response = 380 + 60 * math.sin(step / 3) + self.rng.uniform(-10, 10)
        tokens = self.requests * len(self.replicas) * (response + 280)
        self.total_tokens += tokens
        score = self.score(step)
        data = {
            "actor/pg_loss": -0.02 * math.exp(-step / 8) + self.rng.uniform(-0.005, 0.005),
            "actor/entropy": 1.6 * math.exp(-step / 40),
            "actor/pg_clipfrac": 0.002 + self.rng.uniform(0, 0.003),
            "actor/ppo_kl": 0.0005 + self.rng.uniform(0, 0.0005),
            "actor/grad_norm": 0.3 + self.rng.uniform(0, 0.2),
            "actor/lr": 1e-6,
            "critic/score/mean": score, "critic/rewards/mean": score - 0.01,
            "critic/advantages/mean": self.rng.uniform(-0.01, 0.01),
            "response_length/mean": response,
            "response_length/clip_ratio": 0.01 + self.rng.uniform(0, 0.02),
            "prompt_length/mean": 280.0,
            "perf/throughput": tokens / max(timing["step"], 1e-6) / max(
                len(self.ranks), 1),
            "perf/total_num_tokens": tokens,
            "perf/time_per_step": timing["step"],
            "training/global_step": step, "training/epoch": step // 10,
        }
        data.update({f"timing_s/{k}": v for k, v in timing.items()})
        data.update(self.detail_metrics(step, score, response, tokens, timing))
        if self.args.nan_loss_at and step >= self.args.nan_loss_at:  # a diverged update
            data["actor/pg_loss"] = float("nan")
        return data

    def detail_metrics(self, step: int, score: float, response: float, tokens: float,
                       timing: dict) -> dict:
        """The rest of what verl 0.9.1 logs for a PPO run with a critic, rollout
        correction and multi-turn rollouts (keys as verl/trainer/ppo/metric_utils.py,
        rollout_corr_helper.py and the workers' losses write them)."""
        u = self.rng.uniform
        mem = {"max_memory_allocated_gb": 52.0 + u(0, 4), "max_memory_reserved_gb": 60.0 + u(0, 4),
               "cpu_memory_used_gb": 120.0 + u(0, 8)}
        out = {"actor/entropy_loss": -0.01 * math.exp(-step / 40),
               "actor/pg_clipfrac_lower": u(0, 0.001),
               "actor/reward_kl_penalty": 0.001 + u(0, 0.001),
               "actor/reward_kl_penalty_coeff": 0.001,
               # the engine workers' (workers/engine_workers.py, losses.py): actor/-prefixed
               "actor/loss": -0.02 * math.exp(-step / 8) + u(0, 0.01),
               "actor/kl_loss": 0.001 + u(0, 0.001), "actor/kl_coef": 0.001,
               **{f"actor/perf/{k}": v for k, v in mem.items()},
               "critic/vf_loss": 0.05 * math.exp(-step / 10) + u(0, 0.01),
               "critic/vf_clipfrac": u(0, 0.01), "critic/vf_explained_var": 0.2 + u(0, 0.3),
               "critic/vpred_mean": score - 0.05,
               "perf/mfu/actor": 0.3 + u(0, 0.1), "perf/mfu/critic": 0.25 + u(0, 0.1),
               **{f"perf/{k}": v for k, v in mem.items()},  # the legacy workers'
               "response/aborted_ratio": u(0, 0.01),
               "global_seqlen/min": tokens * 0.9 / 8, "global_seqlen/max": tokens * 1.1 / 8,
               "global_seqlen/minmax_diff": tokens * 0.2 / 8, "global_seqlen/mean": tokens / 8,
               "global_seqlen/balanced_min": tokens * 0.98 / 8,
               "global_seqlen/balanced_max": tokens * 1.02 / 8,
               "training/num_turns/min": 1, "training/num_turns/mean": 2.5 + u(0, 1),
               "training/num_turns/max": 6,
               # rollout.calculate_log_probs (verl/utils/debug/metrics.py)
               "training/rollout_probs_diff_valid": 1.0,
               "training/rollout_probs_diff_max": 0.2 + u(0, 0.1),
               "training/rollout_probs_diff_mean": 0.004 + u(0, 0.002),
               "training/rollout_probs_diff_std": 0.01 + u(0, 0.005),
               "training/rollout_actor_probs_pearson_corr": 0.99 + u(0, 0.009),
               "rollout_corr/rollout_is_mean": 1.0 + u(-0.05, 0.05),
               "rollout_corr/rollout_is_max": 2.0 + u(0, 1),
               "rollout_corr/rollout_rs_masked_fraction": u(0, 0.02)}
        # verl's compute_offpolicy_metrics (rollout_corr_helper.py)
        for key in ("training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl",
                    "rollout_log_ppl", "log_ppl_diff", "log_ppl_abs_diff", "log_ppl_diff_max",
                    "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq"):
            out[f"rollout_corr/{key}"] = (1.3 if "ppl" in key else 0.0) + u(0, 0.05)
        # verl's V1 trainer tags each trajectory with the weight version it began at
        stale = 0.0 if self.args.mode == "sync" else 1.0
        for k, base in (("trajectory_spans", 1.0), ("trajectory_staleness", stale),
                        ("trajectory_staleness_worst", stale)):
            out[f"training/off_policy/{k}/mean"] = base
            out[f"training/off_policy/{k}/max"] = base
            out[f"training/off_policy/{k}/min"] = base
        for key, mean in (("critic/score", score), ("critic/rewards", score - 0.01),
                          ("critic/advantages", 0.0), ("critic/returns", score - 0.01),
                          ("critic/values", score - 0.05),
                          ("response_length", response),
                          ("response_length_non_aborted", response - 2),
                          ("prompt_length", 280.0)):
            spread = max(abs(mean), 1.0) * 0.5
            out[f"{key}/min"], out[f"{key}/max"] = mean - spread, mean + spread
            out.setdefault(f"{key}/mean", mean)
        out["response_length_non_aborted/clip_ratio"] = u(0, 0.02)
        out["prompt_length/clip_ratio"] = u(0, 0.01)
        for phase in ("gen", "ref", "values", "adv", "update_actor"):  # ms per token
            if phase in timing:
                out[f"timing_per_token_ms/{phase}"] = timing[phase] * 1000 / max(tokens, 1)
        return out

    def sync_weights(self) -> None:
        """fit()'s weight sync before the first step (verl 0.9.1 ray_trainer.py
        ``checkpoint_manager.update_weights(self.global_steps)``; checkpoint_engine/base.py:
        release the replicas' KV cache, the ranks send the weights, resume the KV cache);
        the replicas wake as after every step's sync: step 1 is no warm-up."""
        self.replicas_state("vllm_release_kv_cache", self.t["sleep"] / 2, 0)
        self.update_weights(0)

    def update_weights(self, step: int) -> float:
        """The ranks send the weights while the replicas wake and take their KV cache
        back; returns the seconds it took."""
        t0 = time.perf_counter()
        seconds = self.t["update_weights"] * math.prod(d.weight_sync_factor(step)
                                                      for d in self.drifts)
        weights = [r.phase.remote("update_weights", seconds, step) for r in self.ranks]
        self.replicas_state("vllm_wake_up", self.t["update_weights"] / 3, step,
                            sleep_level=0)
        self.replicas_state("vllm_resume_kv_cache", self.t["update_weights"] / 3, step)
        ray.get(weights)
        return time.perf_counter() - t0

    def run(self) -> None:
        self.sync_weights()
        pending = self.generate(1) if self.args.mode == "async" else []
        for step in range(1, self.args.steps + 1):
            if step == self.args.engine_down_at:
                ray.get(self.replicas[0].stop_metrics.remote())
            if step == self.args.flood_at:
                ray.get(flood.remote(self.args.flood_events))
            if step == self.args.stall_at:  # a hung trainer: no step, no lane moves
                print(f"stalling {self.args.stall_seconds:.0f}s before step {step}",
                      flush=True)
                time.sleep(self.args.stall_seconds)
            if self.args.mode == "sync":
                timing = self.sync_step(step)
            else:
                timing, pending = self.async_step(step, pending)
            if step == self.args.steps:  # trainer.save_freq: the last step saves
                t0 = time.perf_counter()
                time.sleep(0.05)
                timing["save_checkpoint"] = time.perf_counter() - t0
            if self.args.trainer in ("diffusion", "diffusion-v1"):  # VeRL-Omni
                data = trainer_keys.diffusion(
                    self.args.trainer, step, timing, self.requests * len(self.replicas),
                    len(self.ranks) + len(self.replicas), self.rng)
            else:  # verl's own trainer (VeRL-Omni's omni mode runs it too)
                data = self.metrics(step, timing)
            if self.args.val_every and step % self.args.val_every == 0:
                data.update(self.validate(step))
            self.tracking.log(data, step=step)
            self.logged.append((step, time.time_ns(), timing["step"]))
            print(f"step {step}/{self.args.steps}: {timing['step']:.1f}s, reward "
                  f"{data['critic/rewards/mean']:.3f}", flush=True)


def _drift(text: str) -> drifts.Drift:
    try:
        d = drifts.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if d.kind == "throttle":  # no node of this machine has a GPU to throttle
        raise argparse.ArgumentTypeError(
            "--drift throttle: a real run has no GPU here to throttle; "
            "bench/changes.py runs it in virtual time")
    return d


def handed_config(args: argparse.Namespace) -> argparse.Namespace:
    """The run's configuration as it is handed over: its arguments but its names (its
    identity, kept beside it), so two runs that differ in one flag differ in that key."""
    return argparse.Namespace(**{k: v for k, v in vars(args).items()
                                 if k not in ("project", "experiment_name")})


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mode", choices=["sync", "async"], default="sync")
    ap.add_argument("--backend", choices=["vllm", "sglang", "vllm_omni"], default="vllm")
    ap.add_argument("--step-seconds", type=float, default=6.0)
    ap.add_argument("--val-every", type=int, default=2)
    ap.add_argument("--transfer-queue", action=argparse.BooleanOptionalAction, default=True,
                    help="run the real TransferQueue as verl's V1 trainer does (its "
                    "controller and two storage units take a CPU each)")
    ap.add_argument("--rollout-resource", default="",
                    help="a custom Ray resource the rollout replicas need (place them on "
                         "the nodes started with it)")
    ap.add_argument("--hardware", action="store_true",
                    help="also collect each node's hardware (attach(hardware=True))")
    ap.add_argument("--trainer", choices=["verl", "diffusion", "diffusion-v1", "omni"],
                    default="verl",
                    help="the trainer whose keys each step logs: verl's PPO/GRPO, or "
                         "VeRL-Omni's main_diffusion, main_diffusion_v1 (TransferQueue) "
                         "or main_omni (verl's V1 trainer on an omni model)")
    ap.add_argument("--lanes", choices=["verl-0.9", "verl-main"], default="verl-0.9",
                    help="replica lane names as verl 0.9.1 and VeRL-Omni make them "
                         "(replica_<r>) or as verl main does (rollout_replica_<r>)")
    ap.add_argument("--teacher", default="", metavar="KEY",
                    help="a teacher model (verl main's on-policy distillation) with "
                         "replicas of its own: lanes teacher_<KEY>_replica_<r>")
    ap.add_argument("--teacher-replicas", type=int, default=2)
    ap.add_argument("--teacher-slowdown", type=float, default=1.0,
                    help="the teacher's replica 1 generates this many times as long")
    ap.add_argument("--engine-traces", action="store_true",
                    help="the engines trace every request (vLLM's --otlp-traces-endpoint: "
                         "an llm_request span each) to the server")
    ap.add_argument("--engine-base-port", type=int, default=0, metavar="PORT",
                    help="replica R's engine serves /metrics on PORT+R (a platform's "
                         "pre-agreed scrape rule); default: free ports")
    ap.add_argument("--project", default="rl-insight-demo")
    ap.add_argument("--experiment-name", default=None,
                    help="default: sim-<mode>-<backend>-<time>")
    ap.add_argument("--linger", type=float, default=0.0,
                    help="keep the endpoints up this many seconds after the last step")
    ap.add_argument("--seed", type=int, default=0)
    shape = ap.add_argument_group("the run's shape (the what-if's ground truth: the same "
                                  "run made again with one change)")
    shape.add_argument("--batch", type=int, default=0, metavar="N",
                       help="N requests a step spread over the replicas, all waited for "
                            "(default: a fixed number per replica, cut at a timeout)")
    shape.add_argument("--engine-slots", type=int, default=0, metavar="K",
                       help="each FAKE engine runs K requests at once (default 16)")
    shape.add_argument("--response-tokens", type=_tokens, default=(32, 600), metavar="LO:HI",
                       help="the range a response's length is drawn from")
    shape.add_argument("--trainer-speed", type=float, default=1.0, metavar="K",
                       help="the trainer ranks' phases K times as fast")
    shape.add_argument("--weight-sync-scale", type=float, default=1.0, metavar="F",
                       help="the weight sync F times as long (0: free)")
    inject = ap.add_argument_group("faults to inject (each alert and anatomy panel shown "
                                   "end to end)")
    inject.add_argument("--straggler", type=_straggler, action="append", metavar="R:F",
                        help="replica R generates F times as long (repeatable)")
    inject.add_argument("--stall-at", type=int, default=0, metavar="STEP",
                        help="the trainer hangs before this step")
    inject.add_argument("--stall-seconds", type=float, default=30.0)
    inject.add_argument("--nan-loss-at", type=int, default=0, metavar="STEP",
                        help="actor/pg_loss is NaN from this step on")
    inject.add_argument("--kv-pressure", type=int, action="append", metavar="R",
                        help="replica R's KV cache is small: saturation, preemptions")
    inject.add_argument("--hang", type=_hang, action="append", metavar="R:STEP:SECONDS",
                        help="replica R hangs in generation at STEP for SECONDS")
    inject.add_argument("--long-request", type=_long, action="append",
                        metavar="R:STEP:TOKENS[:SECONDS]",
                        help="replica R gets one request in STEP (0: every step) that "
                             "generates TOKENS tokens over SECONDS (6) of decode (the long "
                             "tail), and the step waits for it; with --batch it is one of "
                             "the replica's share")
    inject.add_argument("--queue-burst", type=_triple, action="append", metavar="R:STEP:N",
                        help="replica R gets N more requests at once in STEP: they queue")
    inject.add_argument("--engine-down-at", type=int, default=0, metavar="STEP",
                        help="replica 0's engine stops serving /metrics at this step")
    inject.add_argument("--flood-at", type=int, default=0, metavar="STEP",
                        help="a worker with a tiny buffer floods gauges at this step, so "
                             "monitoring drops (and counts) events")
    inject.add_argument("--flood-events", type=int, default=20_000)
    inject.add_argument("--drift", type=_drift, action="append", metavar="KIND:...",
                        help="a drift from a step on, in an otherwise steady run with 1 %% "
                             "noise (examples/drifts.py): response-length:START[:RATE], "
                             "kv-shrink:REPLICA:START, weight-sync:START[:RATE]")
    ap.add_argument("--truth", metavar="FILE",
                    help="write the ground truth (step log times, each replica's "
                         "generation and each rank's phases, wall clock) as JSON")
    args = ap.parse_args(argv)
    if args.experiment_name is None:
        args.experiment_name = f"sim-{args.mode}-{args.backend}-{time.strftime('%H%M%S')}"
    return args


def _straggler(text: str) -> tuple[int, float]:
    replica, _, factor = text.partition(":")
    try:
        return int(replica), float(factor or 3.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected REPLICA:FACTOR, e.g. 1:3"
                                         ) from None


def _long(text: str) -> tuple:
    bits = text.split(":")
    try:
        if len(bits) == 4:
            return int(bits[0]), int(bits[1]), int(bits[2]), float(bits[3])
        return _triple(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected R:STEP:TOKENS[:SECONDS]"
                                         ) from None


def _tokens(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    try:
        got = int(lo), int(hi)
    except ValueError:
        got = (0, 0)
    if not 1 <= got[0] <= got[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LO:HI tokens, e.g. 200:300")
    return got


def _triple(text: str) -> tuple[int, int, int]:
    try:
        a, b, c = (int(x) for x in text.split(":"))
        return a, b, c
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected three numbers, R:STEP:N"
                                         ) from None


def _hang(text: str) -> tuple[int, int, float]:
    try:
        replica, step, seconds = text.split(":")
        return int(replica), int(step), float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected REPLICA:STEP:SECONDS, e.g. "
                                         "0:4:20") from None


def main(argv=None) -> int:
    args = parse_args(argv)
    if not os.environ.get("RL_INSIGHT_SERVER_URL") and \
            not os.environ.get("RL_INSIGHT_OTLP_ENDPOINT"):
        print("simulate_rl: set RL_INSIGHT_SERVER_URL to the server's address "
              "(`rl-insight server start` prints it)", file=sys.stderr)
        return 2
    base, local = {}, {}
    if args.transfer_queue:
        # how often the controller refreshes its gauges (TransferQueue's default: 10 s)
        base = {"env_vars": {"TQ_METRICS_COLLECT_INTERVAL":
                             os.environ.get("TQ_METRICS_COLLECT_INTERVAL", "2")}}
        if not os.environ.get("RAY_ADDRESS"):  # a local cluster: room for the controller
            local = {"num_cpus": max(4, os.cpu_count() or 1)}  # and 2 units (1 CPU each)
    att = rl_insight.ray.attach(project=args.project, experiment_name=args.experiment_name,
                                runtime_env_base=base, log_to_driver=False,
                                hardware=args.hardware, **local)
    if not att.enabled:
        print(f"simulate_rl: {att.message}", file=sys.stderr)
        return 2
    t_start = time.time()
    sim = Simulation(args)
    endpoints = sim.register()
    print(f"simulating {args.steps} {args.mode} steps: {args.replicas} {args.backend} "
          f"replicas, {args.ranks} trainer ranks; run {args.project}/{args.experiment_name}",
          flush=True)
    sim.run()
    t_end = time.time()
    if args.truth:
        Path(args.truth).write_text(json.dumps({
            "steps": sim.logged,
            "replicas": ray.get([r.ground_truth.remote() for r in sim.replicas]),
            "ranks": ray.get([r.ground_truth.remote() for r in sim.ranks]),
            "drifts": sim.drift_truth()}))
    rl_insight.flush(10)
    if args.linger:
        print(f"keeping the endpoints up for {args.linger:.0f}s", flush=True)
        time.sleep(args.linger)
    sim.tracking.finish()
    if sim.tq is not None:
        sim.clear_batches()
        data_queue.close()
    print("SIMULATION " + json.dumps({"project": args.project,
                                      "experiment_name": args.experiment_name,
                                      "mode": args.mode, "backend": args.backend,
                                      "t_start": t_start, "t_end": t_end, **endpoints}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
