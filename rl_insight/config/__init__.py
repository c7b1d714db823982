"""The one source of defaults for RL-Insight.

Every host, port, path and tunable lives in :class:`Settings`. Values come from the
defaults below, then a YAML file, then environment variables, then command-line flags,
each layer overriding the one before. Nothing else in the package hard-codes them.

Environment names: ``RL_INSIGHT_<SECTION>_<FIELD>`` (``RL_INSIGHT_PROMETHEUS_PORT``),
plus the documented short names ``RL_INSIGHT_HOME``, ``RL_INSIGHT_TOKEN`` and
``RL_INSIGHT_HOST``. Flags: ``--set section.field=value``.

The sections and their defaults: settings.py; reading them: loading.py."""

from rl_insight.config.loading import (
    all_keys,
    apply_env,
    apply_file,
    apply_overrides,
    as_dict,
    coerce_key,
    env_name,
    load,
    set_key,
    upstream_setting,
)
from rl_insight.config.settings import (
    CONFIG_ENV,
    DEFAULT_HOME,
    ENABLE_ENV,
    EXPERIMENT_ENV,
    OTLP_ENV,
    PROJECT_ENV,
    SERVER_URL_ENV,
    AlertmanagerSettings,
    AlertSettings,
    AnatomySettings,
    ChangesSettings,
    ClientSettings,
    ConfigError,
    GrafanaSettings,
    HardwareSettings,
    InstallSettings,
    ProfileSettings,
    PrometheusSettings,
    PushSettings,
    ServerSettings,
    Settings,
    SupervisorSettings,
    TempoSettings,
    TraceSettings,
    duration_seconds,
)

__all__ = [
    "AlertSettings",
    "AlertmanagerSettings",
    "AnatomySettings",
    "CONFIG_ENV",
    "ChangesSettings",
    "ClientSettings",
    "ConfigError",
    "DEFAULT_HOME",
    "ENABLE_ENV",
    "EXPERIMENT_ENV",
    "GrafanaSettings",
    "HardwareSettings",
    "InstallSettings",
    "OTLP_ENV",
    "PROJECT_ENV",
    "ProfileSettings",
    "PrometheusSettings",
    "PushSettings",
    "SERVER_URL_ENV",
    "ServerSettings",
    "Settings",
    "SupervisorSettings",
    "TempoSettings",
    "TraceSettings",
    "all_keys",
    "apply_env",
    "apply_file",
    "apply_overrides",
    "as_dict",
    "coerce_key",
    "duration_seconds",
    "env_name",
    "load",
    "set_key",
    "upstream_setting",
]
