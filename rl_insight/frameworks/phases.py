"""Our phase names, which a framework's table maps its own names to, so every framework's
ranks fill the same rows as verl's (a rank lane's states in verl: DistProfiler.annotate's
roles)."""

ACTOR_UPDATE = "actor_update"
ACTOR_LOGP = "actor_compute_log_prob"
REF_LOGP = "ref_compute_log_prob"
CRITIC_VALUES = "critic_compute_values"
CRITIC_UPDATE = "critic_update"
REWARD = "reward"
ADVANTAGES = "compute_advantage"
DATA = "data_processing"
VALIDATION = "validation"
CHECKPOINT = "save_checkpoint"
OFFLOAD = "offload"
