"""verl's torch-profiler traces imported into a real server (issue 58): the traces are
made by verl 0.9.1's own profiler classes (examples/profiled_ranks.py: ``DistProfiler``
with ``tool=torch`` on three gloo ranks, started and stopped per step as verl's trainer
does, the stages annotated with verl's roles, the last step in discrete mode), rank 2
busy-looping before each all-reduce of ``actor_update`` from step 2; the same ranks
monitored live (``DistProfiler.annotate`` puts each stage on lane ``rank_<r>``, rank 0
logs the step). Then the real CLI imports the directory, with damaged files among the
good ones, into a run of its own and into the live run, and one step's files are
uploaded through the API one at a time.

Before issue 58 none of it existed: `rl-insight import --profiler` was refused by the
parser and the live run's rows could not name the slow rank (its ranks met and started
together: hidden without torch's Flight Recorder)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from rl_insight.wire.attributes import PROCESS_ATTR
from tests.conftest import REPO, wait_for
from tests.rank_truth import clear_culprit
from tests.rank_truth import leads as leads_of

pytestmark = pytest.mark.integration

EXAMPLE = REPO / "examples" / "profiled_ranks.py"
PROJECT = "profiled"
LIVE = {"project": PROJECT, "experiment_name": "live"}
IMPORTED = {"project": PROJECT, "experiment_name": "imported"}
UPLOADED = {"project": PROJECT, "experiment_name": "uploaded"}
STEPS, SLOW_RANK, SLOW_FROM = 4, 2, 2
MICRO_S, EXTRA_S = 0.03, 0.1  # four micro-batches of actor_update: the straggler's 0.4 s
# the trace's lead against the ranks' own clocks (each arrival held to its collective's
# end, rl_insight/profiler/export.py): measured 2026-12-07, 5 runs (3 beside a busy loop),
# 15 slow steps: -0.014 to +0.004 s apart; two fresh clones had been 0.1 s short with a
# common meeting point. Kept at 0.075, twice the largest seen before this measure
TRUTH_S = 0.075
BAD = {"actor_train_step3_rank9-of-3_pid1_20261207000000000.json.gz": "truncated or damaged gzip",
       "actor_train_step3_rank8-of-3_pid2_20261207000000000.json.gz": "not a whole JSON",
       "worker7.1733.pt.trace.json": "no rank"}


@dataclass
class Made:
    out: Path
    timeline: Path
    imported: subprocess.CompletedProcess
    joined: subprocess.CompletedProcess
    live_before: dict  # the live run's rows before the import joined it


def _env(url: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}
    # three ranks handing over at once beside the suite's heaviest start: their finish()
    # gets 60 s, not 3, to deliver the last step (a fresh clone of 2026-12-07 waited 90 s
    # for the live run's fourth row with 3; one beside a busy core, 2026-12-08, measured
    # the shared server answering no span post or registration for 20 s and more, the
    # TRL worlds training beside it), as the simulated pairs' drivers do (tests/worlds.py)
    env.update(RL_INSIGHT_SERVER_URL=url, VERL_RL_INSIGHT_ENABLE="1", PYTHONPATH=str(REPO),
               RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S="0.5",
               RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S="60")
    return env


def rows(url: str, run: dict, steps: int = STEPS) -> dict | None:
    got = requests.get(url + "/api/v1/anatomy", params=run, timeout=10)
    found = {s["step"]: s for s in got.json().get("steps", [])} if got.ok else {}
    return found if len(found) >= steps else None


def _damage(out: Path) -> None:
    """A truncated gzip (a real trace cut), no JSON, a Chrome trace saying no rank."""
    real = sorted(out.glob("actor_train_step2_rank*.json.gz"))[0].read_bytes()
    names = list(BAD)
    (out / names[0]).write_bytes(real[:len(real) // 2])
    (out / names[1]).write_bytes(gzip.compress(b"this is no trace"))
    (out / names[2]).write_text(json.dumps({"baseTimeNanoseconds": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "actor_update", "ts": 1, "dur": 2}]}))


@pytest.fixture(scope="module")
def made(route_server, tmp_path_factory) -> Made:
    url, cli = route_server.url, route_server.cli
    out = tmp_path_factory.mktemp("profiled") / "traces"
    r = subprocess.run(
        [sys.executable, str(EXAMPLE), "--out", str(out), "--project", PROJECT,
         "--experiment-name", LIVE["experiment_name"], "--steps", str(STEPS),
         "--slow-rank", str(SLOW_RANK), "--slow-from", str(SLOW_FROM), "--micro-s",
         str(MICRO_S), "--extra-s", str(EXTRA_S), "--discrete-last"],
        env=_env(url), capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    seen: dict = {}

    def live_rows() -> dict | None:
        seen.update(rows(url, LIVE, 0) or {})
        return dict(seen) if len(seen) >= STEPS else None
    before = wait_for(live_rows, 90, f"the live run's rows (ranks' exit: {r.stderr[-800:]})")
    _damage(out)
    timeline = out.parent / "timeline.json"
    common = ("import", str(out), "--profiler", "torch", "--server-url", url,
              "--project", PROJECT, "--experiment-name")
    imported = cli.run(*common, IMPORTED["experiment_name"], "--timeline", str(timeline))
    joined = cli.run(*common, LIVE["experiment_name"], "--jobs", "2")  # two processes
    return Made(out, timeline, imported, joined, before)


def test_each_rank_is_a_lane_with_verl_s_stages_and_every_step_a_row(made, route_server):
    assert made.imported.returncode == 0, made.imported.stdout + made.imported.stderr
    lanes = requests.get(route_server.url + "/api/v1/lanes", params=IMPORTED,
                         timeout=10).json()["lanes"]
    states = {lane["lane"]: set(lane.get("states") or ()) for lane in lanes}
    for r in range(3):
        assert {"ref_compute_log_prob", "actor_compute_log_prob", "actor_update",
                "train_batch"} <= states[f"rank_{r}"], states
    assert not {f"rank_{r}" for r in (8, 9)} & set(states)
    got = wait_for(lambda: rows(route_server.url, IMPORTED), 60, "the imported rows")
    assert sorted(got) == list(range(1, STEPS + 1))
    for step, row in got.items():
        assert set(row["ranks"]) == {"0", "1", "2"}, (step, row["ranks"])
        assert {"ref_compute_log_prob", "actor_compute_log_prob", "actor_update"} <= \
            set(row["phases"]), (step, row["phases"])
        assert row["trainer_busy_s"] > 0 and row["source"] == "lanes", row


def _stamped(out: Path) -> list[tuple[str, dict]]:
    """(rank, stamp) of every stage each rank stamped (examples/profiled_ranks.py)."""
    return [(f.stem.removeprefix("stamps_rank"), s) for f in out.glob("stamps_rank*.json")
            for s in json.loads(f.read_text())]


def _seconds(s: dict) -> float:
    return (s["after_ns"] - s["before_ns"]) / 1e9


def stamps(out: Path) -> dict[int, tuple[dict[str, float], dict[str, float]]]:
    """step -> (rank -> what it waited in actor_update's collectives, rank -> the stage's
    length), by the ranks' own clocks: the figures as they happened on this host, loaded
    or not."""
    waits: dict[int, dict[str, float]] = {}
    lengths: dict[int, dict[str, float]] = {}
    for rank, s in _stamped(out):
        if s["stage"] == "actor_update":
            waits.setdefault(s["step"], {})[rank] = s["wait_s"]
            lengths.setdefault(s["step"], {})[rank] = _seconds(s)
    return {step: (waits[step], lengths[step]) for step in waits}


def stage_lengths(out: Path) -> dict[int, dict[str, float]]:
    """step -> rank -> the seconds of its three stages by its own clock."""
    got: dict[int, dict[str, float]] = {}
    for rank, s in _stamped(out):
        by_rank = got.setdefault(s["step"], {})
        by_rank[rank] = by_rank.get(rank, 0.0) + _seconds(s)
    return got


def stage_leads(out: Path) -> dict[tuple[int, str], dict[str, float]]:
    """(step, stage) -> rank -> its lead in that stage's collectives (ranks' clocks)."""
    waits: dict[tuple[int, str], dict[str, float]] = {}
    for rank, s in _stamped(out):
        waits.setdefault((s["step"], s["stage"]), {})[rank] = s["wait_s"]
    return {k: leads_of(w) for k, w in waits.items()}


def leads(out: Path) -> dict[int, dict[str, float]]:
    """step -> rank -> how much less it waited in actor_update than the median other rank
    (ranks' clocks)."""
    return {step: v for (step, stage), v in stage_leads(out).items()
            if stage == "actor_update"}


def clear_steps(out: Path) -> dict[int, str | None]:
    """step -> the rank its own clocks show leading clearly enough for the anatomy's rule
    to name (tests/rank_truth.py), or None: beside a busy loop a CI host slowed rank 0
    with the injected rank 2 in one step (0.82 s and 0.43 s computing against rank 1's),
    and the rule names no rank where the others differ that much."""
    return {step: clear_culprit(w, d) for step, (w, d) in stamps(out).items()}


def test_the_slow_rank_is_named_from_its_first_slow_step_with_its_kind_and_stage(
        made, route_server):
    got = wait_for(lambda: rows(route_server.url, IMPORTED), 60, "the imported rows")
    truth, clear = leads(made.out), clear_steps(made.out)
    by_stage = stage_leads(made.out)
    named = 0
    for step, row in got.items():
        c = row["culprit"]
        if step < SLOW_FROM or clear[step] is None:
            # a rank named here did lead, by its own clock, in the phase it was named in
            # (a hiccup, or the load's: beside a busy core a fresh clone of 2026-12-07
            # named one in step 1's one-collective log-prob stage); train_batch is inside
            # actor_update
            if c is not None:
                real = by_stage[(step, "actor_update" if c["phase"] == "train_batch"
                                 else c["phase"])]
                assert c["rank"] == max(real, key=real.get) and real[c["rank"]] > 0, \
                    (step, c, real)
            continue
        assert clear[step] == str(SLOW_RANK), (step, truth[step])
        assert c is not None, (step, row["ranks"], row["rank_evidence"], truth[step])
        named += 1
        assert (c["rank"], c["kind"], c["arrivals"]) == (str(SLOW_RANK), "compute", "torch")
        assert c["phase"] in ("actor_update", "train_batch"), c  # train_batch: inside it
        # its busy loops' 4 x 0.1 s as this host ran them (a fresh clone of 2026-12-07
        # measured 0.75 s against the 0.4 injected): the collectives' arrivals in the
        # profiler's trace against the rank's own clock around them, within TRUTH_S
        assert c["lead_s"] == pytest.approx(truth[step][str(SLOW_RANK)], abs=TRUTH_S), \
            (step, c, truth[step])
    text = route_server.cli.run("report", "--server-url", route_server.url, "--project",
                                PROJECT, "--experiment-name", IMPORTED["experiment_name"],
                                "--step", str(STEPS - 1)).stdout
    assert named, ("no slow step cleared the rule by the ranks' own clocks", truth)
    if clear[STEPS - 1]:
        assert f"the step waited for rank {SLOW_RANK} (actor, node " in text, text
        assert "it computed" in text and "from the torch profiler's collectives" in text, \
            text


def test_a_damaged_file_among_good_ones_is_named_and_skipped_nothing_of_it_sent(
        made, route_server):
    out = made.imported.stdout
    assert f"{len(list(made.out.glob('actor_*.json.gz'))) - 2} of " in out, out
    assert "3 ranks (0-2), 4 steps (1-4)" in out, out
    for name, why in BAD.items():
        line = next((x for x in out.splitlines() if x.startswith(f"skipped {made.out / name}")),
                    "")
        assert why in line, (name, out)
    assert (f"rl-insight report --project {PROJECT} --experiment-name "
            f"{IMPORTED['experiment_name']} --step {STEPS}") in out, out
    spans = requests.get(route_server.url + "/api/v1/traces/recent", params=IMPORTED,
                         timeout=10).json()["spans"]
    assert spans and not [s for s in spans if any(n in s["process_id"] for n in BAD)]


def test_a_live_run_gets_the_imported_ranks_joined_not_doubled(made, route_server):
    url = route_server.url
    assert made.joined.returncode == 0, made.joined.stdout + made.joined.stderr
    runs = [e for e in requests.get(url + "/api/v1/experiments", timeout=10).json()[
        "experiments"] if e["project"] == PROJECT]
    assert sorted(e["experiment_name"] for e in runs if e["experiment_name"] == "live") == \
        ["live"]
    # live alone, the ranks met and started together: nobody named from the boundaries
    assert not any((r["culprit"] or {}).get("arrivals") for r in made.live_before.values())

    # made again: each slow step its ranks' clocks show clearly led, named from the
    # imported collectives (tests/rank_truth.py; the others may name none)
    clear = {s: r for s, r in clear_steps(made.out).items() if s >= SLOW_FROM and r}
    assert clear, ("no slow step cleared the rule by the ranks' own clocks",
                   leads(made.out))

    def joined():
        got = rows(url, LIVE)
        return got if got and all((got.get(s, {}).get("culprit") or {}).get("arrivals")
                                  for s in clear) else None

    got = wait_for(joined, 60, "the live run's rows made again with the imported ranks")
    lengths = stage_lengths(made.out)
    assert sorted(got) == sorted(made.live_before)  # the same steps, none added
    for step, row in got.items():
        # a phase told twice would count twice: each rank's figures within its stages'
        # length by its own clock (not the step's: a phase is read whole in the step it
        # ended in, and rank 2 began its first before the live step's mark, 1.37 s in a
        # 1.30-s step on a quiet CI clone). Measured 2026-12-07, 6 runs beside one busy
        # loop: 0.0004-0.04 s under it, never over (72 figures)
        for r, fig in row["ranks"].items():
            assert fig["compute_s"] + fig["wait_s"] <= lengths[step][r] + TRUTH_S, \
                _told(url, step, r, lengths[step], row)
        if step in clear:
            c = row["culprit"]
            assert (c["rank"], c["kind"], c["arrivals"]) == (str(SLOW_RANK), "compute",
                                                              "torch"), (step, c)


def _told(url: str, step: int, rank: str, lengths: dict, row: dict) -> str:
    """What the server holds of the rank's lane, live and imported, for a figure over
    its stages' length (once, beside a busy core: rank 1 at step 1, 0.56 s of 0.29, as
    if told twice; not reproduced in 18 runs beside three busy loops and another world;
    a batch a sender sends again is counted once since, tests/test_anatomy.py)."""
    got = requests.get(url + "/api/v1/traces/recent", params=LIVE, timeout=10).json()
    spans = sorted((s["start_ns"], s["end_ns"], s["state"], s.get(PROCESS_ATTR, ""))
                   for s in got["spans"] if s["lane"] == f"rank_{rank}")
    t0 = spans[0][0] if spans else 0
    lane = [f"{state} {(a - t0) / 1e6:.3f}-{(b - t0) / 1e6:.3f} ms {proc}"
            for a, b, state, proc in spans]
    return json.dumps({"step": step, "rank": rank, "stages_s": lengths,
                       "ranks": row["ranks"], "lane": lane}, indent=1)


def test_the_timeline_opens_with_every_rank_and_the_server_s_too(made, route_server):
    trace = json.loads(made.timeline.read_text())
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}
    assert sorted(names) == [0, 1, 2] and all(n.startswith(f"rank {p} (actor, node ")
                                              for p, n in names.items()), names
    for rank in range(3):
        cats = {(e["cat"], e["name"]) for e in trace["traceEvents"]
                if e.get("ph") == "X" and e["pid"] == rank}
        assert ("range", "actor_update") in cats and ("collective", "gloo:all_reduce") in cats
    served = requests.get(route_server.url + "/api/v1/traces/timeline", params=IMPORTED,
                          timeout=10).json()
    threads = {e["args"]["name"] for e in served["traceEvents"] if e["name"] == "thread_name"}
    assert {"rank_0", "rank_1", "rank_2", "trainer"} <= threads, threads


