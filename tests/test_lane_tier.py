"""The lane tier at reduced size on a real multi-node Ray cluster: 64 trainer-rank lanes
and 8 replica lanes from processes on 4 nodes (the shared cluster's head and 3 nodes
joined for this module) give a lane actor per replica and one per node, never one per
rank; every state and span reaches the server under its run (the dashboards' timeline
queries and the trace receiver); no lane actor is left a minute after the job ends (its
grace after the job set to 5 s here: the default 20 s plus the 10-s check is what the
minute allows, tests/test_lifetime.py)."""

from __future__ import annotations

import json
import time

import pytest
import requests

from dashboards import build
from tests.conftest import prom_query, wait_equal, wait_for
from tests.test_simulation_e2e import query_range, substitute

pytestmark = pytest.mark.integration
RUN = {"project": "lane-tier", "experiment_name": "64-ranks"}
NAMESPACE = "lane_tier"
NODES = 4
RANKS, REPLICAS = 64, 8
STATES = ("actor_compute_log_prob", "actor_update", "update_weights")

DRIVER = r'''
import asyncio, json, sys, time, ray, rl_insight
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
RANKS, REPLICAS, STATES = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
EXIT_GRACE_S = 5  # the lane actors' grace after the job (client.lane_exit_grace_s)
SECONDS = 4.0  # a state spans several 1 s scrapes: on a loaded machine half of them
# time out (measured in CI: 31 of 67 of the server's)
# the job's own namespace for its hub and lane actors, in every worker too; lanes
# tick every second, as often as the test's Prometheus scrapes (the default 5 s tick
# matches the default 5 s scrape: a state shorter than both is in the spans only)
att = rl_insight.ray.attach(project="lane-tier", experiment_name="64-ranks",
                            runtime_env_base={"env_vars": {
                                "RL_INSIGHT_CLIENT_RAY_NAMESPACE": "lane_tier",
                                "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "1",
                                "RL_INSIGHT_CLIENT_LANE_EXIT_GRACE_S": str(EXIT_GRACE_S)}})
assert att.ok, att.message
nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])


@ray.remote(num_cpus=0)
class Worker:
    """A process on one node: the ranks it hosts finish their states in turn (as verl's
    DistProfiler.annotate blocks do), its replica serves concurrent requests."""

    def __init__(self, ranks, replica):
        self.ranks, self.replica = ranks, replica

    async def generate(self):
        async def request():
            with rl_insight.trace_state("vllm_generate",
                                        state_lane_id=f"replica_{self.replica}"):
                await asyncio.sleep(SECONDS)
        await asyncio.gather(*[request() for _ in range(8)])

    def train(self, step):
        """Each rank in a thread of its own, its states long enough for a 1 s scrape
        to see (the timeline's state panel shows what a scrape saw)."""
        from concurrent.futures import ThreadPoolExecutor

        def rank(r):
            for state in STATES:
                with rl_insight.trace_state(state, state_lane_id=f"rank_{r}", step=step):
                    time.sleep(SECONDS)
        with ThreadPoolExecutor(len(self.ranks)) as pool:
            list(pool.map(rank, self.ranks))
        return ray.get_runtime_context().get_node_id()

    def flush(self):
        return rl_insight.flush(30)


per = RANKS // REPLICAS
workers = [Worker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
    nodes[w % len(nodes)], soft=False)).remote(list(range(w * per, (w + 1) * per)), w)
    for w in range(REPLICAS)]
for step in range(2):
    ray.get([w.generate.remote() for w in workers])
    placed = ray.get([w.train.remote(step) for w in workers])
assert all(ray.get([w.flush.remote() for w in workers]))
from ray.util.state import list_actors
alive = sorted(a.name for a in list_actors(filters=[("ray_namespace", "=", "lane_tier")],
                                           limit=1000) if a.state == "ALIVE")
for name in alive:
    if name.startswith("rl_insight_lane_"):
        ray.get(ray.get_actor(name, namespace="lane_tier").flush.remote())
rl_insight.finish()
print("RESULT " + json.dumps({"nodes": nodes, "placed": sorted(set(placed)),
                              "actors": alive, "t": time.time()}))
'''


