"""Span attribute names and values the client writes and the server reads: which lane a
span is on, in which state, what kind of segment it is, which process sent it. The
design fixes them (spans carry ``state_name``, ``state_lane_id``, ``project``,
``experiment_name``, ``process_id``; resource ``service.name`` ``rl_insight_monitor``);
the lane actors' derived series carry the lane and state under the same names."""

LANE_ATTR = "state_lane_id"  # the lane a span is on (upstream's trace_state argument)
STATE_ATTR = "state_name"  # the state the lane is in during the span
PROCESS_ATTR = "process_id"  # the process that sent the span (host:pid)

# what a span is to the state lanes (the client's trace_state and trace_op spans, a
# framework's mapped spans, the trainer's step marks)
SEGMENT_ATTR = "monitor.trace_segment"
STATE_INTERVAL = "state_interval"  # a lane's state, from its start to its end
REQUEST_SEGMENT = "request"  # one block inside a busy interval (per-request spans)
DURATION_SEGMENT = "duration"  # a trace_op call
STEP_SEGMENT = "step"  # a step mark

# the trainer's step marks: spans of STEP_STATE on lane laneid.TRAINER, carrying STEP_ATTR
# (rl_insight/client/steps.py)
STEP_ATTR = "step"  # the step a span or a record belongs to
STEP_STATE = "train_step"

ERROR_ATTR = "error"  # the exception type of a block that raised

# the resource: who sent the spans (OpenTelemetry's key, this package's service)
SERVICE_NAME_ATTR = "service.name"
SERVICE_NAME = "rl_insight_monitor"

# everyday words the package also uses in other senses (JSON keys, labels, messages):
# left out of tests/test_wire.py's scan
EVERYDAY = frozenset({"REQUEST_SEGMENT", "DURATION_SEGMENT", "STEP_SEGMENT", "STEP_ATTR",
                      "ERROR_ATTR"})