def test_a_step_s_files_uploaded_one_at_a_time_make_its_row(made, route_server):
    url = route_server.url
    files = sorted(made.out.glob(f"actor_train_step{STEPS - 1}_rank[0-2]-*.json.gz"))
    assert len(files) == 3
    for f in files:
        got = requests.post(url + "/api/v1/import/torch", data=f.read_bytes(), timeout=30,
                            params={**UPLOADED, "filename": f.name})
        assert got.status_code == 200, got.text
        assert got.json()["steps"] == [STEPS - 1] and got.json()["stages"] >= 3, got.json()
    bad = requests.post(url + "/api/v1/import/torch", params=UPLOADED, timeout=30,
                        data=(made.out / list(BAD)[0]).read_bytes())
    assert bad.status_code == 400 and "not imported" in bad.json()["error"], bad.text
    requests.post(url + "/api/v1/experiments/finish", json=UPLOADED, timeout=10)

    clear = clear_steps(made.out)[STEPS - 1]  # named when its ranks' clocks say so

    def named():
        got = rows(url, UPLOADED, 1)
        row = (got or {}).get(STEPS - 1)
        return row if row and len(row["ranks"]) == 3 and (row["culprit"] or not clear) \
            else None

    row = wait_for(named, 60, "the uploaded step's row with its three ranks")
    c, lead = row["culprit"], leads(made.out)[STEPS - 1]
    if clear:
        assert c["rank"] == clear == str(SLOW_RANK), (c, lead)
    else:  # no rank led clearly by its own clock: one named must have led
        assert c is None or c["rank"] == max(lead, key=lead.get), (c, lead)
