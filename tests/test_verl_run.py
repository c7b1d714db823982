"""A stock verl 0.9.1 run, as verl really runs it, against the server, a real Prometheus
and a real local Ray cluster. verl's own classes are the caller (``RLInsightLogger``,
``Tracking``, ``DistProfiler.annotate``), in verl's order and structure:

- the driver sets VERL_RL_INSIGHT_ENABLE=1 and hands the server URL to the workers in
  the Ray runtime env; the trainer runs inside a ``TaskRunner`` actor; nobody calls
  ``attach()``;
- ``LLMServerManager``'s registration of the replicas' endpoints (job ``vllm``, labels
  ``[{"replica": 0}, {"replica": 1}]``) comes *before* ``Tracking`` calls ``init``;
- rollout server actors wrap each of many concurrent requests in
  ``trace_state("vllm_generate", state_lane_id="replica_<r>")``; worker ranks run
  ``DistProfiler.annotate`` methods; agent loops use ``agent_loop_session`` and
  ``trace_span``.

The rollout engines are FAKE (no GPU here): prometheus_client text format with vLLM's
real metric names, as vLLM's own /metrics route serves it.
"""

from __future__ import annotations

import json
import re

import pytest
import requests

from dashboards import build
from rl_insight.common import netaddr
from tests.conftest import Cli, free_port_overrides, prom_query, side_by_side, wait_for
from tests.fakes.otlp_receiver import FakeTempo
from tests.raycluster import RayCluster
from tests.test_simulation_e2e import query_range, substitute

pytestmark = pytest.mark.integration

PROJECT, EXPERIMENT = "verl-stock", "gsm8k-grpo-1"
CONCURRENCY = 24  # concurrent generate requests per replica

