"""The names a framework's data crosses from a training process (the adapters and the
trace-file reader, rl_insight/integrations/) to the server (its intake and anatomy): each
spelled here once, read by both sides."""

# a span of no duration carrying one step's timing keys (rl_insight/integrations/tracker.py)
STEP_TIMING = "step_timing"
FRAMEWORK_ATTR = "framework"  # the framework whose table reads a span or a record
# a resource attribute naming the framework of spans it traces itself (OTEL_RESOURCE_
# ATTRIBUTES from `rl-insight ray-env --otel`, and the trace-file reader's exports)
RESOURCE_FRAMEWORK_ATTR = "rl_insight.framework"
TIMING_PREFIX = "timing."  # a timing key's attribute: timing.<the framework's own key>
STEP_ATTR = "step"  # the step a span or record belongs to
# the instrumentation scope of spans read from a framework's trace files (+ its name)
IMPORT_SCOPE = "rl_insight.import."
# the process a profiler import's spans name (+ ": <file>" for a rank's phases): its
# step marks widen one another, its phases join a live rank's (rl_insight/profiler/)
IMPORT_PROCESS = "rl-insight import"
# what a span is to the state lanes (the client's trace_state spans carry the same)
SEGMENT_ATTR = "monitor.trace_segment"
STATE_INTERVAL = "state_interval"  # a lane's state, from its start to its end
STEP_SEGMENT = "step"  # a step mark
LANE_ATTR = "state_lane_id"
STATE_ATTR = "state_name"
# the trainer's step marks: spans of this state on this lane (rl_insight/client/steps.py)
TRAINER_LANE = "trainer"
STEP_STATE = "train_step"
