"""An MoE model's expert load from msprobe's dumps (rl_insight/profiler/experts.py) and
its summary (rl_insight/anatomy/experts.py). The dumps are made here as verl and msprobe
lay them out, each fact's source beside it:

- ``<save_path>/step_<N>/<stage>/``: verl's precision_debugger_profile.py (step_tag,
  dump_path); msprobe's ``rank<R>/dump_tensor_data/`` below it and the file
  ``NPU.npu_grouped_matmul.<i>.forward.kwargs.group_list.pt``: upstream RL-Insight's
  sample data/gmm_data/step_1/actor_update/rank0/dump_tensor_data/ and docs/gmm_analysis.md;
- a group_list: one token count per expert (upstream's GMM heatmap reads it so);
  ``group_list_type`` 0 (cumulative) in msprobe's dump.json ``input_kwargs``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy
import pytest

from rl_insight.anatomy import experts as load
from rl_insight.profiler import experts
from rl_insight.wire.rank_evidence import EXPERT_TOKENS


def dump(root: Path, step: int, stage: str, rank: int, call: int, counts: list[int],
         ext: str = "npy") -> Path:
    folder = root / f"step_{step}" / stage / f"rank{rank}" / "dump_tensor_data"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"NPU.npu_grouped_matmul.{call}.forward.kwargs.group_list.{ext}"
    if ext == "npy":
        numpy.save(path, numpy.array(counts, dtype=numpy.int64))  # the name ends in .npy
    else:
        import torch

        torch.save(torch.tensor(counts, dtype=torch.int64), path)
    return path


def test_the_ranks_loads_add_up_per_layer_and_a_layer_s_second_call_is_one_row(tmp_path):
    for rank, skew in ((0, 0), (1, 10)):
        dump(tmp_path, 4, "actor_update", rank, 0, [10 + skew, 5, 5, 0])  # layer 0, gate/up
        dump(tmp_path, 4, "actor_update", rank, 1, [10 + skew, 5, 5, 0])  # layer 0, down
        dump(tmp_path, 4, "actor_update", rank, 2, [2, 2, 2, 14])  # layer 1
    dump(tmp_path, 4, "actor_compute_log_prob", 0, 0, [1, 1, 1, 1])
    got = experts.read(tmp_path)
    assert got[(4, "actor_update")] == {0: [30, 10, 10, 0], 1: [4, 4, 4, 28]}
    assert got[(4, "actor_compute_log_prob")] == {0: [1, 1, 1, 1]}
    s = load.summary(got[(4, "actor_update")])
    assert s["top"] == {"layer": 1, "expert": 3, "tokens": 28, "share": 0.7,
                        "balanced": 0.25}
    assert "layer 1's expert 3 took 70.0% of its layer's tokens" in \
        load.line("actor_update", s)


def test_a_cumulative_group_list_is_differenced_as_msprobe_s_dump_json_says(tmp_path):
    path = dump(tmp_path, 1, "actor_update", 0, 0, [3, 10, 10, 16])
    (path.parents[1] / "dump.json").write_text(json.dumps({"task": "tensor", "data": {
        "NPU.npu_grouped_matmul.0.forward": {"input_kwargs": {
            "group_list": {"type": "torch.Tensor", "shape": [4]},
            "group_list_type": {"type": "int", "value": 0}}}}}))
    assert experts.read(tmp_path) == {(1, "actor_update"): {0: [3, 7, 0, 6]}}


def test_torch_s_own_dumps_read_as_the_numpy_ones(tmp_path):
    dump(tmp_path / "a", 2, "actor_update", 0, 0, [4, 0, 9], ext="pt")
    dump(tmp_path / "b", 2, "actor_update", 0, 0, [4, 0, 9])
    assert experts.read(tmp_path / "a") == experts.read(tmp_path / "b") == \
        {(2, "actor_update"): {0: [4, 0, 9]}}


def test_a_damaged_dump_among_good_ones_is_named_and_left_out(tmp_path):
    dump(tmp_path, 3, "actor_update", 0, 0, [1, 2])
    broken = dump(tmp_path, 3, "actor_update", 1, 0, [1, 2])
    broken.write_bytes(b"\x93NUMPY cut")
    bad: list[str] = []
    assert experts.read(tmp_path, bad) == {(3, "actor_update"): {0: [1, 2]}}
    assert len(bad) == 1 and str(broken) in bad[0] and "dump it again" in bad[0]
    with pytest.raises(experts.BadFile, match="no tensor"):
        experts.read(tmp_path)


def test_the_span_attribute_carries_the_loads_and_reads_back_whole():
    layers = {0: [30, 10, 10, 0], 1: [4, 4, 4, 28]}
    attrs = experts.span_attributes(layers)
    assert attrs == {EXPERT_TOKENS: "0:30,10,10,0;1:4,4,4,28"}
    assert load.decode(attrs[EXPERT_TOKENS]) == layers
    assert load.decode("0:1,2;x:3;2:a,b;3:-4") == {0: [1, 2], 3: [0]}  # the bad parts out
    both = load.from_evidence([("actor_update", attrs), ("actor_update", attrs),
                               ("ref", {})], EXPERT_TOKENS)
    assert list(both) == ["actor_update"]
    assert both["actor_update"]["layers"] == {"0": [60, 20, 20, 0], "1": [8, 8, 8, 56]}