DRIVER = r'''
import asyncio, json, os, random, sys, time
import ray

sys.path.insert(0, os.path.join(os.environ["REPO"], "examples"))
import fake_engines  # FAKE vLLM engines: vLLM's metric names, text format

URL, PROJECT, EXPERIMENT, CONCURRENCY = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
PROM = sys.argv[5]  # the test's Prometheus: the run waits until a scrape has seen it
RUN = f'project="{PROJECT}",experiment_name="{EXPERIMENT}"'


def verl_batch_metrics(step, timing, n=8, p=16, r=32):
    """A GRPO batch through verl's metric_utils (compute_data_metrics, timing, throughput)
    and the trainer's sequence-length balancing (log_seqlen_unbalance), as fit() does."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.metric_utils import (compute_data_metrics, compute_throughout_metrics,
                                               compute_timing_metrics)
    from verl.utils.seqlen_balancing import log_seqlen_unbalance
    g = torch.Generator().manual_seed(step)
    lengths = torch.randint(4, r + 1, (n,), generator=g)
    lengths[0] = 0  # one aborted response
    resp_mask = (torch.arange(r)[None, :] < lengths[:, None]).float()
    attn = torch.cat([torch.ones(n, p), resp_mask], dim=1)
    scores = torch.zeros(n, r)
    scores[torch.arange(n), (lengths - 1).clamp(min=0)] = torch.rand(n, generator=g)
    adv = torch.randn(n, r, generator=g) * resp_mask
    batch = DataProto.from_dict(
        tensors={"prompts": torch.ones(n, p, dtype=torch.long),
                 "responses": torch.ones(n, r, dtype=torch.long), "attention_mask": attn,
                 "response_mask": resp_mask, "token_level_scores": scores,
                 "token_level_rewards": scores, "advantages": adv, "returns": adv},
        non_tensors={"__num_turns__": np.array([1 + i % 3 for i in range(n)])},
        meta_info={"global_token_num": attn.sum(-1).long().tolist()})
    out = compute_data_metrics(batch, use_critic=False)
    out.update(compute_timing_metrics(batch, timing))
    out.update(compute_throughout_metrics(batch, timing, n_gpus=2))
    seqlens = attn.sum(-1).long().tolist()
    out.update(log_seqlen_unbalance(seqlen_list=seqlens, partitions=[[0, 2, 4, 6], [1, 3, 5, 7]],
                                    prefix="global_seqlen"))
    return {k: float(v) for k, v in out.items()}


def scraped_after(query, t, count=1, timeout=30):
    """Wait until Prometheus holds a sample of each of `count` series of `query` taken
    at or after unix time `t` (a scrape saw the state at t); fail at the deadline."""
    import requests
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        try:
            last = requests.get(PROM + "/api/v1/query", params={
                "query": f"timestamp({query})"}, timeout=5).json()["data"]["result"]
            if len([x for x in last if float(x["value"][1]) >= t]) >= count:
                return
        except Exception as exc:
            last = repr(exc)
        time.sleep(0.2)
    raise TimeoutError(f"no scrape of {query} after {t} within {timeout}s: {last}")
# main_ppo: trainer.logger contains rl_insight -> the variable, forwarded to all workers
os.environ["VERL_RL_INSIGHT_ENABLE"] = "1"
ray.init(address="auto", runtime_env={"env_vars": {
    "VERL_RL_INSIGHT_ENABLE": "1", "RL_INSIGHT_SERVER_URL": URL,
    "TQ_METRICS_COLLECT_INTERVAL": "1",  # TransferQueue's gauges: every 1 s, not 10
    # lanes tick as often as this server's Prometheus scrapes (1 s; docs/collecting.md: the tick)
    "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "1"}})
COLLECT_S = 1.0
ray.cloudpickle.register_pickle_by_value(fake_engines)


@ray.remote(num_cpus=0)
class vLLMHttpServer:  # the shape of verl's rollout server actor
    def __init__(self, replica_rank):
        self.replica_rank = replica_rank
        self.engine = fake_engines.FakeEngine("vllm", seed=replica_rank)

    def address(self):
        return f"127.0.0.1:{self.engine.port}"

    async def generate(self, request_id):
        from verl.utils.tracking import RLInsightLogger
        with RLInsightLogger.trace_state("vllm_generate",
                                         state_lane_id=f"replica_{self.replica_rank}"):
            self.engine.submit(1)
            await asyncio.sleep(0.2 + random.random() * 0.6)
        return request_id

    async def generate_batch(self, n, keys):
        await asyncio.gather(*[self.generate(i) for i in range(n)])
        # agent_loop_tq.py: workers join TransferQueue and put what they generated
        import torch
        import transfer_queue as tq
        from tensordict import TensorDict
        tq.init()
        fields = TensorDict({"prompts": torch.ones((len(keys), 8), dtype=torch.int64),
                             "responses": torch.ones((len(keys), 32), dtype=torch.int64)},
                            batch_size=len(keys))
        await tq.async_kv_batch_put(keys=keys, fields=fields, partition_id="train",
                                    tags=[{"status": "success"} for _ in keys])
        return n


@ray.remote(num_cpus=0)
class ActorRolloutRefWorker:  # a worker rank, its methods annotated as verl's are
    def __init__(self, rank):
        from verl.utils.profiler.profile import DistProfiler
        self.profiler = DistProfiler(rank=rank)

    def _work(self, seconds):
        time.sleep(seconds)
        return True

    from verl.utils.profiler.profile import DistProfiler as _P

    @_P.annotate(role="actor_compute_log_prob")
    def compute_log_prob(self):
        return self._work(0.3)

    @_P.annotate(role="actor_update")
    def update_actor(self):
        return self._work(0.5)

    @_P.annotate(role="update_weights")
    def update_weights(self):
        return self._work(0.2)


@ray.remote(num_cpus=0)
class AgentLoopWorker:
    def run(self, step, n):
        from verl.utils.rollout_trace import RolloutTraceConfig
        from verl.utils.tracking import RLInsightLogger
        RolloutTraceConfig.get_instance().project_name = PROJECT
        RolloutTraceConfig.get_instance().experiment_name = EXPERIMENT
        for i in range(n):
            s = RLInsightLogger.agent_loop_session(sample=f"{step}-{i}", session=0,
                                                   uid=f"u{i}", global_steps=step)
            t0 = time.time_ns()
            time.sleep(0.05)
            RLInsightLogger.trace_span("tool_call", start_time_ns=t0,
                                       end_time_ns=time.time_ns(),
                                       attributes={"state_lane_id": s.identity["state_lane_id"],
                                                   "tool": "python"})
            s.finish(trajectories=[{"chain_id": 1, "reward_score": (i % 3) / 2,
                                    "num_turns": 2 + i % 3}],
                     status="ok", runner_name="tool_agent", reward_source="rule",
                     finished=True)
        return n


@ray.remote(num_cpus=0)
class TaskRunner:
    def run(self):
        import transfer_queue as tq
        from omegaconf import OmegaConf
        from verl.utils.tracking import RLInsightLogger, Tracking

        replicas = [vLLMHttpServer.remote(r) for r in range(2)]
        workers = [ActorRolloutRefWorker.remote(r) for r in range(2)]
        agents = AgentLoopWorker.remote()
        addresses = ray.get([r.address.remote() for r in replicas])
        # LLMServerManager (init_workers): engines registered before anyone calls init
        RLInsightLogger.register_rollout_metrics(
            addresses, "vllm", labels=[{"replica": r} for r in range(len(replicas))])
        config = OmegaConf.create({"trainer": {"project_name": PROJECT,
                                               "experiment_name": EXPERIMENT,
                                               "logger": ["console", "rl_insight"],
                                               "rl_insight": {}},
                                   "transfer_queue": {
                                       "enable": True, "metrics": {"enabled": True, "port": 0},
                                       "backend": {"storage_backend": "SimpleStorage",
                                                   "SimpleStorage": {
                                                       "total_storage_size": 100000,
                                                       "num_data_storage_units": 2}}}})
        # main_ppo TaskRunner.run: tq.init(config.transfer_queue) before the trainer, whose
        # Tracking registers tq.get_metrics_endpoint() (job transfer_queue) after init
        tq.init(config.transfer_queue)
        tracking = Tracking(PROJECT, EXPERIMENT, default_backend=["console", "rl_insight"],
                            config=config)
        t_start = time.time()
        update_walls = []
        for step in range(1, 5):
            t0 = time.time()
            keys = [[f"{step}-{r}-{i}" for i in range(CONCURRENCY)] for r in range(2)]
            every = [k for ks in keys for k in ks]
            # trainer_base.py: prompts registered as tags, then dispatched for generation
            tq.kv_batch_put(keys=every, partition_id="train",
                            tags=[{"is_prompt": True, "status": "pending",
                                   "global_steps": step} for _ in every])
            ray.get([r.generate_batch.remote(CONCURRENCY, ks)
                     for r, ks in zip(replicas, keys)])
            t_put = time.time()
            ready = [k for k, v in tq.kv_list("train")["train"].items()
                     if v.get("status") == "success"]
            tq.kv_batch_get(keys=ready, partition_id="train", select_fields=["responses"])
            gen = time.time() - t0
            ray.get([w.compute_log_prob.remote() for w in workers])
            ray.get([w.update_actor.remote() for w in workers])
            t_update = time.time()
            ray.get([w.update_weights.remote() for w in workers])
            update_walls.append(time.time() - t_update)  # the ranks' update, as waited on
            ray.get(agents.run.remote(step, 4))
            timing = {"gen": gen, "old_log_prob": 0.3, "update_actor": 0.5,
                      "update_weights": 0.2, "step": time.time() - t0}
            # what the workers return (dp_actor's losses, the engine's MFU and memory)
            data = {"actor/pg_loss": -0.01 * step, "actor/entropy": 1.5 - 0.1 * step,
                    "actor/pg_clipfrac": 0.003, "actor/pg_clipfrac_lower": 0.0001,
                    "actor/ppo_kl": 0.0007, "actor/grad_norm": 0.4, "actor/lr": 1e-6,
                    "perf/mfu/actor": 0.31, "perf/max_memory_allocated_gb": 50.0,
                    "perf/max_memory_reserved_gb": 58.0, "perf/cpu_memory_used_gb": 96.0,
                    "training/global_step": step, "training/epoch": 0}
            # what RayPPOTrainer.fit computes from the batch, with verl's own functions
            data.update(verl_batch_metrics(step, timing))
            if step % 2 == 0:
                data["val-core/openai/gsm8k/reward/mean@1"] = 0.4 + 0.05 * step
                data["val-aux/openai/gsm8k/acc/mean@1"] = 0.39
            tracking.log(data=data, step=step)
            # the partition's series exist only while it holds the batch: a scrape sees
            # them, refreshed after the put (TransferQueue's gauges: every second)
            scraped_after(f'tq_partition_samples_total{{{RUN},partition_id="train"}}',
                          t_put + COLLECT_S)
            tq.kv_clear(keys=every, partition_id="train")
        # the counters of the last clear reach a scrape of the controller and both units
        scraped_after(f'up{{{RUN},job=~"transfer_queue.*"}}', time.time() + COLLECT_S,
                      count=3)
        tracking.finish()
        tq.close()
        return {"t_start": t_start, "addresses": addresses, "update_walls": update_walls}


print("RESULT " + json.dumps(ray.get(TaskRunner.remote().run.remote())))
'''


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    cli = Cli(home, free_port_overrides())
    tempo = FakeTempo(netaddr.free_port()).start()  # FAKE Tempo: real OTLP decoding
    url = cli.url
    # no RL_INSIGHT_* at all; no dashboard: nothing here asks Ray's state API
    cluster = RayCluster(tmp_path_factory.mktemp("ray"), dashboard=False)
    try:
        side_by_side(lambda: cli.start("prometheus.scrape_interval=1s",
                                       f"traces.relay_url={tempo.url}"), cluster.start)
        import time

        from tests.conftest import REPO

        r = cluster.run_driver(DRIVER, url, PROJECT, EXPERIMENT, str(CONCURRENCY),
                               cli.prometheus, timeout=300, REPO=str(REPO))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
        line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
        result = json.loads(line[len("RESULT "):])
        result["t_done"] = time.time()
        yield cli, url, result, tempo
    finally:
        cluster.stop()
        cli.run("server", "stop")
        tempo.stop()


