"""An MoE model's expert load from msprobe's dumps, as verl writes them: tokens per expert
per layer, per step and stage, the ranks summed, ready to travel on a phase span.

verl 0.9.1's precision debugger (``verl/utils/profiler/precision_debugger_profile.py``)
dumps each stage's ops with msprobe to ``<save_path>/step_<N>/<stage>/``; msprobe adds
``rank<R>/dump_tensor_data/`` with one file per dumped tensor. Torch-NPU's grouped matmul,
the MoE experts' kernel, takes the tokens per expert as its ``group_list`` argument, so
``NPU.npu_grouped_matmul.<i>.forward.kwargs.group_list.pt`` holds, for its ``i``-th call,
one count per expert (upstream RL-Insight's GMM heatmap reads the same files:
``docs/gmm_analysis.md``, ``data/gmm_data/step_1/actor_update/rank0/...``). A call whose
``group_list_type`` is 0 in msprobe's ``dump.json`` beside ``dump_tensor_data`` counts
cumulatively and is differenced; without a ``dump.json`` the counts are taken as counts,
as upstream takes them. ``.npy`` files (``msprobe parse -t npy``) are read the same way.

A layer calls the grouped matmul more than once a forward with the same ``group_list``
(its gate/up and down projections): consecutive identical calls are one row. Rows are
numbered in call order per rank; the ranks' rows of one number add up (each rank counts
the tokens of its own batch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from rl_insight.anatomy import experts as load
from rl_insight.profiler.model import BadFile
from rl_insight.wire.rank_evidence import EXPERT_TOKENS

CALL = re.compile(r"^NPU\.npu_grouped_matmul\.(?P<i>\d+)\.forward\.kwargs\.group_list"
                  r"\.(?P<ext>pt|npy)$")
STEP = re.compile(r"^step_(?P<n>\d+)$")
RANK = re.compile(r"^rank(?P<n>\d+)$")
TENSORS = "dump_tensor_data"


def files(root: str | Path) -> Iterator[Path]:
    """The grouped matmuls' ``group_list`` dumps under ``root``, in path order."""
    yield from sorted(p for p in Path(root).rglob("*group_list.*")
                      if CALL.match(p.name) and p.parent.name == TENSORS)


def where(path: Path) -> tuple[int, str, int, int]:
    """(step, stage, rank, call index) from a dump's path: ``step_<N>/<stage>/rank<R>/
    dump_tensor_data/NPU.npu_grouped_matmul.<i>...``."""
    call = CALL.match(path.name)
    rank_dir, stage_dir, step_dir = path.parents[1], path.parents[2], path.parents[3]
    rank, step = RANK.match(rank_dir.name), STEP.match(step_dir.name)
    if not (call and rank and step):
        raise BadFile(f"{path}: not where verl's msprobe dumps go (step_<N>/<stage>/"
                      "rank<R>/dump_tensor_data/); give the folder verl wrote")
    return int(step.group("n")), stage_dir.name, int(rank.group("n")), int(call.group("i"))


def tokens(path: Path, cumulative: bool = False) -> list[int]:
    """One call's tokens per expert (``cumulative``: the dump counts them so)."""
    try:
        if path.suffix == ".npy":
            import numpy

            values = numpy.load(path, allow_pickle=False).reshape(-1).tolist()
        else:
            try:
                import torch
            except ImportError:
                raise BadFile(f"{path}: reading msprobe's .pt dumps needs torch (pip install "
                              "torch), or convert them: `msprobe parse -t npy`") from None
            values = torch.load(path, map_location="cpu", weights_only=True)
            values = values.reshape(-1).tolist() if hasattr(values, "reshape") else values
    except BadFile:
        raise
    except Exception as e:  # noqa: BLE001 (torch and numpy raise what they raise)
        raise BadFile(f"{path}: no tensor in it ({type(e).__name__}: {e}); dump it again") \
            from None
    if not isinstance(values, list) or not all(isinstance(v, int | float) for v in values):
        raise BadFile(f"{path}: not a list of counts; dump it again")
    counts = [int(v) for v in values]
    if cumulative:
        counts = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    return [max(0, c) for c in counts]


def cumulative_calls(rank_dir: Path) -> set[int]:
    """The calls msprobe's ``dump.json`` says count cumulatively (``group_list_type``
    0 among the call's ``input_kwargs``)."""
    try:
        data = json.loads((rank_dir / "dump.json").read_text(encoding="utf-8"))["data"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    out = set()
    for op, rec in data.items() if isinstance(data, dict) else ():
        m = re.match(r"^NPU\.npu_grouped_matmul\.(\d+)\.forward$", str(op))
        kind = ((rec or {}).get("input_kwargs") or {}).get("group_list_type") \
            if isinstance(rec, dict) else None
        if m and isinstance(kind, dict) and kind.get("value") == 0:
            out.add(int(m.group(1)))
    return out


def read(root: str | Path, bad: list[str] | None = None
         ) -> dict[tuple[int, str], dict[int, list[int]]]:
    """(step, stage) -> row -> tokens per expert, the ranks summed. A dump that cannot be
    read is left out and said in ``bad`` (file: why)."""
    per_rank: dict[tuple[int, str, int], list[tuple[int, list[int]]]] = {}
    cumulative: dict[Path, set[int]] = {}
    for path in files(root):
        try:
            step, stage, rank, call = where(path)
            rank_dir = path.parents[1]
            if rank_dir not in cumulative:
                cumulative[rank_dir] = cumulative_calls(rank_dir)
            counts = tokens(path, call in cumulative[rank_dir])
        except BadFile as e:
            if bad is None:
                raise
            bad.append(str(e))
            continue
        per_rank.setdefault((step, stage, rank), []).append((call, counts))
    out: dict[tuple[int, str], dict[int, list[int]]] = {}
    for (step, stage, _), calls in sorted(per_rank.items()):
        load.add(out.setdefault((step, stage), {}), dict(enumerate(_rows(calls))))
    return out


def _rows(calls: list[tuple[int, list[int]]]) -> list[list[int]]:
    """Calls in order, a call identical to the one before it joined to it (a layer's
    second grouped matmul over the same routing)."""
    rows: list[list[int]] = []
    for _, counts in sorted(calls, key=lambda c: c[0]):
        if not rows or rows[-1] != counts:
            rows.append(counts)
    return rows


def span_attributes(layers: Mapping[int, list[int]]) -> dict[str, str]:
    """A stage's loads as the attribute its phase span carries (one rank's span of the
    stage in that step: the importer puts it on the lowest rank's)."""
    return {EXPERT_TOKENS: load.encode(layers)}
