"""prime-rl's table: its trainer's time/* keys as the parts of a step, its orchestrator's
(renamed orchestrator/time/* by the adapter: both processes log a time/step) as scalars.

prime-rl is asynchronous: the orchestrator makes batch N (and is held at most one step
ahead) while the trainer trains the batches before it, then the trainer trains batch N
as its step N (both number their steps from 1: trainer/ckpt.py l.29-30,
orchestrator/types.py l.27-30; the orchestrator's batch N is the trainer's step N's
batch, transports/rollouts/filesystem.py). A trainer step is the run's step here: the
orchestrator's making of batch N overlapped the trainer's earlier steps, and the part of
it the trainer waited for is the trainer's own ``time/wait_for_batch``; counting the
orchestrator's time as a part of step N would count that wait twice, and its wait for
the policy (the trainer's earlier steps) as time of step N (docs/frameworks.md).
"""

from __future__ import annotations

from rl_insight.frameworks.phases import ACTOR_UPDATE, CHECKPOINT, DATA
from rl_insight.frameworks.table import (
    IDLE,
    WAITING_FOR_SAMPLES,
    WEIGHTS,
    Framework,
    Headline,
    t,
)

# the orchestrator's own time/* keys, as the adapter renames them (its time/step and
# time/save_ckpt would replace the trainer's in the run's series)
ORCHESTRATOR = "orchestrator/"

TABLE = Framework(
    name="prime_rl", title="prime-rl",
    source="PrimeIntellect-ai/prime-rl 559b4477 src/prime_rl/trainer/rl/train.py (time/* "
           "l.679-688, one monitors.log per dict with step=progress.step), "
           "src/prime_rl/orchestrator/orchestrator.py (l.713-727), "
           "src/prime_rl/monitors/__init__.py (setup l.41-84, log l.101-113)",
    # every monitors.log passes step= (train.py l.658-693); its dicts also hold "step"
    step_time_key="time/step",  # train.py l.269-637: the whole step, the trainer's
    timings={
        # train.py l.279-284: dataloader.wait_for_batch(), the trainer starved until the
        # orchestrator's batch for this step is readable
        "time/wait_for_batch": t(IDLE, WAITING_FOR_SAMPLES),
        # l.286-291: dataloader.get_batch(), reading and converting the micro batches
        "time/load_data": t(DATA),
        # l.298-573: every micro batch's forward and backward, the gradient clipping, the
        # optimizer's and the scheduler's step
        "time/forward_backward": t(ACTOR_UPDATE),
        # l.587-594: the new policy broadcast to the inference servers (filesystem, NCCL
        # or NIXL; 0 where nothing listens, l.579-586, 599-600)
        "time/broadcast_weights": t(WEIGHTS),
        # l.603-616: a checkpoint every ckpt.interval steps, 0 between them
        "time/save_ckpt": t(CHECKPOINT),
    },
    # read and found flat: no timer runs inside another (maybe_clean l.596-598 and l.614
    # are outside both timers: `other`; so is the startup broadcast of the first step,
    # l.275-277, untimed, and the statistics and logging after l.616)
    key_prefixes=("time/", ORCHESTRATOR, "perf/", "optim/", "loss/", "entropy/",
                  "mismatch_kl/", "train/", "eval/", "progress/", "off_policy/", "system/"),
    # its dashboard's first panels, its own keys: train.py l.651-688 (perf/*, optim/*,
    # the tensor statistics), orchestrator.py l.698-742 (train/agg/*, progress/*,
    # off_policy/*, time/*), as its W&B overview plots them (monitors/wandb/overview.py)
    headlines=(
        Headline("Loss", "short", ("loss/mean",)),
        Headline("Entropy and mismatch KL", "short",
                 ("entropy/all/mean", "mismatch_kl/all/mean")),
        Headline("Gradient norm and learning rate", "short", ("optim/grad_norm", "optim/lr")),
        Headline("Throughput and MFU", "short", ("perf/throughput", "perf/mfu")),
        Headline("Orchestrator: each batch's time and its waits for the policy", "s",
                 (f"{ORCHESTRATOR}time/step", f"{ORCHESTRATOR}time/wait_for_policy")),
        Headline("Off-policy steps of each batch", "short", ("off_policy/mean", "off_policy/max")),
        Headline("Tokens per batch", "short", ("progress/tokens",)),
    ),
    engines="vllm",
    # monitors.setup, in the trainer's and the orchestrator's processes: the adapter's
    # monitor joins the list it builds (rl_insight/integrations/prime_rl.py)
    on_import={"prime_rl.monitors": "rl_insight.integrations.prime_rl:patch_monitors"},
)
