"""verl's stage names, as its profilers mark them, and the phase each is on a rank's lane
(rl_insight/frameworks/phases.py), so an imported rank fills the same anatomy rows as a
live one. Data only.

A stage's marker is named ``message or role or func.__name__`` (verl 0.9.1
``verl/utils/profiler/torch_profile.py`` ``Profiler.annotate``; the NVTX and MSTX
profilers name theirs the same way), and ``DistProfiler.annotate`` puts the same
``role`` on the live rank lane (``verl/utils/profiler/profile.py``): verl 0.9.1's names
stay as they are (a run also monitored live has its imported ranks in the same states);
older verl's map to the phase they were.
"""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_LOGP,
    ACTOR_UPDATE,
    CRITIC_UPDATE,
    CRITIC_VALUES,
    REF_LOGP,
    REWARD,
)

TRAIN_BATCH = "train_batch"  # nested in actor_update on one rank (counted once there)
ROLLOUT = "rollout_generate"  # the hybrid engine's generation on the trainer's ranks

STAGES: dict[str, str] = {
    # verl 0.9.1 verl/workers/engine_workers.py, @DistProfiler.annotate(role=...)
    "train_batch": TRAIN_BATCH,
    "ref_compute_log_prob": REF_LOGP,
    "actor_compute_log_prob": ACTOR_LOGP,
    "actor_update": ACTOR_UPDATE,
    # verl 0.9.1 verl/workers/engine_workers_tinker.py: the tinker API's training call
    "forward_backward": "forward_backward",
    # verl 0.5-0.8 verl/workers/fsdp_workers.py and megatron_workers.py, role=...
    "rollout_generate": ROLLOUT,
    "compute_values": CRITIC_VALUES,
    "critic_update": CRITIC_UPDATE,
    "compute_rm_score": REWARD,
    # earlier verl: annotate(color=...) with no role, the method's name
    "generate_sequences": ROLLOUT,
    "compute_log_prob": ACTOR_LOGP,
    "compute_ref_log_prob": REF_LOGP,
    "update_actor": ACTOR_UPDATE,
    "update_critic": CRITIC_UPDATE,
}
SOURCE = ("verl 0.9.1 verl/workers/engine_workers.py and engine_workers_tinker.py "
          "(@DistProfiler.annotate roles); verl 0.5-0.8 fsdp_workers.py and "
          "megatron_workers.py (roles); earlier verl (method names)")


def phase_of(name: str) -> str | None:
    """Our phase for a marked stage's name, or None (a region that is no verl stage: an
    FSDP or user ``record_function``, kept in the timeline only)."""
    return STAGES.get(name)