def test_engine_targets_registered_before_init_carry_the_run(verl_run):
    cli, url, result, _ = verl_run
    targets = requests.get(url + "/api/v1/prometheus/targets", timeout=5).json()["targets"]
    engines = [t for t in targets if t["job_name"] == "vllm"]
    assert sorted(t["target"] for t in engines) == sorted(result["addresses"])
    assert {(t["project"], t["experiment_name"]) for t in engines} == {(PROJECT, EXPERIMENT)}
    assert sorted(t["labels"]["replica"] for t in engines) == ["0", "1"]
    # the engines die with the driver's actors: ask for what Prometheus stored during the run
    start, end = result["t_start"] - 5, result["t_done"] + 10
    q = f'vllm:num_requests_running{{project="{PROJECT}",experiment_name="{EXPERIMENT}"}}'
    series = wait_for(lambda: query_range(cli.prometheus, q, start, end), 30,
                      "engine series under the run in Prometheus")
    assert sorted(s["metric"]["replica"] for s in series) == ["0", "1"]
    # no engine series without the run
    assert not query_range(cli.prometheus, 'vllm:num_requests_running{project=""}', start, end)


def test_the_whole_config_verl_hands_its_trackers_is_kept_with_the_run(verl_run):
    """verl's logger passes init() only trainer.rl_insight; the whole config reaches the
    server all the same (rl_insight/integrations/verl.py): in this stock run no worker
    setup hook patched verl, so its logger's call in progress in the TaskRunner actor is
    read when it names the run."""
    _, url, _, _ = verl_run
    r = requests.get(url + "/api/v1/experiments/config", timeout=5, params={
        "project": PROJECT, "experiment_name": EXPERIMENT})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["source"] == "verl", got
    assert got["values"]["trainer.logger"] == '["console", "rl_insight"]'
    assert got["values"]["transfer_queue.backend.SimpleStorage.num_data_storage_units"] == 2