@pytest.fixture(scope="module")
def tier(ray_world, tmp_path_factory):
    """Three more nodes join the shared cluster for this module, and leave after it."""
    cluster = ray_world.cluster
    marks: list[str] = []
    try:
        # one after the other: three raylets registering at once with a loaded GCS, one
        # missed Ray's 30 s (RAY_raylet_start_wait_time_s) once, 2026-12-06
        for i in range(NODES - 1):
            marks.append(cluster.add_node(tmp_path_factory.mktemp(f"node{i}")))
        t0 = time.time()
        r = cluster.run_driver(DRIVER, str(RANKS), str(REPLICAS), ",".join(STATES),
                               timeout=300, RL_INSIGHT_CLIENT_RAY_NAMESPACE=NAMESPACE)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
        line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
        yield ray_world, {**json.loads(line[len("RESULT "):]), "t_start": t0,
                          "t_done": time.time()}
    finally:
        cluster.remove_nodes(marks)


def test_a_lane_actor_per_replica_and_per_node_never_per_rank(tier):
    _, res = tier
    assert len(res["nodes"]) == NODES and len(res["placed"]) == NODES, res
    lanes = [a for a in res["actors"] if a.startswith("rl_insight_lane_")]
    replicas = {f"rl_insight_lane_replica_{r}" for r in range(REPLICAS)}
    per_node = {a for a in lanes if a.startswith("rl_insight_lane_node_")}
    assert replicas <= set(lanes)
    assert len(per_node) == NODES, lanes  # the 64 rank lanes: one actor per node
    assert len(lanes) == REPLICAS + NODES, lanes
    assert {n[:12] for n in res["nodes"]} == {a.rsplit("_", 1)[1] for a in per_node}


def test_every_state_and_span_is_under_its_run(tier):
    world, res = tier
    prom = world.cli.prometheus
    sel = f'project="{RUN["project"]}",experiment_name="{RUN["experiment_name"]}"'
    want = {f"rank_{r}" for r in range(RANKS)} | {f"replica_{r}" for r in range(REPLICAS)}

    def lanes_in_prometheus() -> set[str]:
        got = prom_query(prom, f"count by (state_lane_id) "
                               f"(rl_insight_monitor_lane_state{{{sel}}})")
        return {x["metric"]["state_lane_id"] for x in got}

    def durations() -> dict[str, float]:  # replicas per lane, the ranks summed per state
        got = prom_query(prom, f"sum by (state_lane_id) "
                               f"(rl_insight_monitor_state_duration_seconds_count{{{sel}}})")
        return {x["metric"]["state_lane_id"]: float(x["value"][1]) for x in got}

    wait_equal(lanes_in_prometheus, want, 60, "all 72 lanes' states in Prometheus")
    expected = {"ranks": RANKS * len(STATES) * 2, **{f"replica_{r}": 2 for r in range(REPLICAS)}}
    wait_equal(durations, expected, 60, "every finished state counted once")
    rows = requests.get(world.url + "/api/v1/lanes", params=RUN, timeout=10).json()["lanes"]
    by_lane = {r["lane"]: r["states"] for r in rows}
    for r in range(RANKS):  # each rank's two steps, every state, none lost or doubled
        assert by_lane[f"rank_{r}"] == {s: 2 for s in STATES}, by_lane[f"rank_{r}"]
    for r in range(REPLICAS):  # 8 concurrent requests: one busy interval a step
        assert by_lane[f"replica_{r}"] == {"vllm_generate": 2}

    def spans() -> set[str]:
        return {a["state_lane_id"] for a in world.tempo.attr_maps()
                if a.get("project") == RUN["project"] and
                a.get("experiment_name") == RUN["experiment_name"]}

    wait_equal(spans, want, 60, "every lane's spans at the trace receiver")
    timeline = next(d for d in build.dashboards() if d.uid == "rl-insight-timeline")
    checked = 0
    for section in timeline.sections:
        for panel in section.panels:
            if panel.repeat:  # one per logged name: tests/test_simulation_e2e.py
                continue
            for q in panel.queries:
                if q.datasource != "prometheus" or panel.title.startswith("Pooled"):
                    continue  # no per-request or per-trajectory lanes in this run
                expr = substitute(q.expr, RUN)
                checked += 1
                window = (res["t_start"] - 5, res["t_done"] + 5)
                assert query_range(prom, expr, *window), (
                    f"{panel.title}: {expr}; scrapes that failed meanwhile (job: count): "
                    + str({x["metric"].get("job"): len(x["values"]) for x in
                           query_range(prom, "up == 0", *window)}))
    assert checked >= 3


def test_no_lane_actor_outlives_its_job_by_a_minute(tier):
    world, res = tier

    def left() -> list[str]:
        return sorted(a["name"] for a in world.cluster.alive("actors", ray_namespace=NAMESPACE)
                      if a["name"].startswith("rl_insight_lane_"))

    ended = res["t"]
    wait_for(lambda: not left(), 60 - (time.time() - ended), "no lane actor a minute after "
             "the job ended", interval=2)
