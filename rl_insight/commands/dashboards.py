"""`rl-insight dashboards install|export`: the shipped dashboards into a Grafana of one's
own, or as files for its provisioning (rl_insight/grafana/)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def datasource_mapping(args: argparse.Namespace, dashboards: dict) -> dict[str, str]:
    from rl_insight.grafana.install import datasources
    from rl_insight.grafana.mapping import parse_mapping

    return parse_mapping(args.datasource or [], datasources(dashboards))


def cmd_dashboards_install(args: argparse.Namespace) -> int:
    """The shipped dashboards into the user's own Grafana; credentials from the environment."""
    from rl_insight.grafana import api as grafana_api
    from rl_insight.grafana import install as dash

    dashboards = dash.shipped()
    try:
        mapping = datasource_mapping(args, dashboards)
        dash.folder_uid(args.folder)
        auth = grafana_api.auth_from_env()
    except (ValueError, grafana_api.GrafanaError) as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 2
    try:
        done = dash.install(args.grafana_url, auth, folder=args.folder, mapping=mapping,
                            overwrite=args.overwrite, dashboards=dashboards,
                            say=lambda s: print(s, flush=True),
                            warn=lambda s: print(s, file=sys.stderr, flush=True))
    except grafana_api.GrafanaError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 1
    counts = {s: sum(o.status == s for o in done) for s in ("created", "updated", "kept",
                                                            "failed")}
    print(f"{len(done)} dashboards in folder {args.folder!r}: "
          + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 1 if counts["failed"] else 0


def cmd_dashboards_export(args: argparse.Namespace) -> int:
    """The shipped dashboards, data sources mapped, as files for Git or file provisioning."""
    from rl_insight.grafana import install as dash

    dashboards = dash.shipped()
    try:
        mapping = datasource_mapping(args, dashboards)
        written = dash.export(Path(args.directory).expanduser(), mapping,
                              dashboards=dashboards)
    except (ValueError, OSError) as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 2
    print(f"{len(written)} dashboards in {args.directory} (Grafana's file provisioning "
          "reads them: a dashboards provider with options.path set to that folder)")
    return 0