def test_transfer_queue_registered_as_verl_does_with_its_storage_units(verl_run):
    """verl's Tracking registers only tq.get_metrics_endpoint(); the storage units that
    serve their own request metrics are found and registered under the run as well."""
    _, url, _, _ = verl_run
    targets = requests.get(url + "/api/v1/prometheus/targets", timeout=5).json()["targets"]
    jobs = {}
    for t in targets:
        if t["job_name"].startswith("transfer_queue"):
            assert (t["project"], t["experiment_name"]) == (PROJECT, EXPERIMENT), t
            jobs[t["job_name"]] = jobs.get(t["job_name"], 0) + 1
    assert jobs == {"transfer_queue": 1, "transfer_queue_storage": 2}, jobs


def test_concurrent_requests_are_busy_intervals(verl_run):
    """24 concurrent requests per replica and step: one vllm_generate span per replica and
    step, not one per request; the rank lanes carry verl's roles."""
    _, url, _, _ = verl_run

    def lanes():
        rows = requests.get(url + "/api/v1/lanes", params={"project": PROJECT,
                            "experiment_name": EXPERIMENT}, timeout=5).json()["lanes"]
        got = {r["lane"]: r for r in rows}
        return got if {"replica_0", "replica_1", "rank_0", "rank_1"} <= set(got) else None

    got = wait_for(lanes, 20, "replica and rank lanes of the run at the server")
    for lane in ("replica_0", "replica_1"):
        assert got[lane]["states"] == {"vllm_generate": 4}, got[lane]  # not 4 * 24
    for lane in ("rank_0", "rank_1"):
        assert got[lane]["states"] == {"actor_compute_log_prob": 4, "actor_update": 4,
                                       "update_weights": 4}, got[lane]


