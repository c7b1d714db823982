"""The names a framework's data crosses from a training process (the adapters and the
trace-file reader, rl_insight/integrations/) to the server (its intake and anatomy): each
spelled here once, read by both sides. The lane, state and segment attributes its spans
carry are every span's (attributes.py)."""

# a span of no duration carrying one step's timing keys (rl_insight/integrations/tracker.py)
STEP_TIMING = "step_timing"
FRAMEWORK_ATTR = "framework"  # the framework whose table reads a span or a record
# a resource attribute naming the framework of spans it traces itself (OTEL_RESOURCE_
# ATTRIBUTES from `rl-insight ray-env --otel`, and the trace-file reader's exports)
RESOURCE_FRAMEWORK_ATTR = "rl_insight.framework"
TIMING_PREFIX = "timing."  # a timing key's attribute: timing.<the framework's own key>
# the instrumentation scope of spans read from a framework's trace files (+ its name)
IMPORT_SCOPE = "rl_insight.import."
# the process a profiler import's spans name (+ ": <file>" for a rank's phases): its
# step marks widen one another, its phases join a live rank's (rl_insight/profiler/)
IMPORT_PROCESS = "rl-insight import"

# an everyday word the package also uses in other senses: left out of test_wire's scan
EVERYDAY = frozenset({"FRAMEWORK_ATTR"})
