"""The server's HTTP paths and headers: the routes are declared with these and every
caller (the client's registration, the hub and lane actors, the hardware actors, the
CLI) calls them, so a route and its callers cannot drift apart. Paths with a ``{name}``
are FastAPI templates; a caller fills them with ``.format(name=...)``."""

HEALTH = "/healthz"
SERVICES = "/api/v1/services"  # the managed services and the URLs clients use (otlp_port)
# the text exposition: the server's (every pushed group and its own), which a new hub reads
# back; the hub's own in platform mode; an engine's (Prometheus' path, which all follow)
METRICS = "/metrics"

# pushes, the Pushgateway's way: PUT/POST/DELETE /metrics/job/<job>/<label>/<value>...
PUSH_ROOT = METRICS + "/"
PUSH_ANY = PUSH_ROOT + "{path:path}"  # the routes' and the intake's one template
PUSH_JOB = PUSH_ROOT + "job/"
PUSH_GROUP = PUSH_JOB + "{job}"
PUSH_JOB_BASE64 = PUSH_ROOT + "job@base64/"  # the hub's and lanes' (any job name intact)
PUSH_BATCH = "/api/v1/push/batch"  # several groups in one request (servers since 0.4)
TRACES = "/v1/traces"  # OTLP/HTTP spans (the OTLP path, under the server or an endpoint)

TARGETS = "/api/v1/prometheus/targets"  # scrape targets: register (POST), list, remove
BIND = "/api/v1/runs/bind"  # a process's targets bound to its run once it is named
PROMETHEUS_QUERY = "/api/v1/prometheus/query"  # PromQL through the server
PROMETHEUS_SD = "/api/v1/prometheus/sd"  # http_sd for a Prometheus of one's own

EXPERIMENTS = "/api/v1/experiments"
EXPERIMENT_TARGETS = "/api/v1/experiments/targets"
EXPERIMENT_CONFIG = "/api/v1/experiments/config"  # a run's configuration (runconfig.py)
ARCHIVE = "/api/v1/experiments/archive"
RESTORE = "/api/v1/experiments/restore"
FINISH = "/api/v1/experiments/finish"
EXPERIMENT_ACTIONS = {"archive": ARCHIVE, "restore": RESTORE, "finish": FINISH}  # the CLI's

TRACES_RECENT = "/api/v1/traces/recent"
TRACES_TIMELINE = "/api/v1/traces/timeline"
LANES = "/api/v1/lanes"
ALERTS = "/api/v1/alerts"
ANATOMY = "/api/v1/anatomy"
ANATOMY_EXPLAIN = "/api/v1/anatomy/explain"
ANATOMY_CHANGES = "/api/v1/anatomy/changes"
ANATOMY_RUNS = "/api/v1/anatomy/runs"
ANATOMY_BOUND = "/api/v1/anatomy/bound"
COMPARE = "/api/v1/compare"

PROFILES = "/api/v1/profiles"  # ask for one (POST, the token), list them
PROFILE = PROFILES + "/{pid}"
PROFILE_SPEEDSCOPE = PROFILE + "/speedscope"
PROFILE_TAKE = PROFILE + "/take"  # a lane actor takes a request
PROFILE_RESULT = PROFILE + "/result"  # ... and answers it

IMPORT_ROOT = "/api/v1/import/"
IMPORT = IMPORT_ROOT + "{profiler}"  # a profiler's file uploaded

# every answer of this project's server carries STARTED_HEADER (server/app.py's Guard):
# what tells an answer of ours from a proxy's or another program's on the port; and
# PROFILES_HEADER, how many profiles were asked for since it started, so whoever takes
# them asks for the pending ones only when it moved
STARTED_HEADER = "X-RL-Insight-Started"
PROFILES_HEADER = "X-RL-Insight-Profiles"