def test_every_dashboard_of_the_run_has_data(verl_run):
    cli, _, result, _ = verl_run
    prom = cli.prometheus
    run = {"project": PROJECT, "experiment_name": EXPERIMENT}
    q = (f'max(rl_insight_monitor_training_global_step{{project="{PROJECT}",'
         f'experiment_name="{EXPERIMENT}"}})')
    wait_for(lambda: any(float(x["value"][1]) == 4 for x in prom_query(prom, q)), 30,
             "the last step of the verl run in Prometheus")
    wait_for(lambda: prom_query(prom, f'rl_insight_monitor_agent_loop_sessions_total'
                                      f'{{project="{PROJECT}"}}'), 30, "agent-loop sessions")
    # what a stock verl 0.9.1 run does not produce: no per-request lanes (verl opens none),
    # no hardware exporters; vLLM registers its weight-update and sleep-mode families only
    # with VLLM_SERVER_DEV_MODE=1, and this run syncs no weights; verl reads TransferQueue
    # by key, which TransferQueue does not count as any task's consumption
    not_in_stock_verl = {"Pooled lanes in each state", "Weight-update operations (p90)",
                         "Consumption progress"}
    checked, empty = 0, []
    for d in build.dashboards():
        if d.uid not in ("rl-insight-training", "rl-insight-rollout-vllm",
                         "rl-insight-timeline", "rl-insight-vllm-async",
                         "rl-insight-agent-loop", "rl-insight-transfer-queue"):
            continue
        for section in d.sections:
            for panel in section.panels:
                if panel.repeat:  # one per logged name: tests/test_simulation_e2e.py
                    continue
                if panel.title in not_in_stock_verl or panel.needs:  # alerts, exporters
                    continue
                for query in panel.queries:
                    if query.datasource != "prometheus":
                        continue
                    expr = substitute(query.expr, run)
                    checked += 1
                    if not query_range(prom, expr, result["t_start"] - 5,
                                       result["t_done"] + 10):
                        empty.append(f"{d.uid} / {panel.title}: {expr}")
    assert checked > 80
    assert not empty, "panels without data for the verl run:\n" + "\n".join(empty)


