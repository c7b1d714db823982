"""The panels of the other RL frameworks' dashboards (rl_insight/frameworks/):
each framework's headline keys, its steps' anatomy as the server makes it (from its
lanes, its own spans or its timing keys), its spans in Tempo where it traces, every key
it logs under its own groups.

Curated keys are each framework's own names, read from its source at the commit its
table names; a key a run's config leaves out is just absent from its panel.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboards.panels import (
    RUN,
    SGLANG,
    TIMELINE_PROM,
    VLLM,
    KeyGroup,
    M,
    Panel,
    Query,
    gauge_key,
    per_step,
    ts,
)
from rl_insight.frameworks import FRAMEWORKS, Framework

# framework -> (title, unit, keys...) of its headline panels
# the panels of the engines an adapter registers (a table's `engines`)
ENGINES = {"sglang": ("SGLang", SGLANG), "vllm": ("vLLM", VLLM)}


def _key(key: str) -> Query:
    return Query(f"{gauge_key(key)}{{{RUN}}}", key)


def _name_pattern(key: str) -> str:
    """A timing key's exported name, as a regex where the key is a pattern (``*``)."""
    star = "xstarx"
    return gauge_key(key.replace("*", star)).replace(star, ".+")


def training(fw: Framework) -> tuple[Panel, ...]:
    """The framework's headline keys, then the step's time as its timing keys tell it
    (each key of its table a line: the framework's own breakdown)."""
    out = [ts(h.title, *(_key(k) for k in h.keys), unit=h.unit,
              description=f"{fw.title}: {', '.join(h.keys)}.")
           for h in fw.headlines]
    names = "|".join(sorted({_name_pattern(k) for k in fw.timings}))
    if names:
        out.append(ts("Step time by the framework's timers",
                      Query(f'label_replace({{__name__=~"{names}",{RUN}}}, "key", "$1", '
                            f'"__name__", "{M}(.+)")', "{{key}}"), unit="s",
                      description=f"{fw.title}'s own timing keys, each a part of the step "
                                  f"in its table (rl_insight/frameworks/{fw.name}.py)."))
    return tuple(out)


def anatomy(fw: Framework) -> tuple[Panel, ...]:
    """The step anatomy as far as the framework's data goes: no replica breakdown."""
    out = [
        ts("Where each step's time went",
           Query(per_step("role_generate_seconds", by="role"), "{{role}} generating"),
           Query(per_step("trainer_phase_seconds", by="phase"), "{{phase}}"),
           Query(per_step("other_seconds"), "other"),
           unit="s", stack=True, width=24, height=10, options={"bars": True},
           description="One stacked bar per step: the rollout's generation, each trainer "
                       "phase, and the rest, from the framework's lanes, spans or timing "
                       "keys (rl-insight report --step N explains a slow one)."),
        ts("Step duration", Query(per_step("duration_seconds"), "step"),
           Query(per_step("weight_update_seconds"), "weight sync"), unit="s",
           options={"bars": True}),
        ts("Rollout and training at once", Query(per_step("overlap_seconds"), "overlap"),
           unit="s", options={"bars": True},
           description="From timing keys: at least this much of the parts ran at once (an "
                       "asynchronous trainer's parts add up to more than its step)."),
        ts("Anatomy from timing keys", Query(per_step("from_timing_keys"), "timing keys"),
           kind="stat", width=6,
           options={"mappings": {"0": ("lanes and spans", "green"),
                                 "1": ("timing keys (no replica breakdown)", "blue")}},
           description="1: this run's steps are cut from the framework's timing keys, "
                       "coarser than lanes (no straggler replica)."),
    ]
    if fw.bucket_attr:
        out.append(ts("Goodput buckets",
                      Query(per_step("bucket_seconds", by="bucket"), "{{bucket}}"),
                      unit="s", stack=True, options={"bars": True},
                      description=f"Each step's time in {fw.title}'s own goodput buckets "
                                  f"(span attribute {fw.bucket_attr}): productive, "
                                  "overhead, idle, wasted."))
    return tuple(out)


def tempo(fw: Framework) -> tuple[Panel, ...]:
    query = (f'{{ span.framework = "{fw.name}" && span.project = "$project" && '
             'span.experiment_name = "$experiment_name" }')
    return (ts(f"{fw.title}'s spans (Tempo)",
               Query(query + " | select(span.state_lane_id, span.state_name, span.step)",
                     "", "tempo"), kind="table", width=24, height=12,
               description=f"{fw.title}'s own spans, as its table maps them (lane, state, "
                           "step); the spans no rule names are in Tempo as they came."),)


@dataclass(frozen=True)
class Groups:
    """A framework's key groups: one per head it logs under, and the rest."""

    framework: Framework

    def groups(self) -> tuple[KeyGroup, ...]:
        fw = self.framework
        heads = [gauge_key(p + "x")[:-1] for p in fw.key_prefixes]
        out = []
        for head, prefix in zip(heads, fw.key_prefixes, strict=True):
            longer = [h for h in heads if h != head and h.startswith(head)]
            out.append(KeyGroup(f"{fw.title} · {prefix}*",
                                f"k_{fw.name}_{head[len(M):-1]}", head + ".+",
                                "|".join(f"{x}.+" for x in longer)))
        own = f"{M}(lane_state|lanes_in_state|state_duration_seconds)(_.+)?|{M}step"
        claimed = "|".join(f"{h}.+" for h in heads)
        out.append(KeyGroup(f"{fw.title} · other keys", f"k_{fw.name}_other", M + ".+",
                            f"{claimed}|{own}"))
        return tuple(out)


def sections(fw: Framework, section, key_panel) -> list:
    """The framework dashboard's sections (``section``: build.Section)."""
    out = [section(f"Training ({fw.title})", training(fw)),
           section("Step anatomy", anatomy(fw))]
    if fw.engines in ENGINES:
        name, panels = ENGINES[fw.engines]
        out.append(section(f"Rollout ({name})", panels, repeat="role"))
    if fw.timers:  # its ranks' states live on their lanes (slime's Timer): no pooled ones
        out.append(section("State timeline", tuple(
            p for p in TIMELINE_PROM if p.title != "Pooled lanes in each state")))
    if fw.spans:  # its own spans reach the server (Tempo holds them, mapped to lanes)
        out.append(section("Spans (Tempo)", tempo(fw)))
    out += [section(f"All {g.title}", (key_panel(g),), collapsed=True)
            for g in Groups(fw).groups()]
    return out


def frameworks() -> list[Framework]:
    """The frameworks with a dashboard of their own: those whose table has headlines."""
    return [fw for fw in FRAMEWORKS.values() if fw.headlines]
