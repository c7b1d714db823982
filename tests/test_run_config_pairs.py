"""The simulation hands its parsed arguments over as verl hands its config
(examples/simulate_rl.py ``handed_config``): two simulated runs on the Ray world that
differ in one flag (tests/worlds.py SIMULATED_PAIRS) differ in that key of their kept
configurations alone, and Prometheus, scraping the server's
``rl_insight_run_config_info``, tells the same key apart with the dashboards' query."""

from __future__ import annotations

import pytest
import requests

from rl_insight.runconfig.diff import diff
from rl_insight.wire import runconfig as config_wire
from tests.conftest import prom_query, wait_for
from tests.worlds import PAIRS_PROJECT

pytestmark = pytest.mark.integration


def kept(url: str, experiment: str) -> dict:
    r = requests.get(url + config_wire.CONFIG_PATH, timeout=10, params={
        "project": PAIRS_PROJECT, "experiment_name": experiment})
    assert r.status_code == 200, r.text
    assert r.json()["source"] == "tracking"
    return r.json()["values"]


@pytest.mark.parametrize("a, b, key", [("even", "even-more", "batch"),
                                       ("even", "even-seed", "seed"),
                                       ("heavy", "heavy-fast-trainer", "trainer_speed")])
def test_runs_that_differ_in_one_flag_differ_in_that_key(simulated_pairs, ray_world, a, b,
                                                         key):
    got = diff(kept(ray_world.url, a), kept(ray_world.url, b))
    assert [r["key"] for r in got["keys"] if r["status"] != "same"] == [key], got["counts"]
    assert got["counts"]["same"] > 30 and got["complete"]
    # the dashboards' query over what Prometheus scraped: the keys whose value is not
    # the same in both runs
    prom = ray_world.cli.prometheus
    runs = f'project="{PAIRS_PROJECT}",experiment_name=~"{a}|{b}"'
    wait_for(lambda: len(prom_query(prom, f"count by (experiment_name) "
                                          f"({config_wire.INFO_METRIC}{{{runs}}})")) == 2, 30,
             f"{config_wire.INFO_METRIC} of {a} and {b} in Prometheus")
    differ = prom_query(prom, f"count by (key, value) ({config_wire.INFO_METRIC}{{{runs}}}) == 1")
    assert {x["metric"]["key"] for x in differ} == {key}, differ