def test_step_anatomy_of_a_stock_verl_run(verl_run):
    """verl logs training/global_step before timing_s/step in each step's dict and never
    says where a step starts: the marks still cut the replica and rank lanes into its four
    steps, the first one from its own timing_s/step."""
    _, url, result, _ = verl_run

    def rows():
        r = requests.get(url + "/api/v1/anatomy", params={
            "project": PROJECT, "experiment_name": EXPERIMENT}, timeout=5)
        steps = r.json().get("steps", []) if r.status_code == 200 else []
        return steps if len(steps) == 4 else None

    def settled():
        """A row made before a slow lane actor's spans arrived is made again when they
        do (late spans, docs/anatomy.md): wait for rows in which both replicas
        generated."""
        steps = rows()
        return steps if steps and all(
            set(s["replicas"]) == {"0", "1"} and
            all(r["generate_s"] > 0 for r in s["replicas"].values()) for s in steps) \
            else None

    wait_for(rows, 30, "four steps in the anatomy of the verl run")
    steps = settled() or wait_for(settled, 40, "four steps, both replicas generating in each")
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    for prev, cur in zip(steps, steps[1:], strict=False):
        assert cur["start_ns"] == prev["end_ns"]  # contiguous windows
    for s in steps:
        assert set(s["replicas"]) == {"0", "1"}
        assert all(r["generate_s"] > 0 for r in s["replicas"].values()), s
        assert set(s["phases"]) == {"actor_compute_log_prob", "actor_update",
                                    "update_weights"}, s["phases"]
        # the workers' 0.2 s of update each, at most as long as the trainer waited for
        # both (a loaded machine starts the two ranks' calls apart: 0.84 s in CI once).
        # Measured 2026-12-07, 4 runs beside one busy loop: 0.200-0.289 s, never over the
        # wait (its 0.05 s unused: 0.051 s to spare at least)
        wall = result["update_walls"][s["step"] - 1]
        assert 0.15 < s["weight_update_s"] <= wall + 0.05, (wall, s)
        assert s["staleness"] == 0


def test_spans_reach_the_trace_path_under_the_run(verl_run):
    """trace_span and agent_loop_session, gated on the API level by verl, delivered to
    the trace path (the server relays to the FAKE Tempo) under the run."""
    _, _, _, tempo = verl_run

    def named(name):
        return [a for a in tempo.attr_maps() if a.get("span_name") == name]

    sessions = wait_for(lambda: len(named("agent_session")) == 16 and named("agent_session"),
                        20, "16 agent_session spans at the trace receiver")
    assert {(a["project"], a["experiment_name"]) for a in sessions} == {(PROJECT, EXPERIMENT)}
    assert all(re.fullmatch(r"experiment=.+/sample=\d-\d/session=0/traj=0",
                            a["state_lane_id"]) for a in sessions)
    assert {a["status"] for a in sessions} == {"ok"}
    for name in ("tool_call", "agent_trajectory", "actor_update"):
        assert named(name), name
    generate = named("vllm_generate")
    assert len(generate) == 8  # 2 replicas x 4 steps, each covering its step's requests
    assert sum(a.get("blocks", 1) for a in generate) == 2 * 4 * CONCURRENCY
