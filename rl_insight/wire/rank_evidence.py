"""The span attributes that carry a rank's evidence: a rank's client sets them on its
phase spans (rl_insight/client/rank_evidence.py: torch's Flight Recorder), a profiler
import on the phases it reads (rl_insight/profiler/), and the server's culprit rank reads
them (rl_insight/anatomy/ranks.py). Spelled here, where both sides import them, so the
client no longer reaches into the server's anatomy for its own attribute names."""

COLLECTIVES = "rank.collectives"  # collectives enqueued in the phase (Flight Recorder)
# the mean and the first arrival's time to the phase's end (an import: each to its own
# collective's end, where the ranks left it); the server compares them across ranks only
MEAN_TO_END = "rank.mean_to_end_s"
FIRST_TO_END = "rank.first_to_end_s"
NODE, GPU = "rank.node", "rank.gpu"
# what the rank's GPU did in the phase, from a profiler's kernels (rl_insight/profiler/
# kernels.py): busy (any kernel), communicating, communication under computation, seconds
GPU_BUSY, GPU_COMM, GPU_OVERLAP = "rank.gpu_busy_s", "rank.gpu_comm_s", "rank.gpu_overlap_s"
# tokens per expert per MoE layer in the phase, the step's ranks summed (rl_insight/
# profiler/experts.py: "layer:t0,t1,...;layer:..."), on one rank's span of the phase
EXPERT_TOKENS = "rank.expert_tokens"
# who measured the arrivals: a profiler's name (torch, nvtx, mstx: its trace's
# collectives, rl_insight/profiler/export.py); absent, torch's Flight Recorder
ARRIVALS = "rank.arrivals"
EVIDENCE_KEYS = (COLLECTIVES, MEAN_TO_END, FIRST_TO_END, NODE, GPU, GPU_BUSY, GPU_COMM,
                 GPU_OVERLAP, EXPERT_TOKENS, ARRIVALS)
