"""The shipped dashboards in a Grafana the user runs: ``rl-insight dashboards install``
uploads them into one folder through Grafana's API, ``rl-insight dashboards export``
writes the same JSON for Git and Grafana's file provisioning.

Both send exactly the same model: the shipped file, its data sources mapped, without
``id`` and ``version`` (Grafana assigns those; a new model without a version never
silently replaces one already there unless overwrite is asked for).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rl_insight.common import resources
from rl_insight.common.version import __version__
from rl_insight.grafana import api
from rl_insight.grafana.mapping import map_datasources, referenced

DEFAULT_FOLDER = "RL-Insight"  # the managed Grafana's folder too (uid rl-insight)

Say = Callable[[str], None]


@dataclass(frozen=True)
class Outcome:
    """What became of one dashboard: created, updated, kept (there, no overwrite), failed."""

    uid: str
    title: str
    status: str
    version: int | None = None
    url: str = ""
    error: str = ""


def shipped(directory: Path | None = None) -> dict[str, dict]:
    """The shipped dashboards by uid, in file-name order."""
    folder = directory or resources.dashboards_dir()
    out = {}
    for path in sorted(folder.glob("*.json")):
        model = json.loads(path.read_text())
        out[model["uid"]] = model
    if not out:
        raise FileNotFoundError(f"no dashboards in {folder}: reinstall rl-insight")
    return out


def datasources(dashboards: Mapping[str, dict]) -> dict[str, str]:
    """The data sources the dashboards refer to, {uid: type}; ``--datasource`` maps these."""
    out: dict[str, str] = {}
    for d in dashboards.values():
        for uid, kind in referenced(d).items():
            out.setdefault(uid, kind)
    return out


def prepare(dashboard: dict, mapping: Mapping[str, str]) -> dict:
    """The model as uploaded and exported: data sources mapped, no id, no version."""
    model = map_datasources(dashboard, mapping)
    model.pop("id", None)
    model.pop("version", None)
    return model


def render(model: dict) -> str:
    """JSON text as the shipped files are written (sorted keys, two spaces)."""
    return json.dumps(model, indent=2, sort_keys=True) + "\n"


def folder_uid(title: str) -> str:
    """A stable uid from the folder's title, so every run finds the folder it made."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-")
    if not slug:
        raise ValueError(f"--folder {title!r}: give a title with letters or digits")
    return slug


def export(directory: Path, mapping: Mapping[str, str], say: Say = print,
           dashboards: Mapping[str, dict] | None = None) -> list[Path]:
    """Write ``<uid>.json`` per dashboard into ``directory`` (made if missing)."""
    dashboards = shipped() if dashboards is None else dashboards
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for uid, dashboard in dashboards.items():
        path = directory / f"{uid}.json"
        path.write_text(render(prepare(dashboard, mapping)))
        say(f"wrote {path}")
        written.append(path)
    return written


def ensure_folder(url: str, auth: api.Auth, title: str, say: Say = print) -> dict:
    """The folder by its stable uid, else one titled ``title``, else a new one."""
    uid = folder_uid(title)
    found = api.get_folder(url, auth, uid)
    if found is None:
        found = next((f for f in api.list_folders(url, auth) if f.get("title") == title),
                     None)
    if found is not None:
        say(f"folder {found['title']!r} (uid {found['uid']}) is there")
        return found
    made = api.create_folder(url, auth, uid, title)
    say(f"folder {title!r} created (uid {made['uid']})")
    return made


def check_datasources(url: str, auth: api.Auth, wanted: Mapping[str, str],
                      types: Mapping[str, str], warn: Say) -> int:
    """Warn about each referenced data source Grafana does not have; the upload goes on
    (the data source may be added later). Returns how many are missing or unreadable."""
    problems = 0
    for shipped_uid, uid in sorted(wanted.items()):
        flag = f"--datasource {shipped_uid}=<uid>"
        try:
            found = api.get_datasource(url, auth, uid)
        except api.GrafanaError as exc:
            if exc.status != 403:
                raise
            warn(f"warning: cannot check data source {uid!r} (the account may not read data"
                 " sources); the dashboards are uploaded anyway")
            problems += 1
            continue
        if found is None:
            warn(f"warning: Grafana has no data source with uid {uid!r}: its panels will "
                 f"say 'data source not found' until you add a {types[shipped_uid]} data "
                 f"source with that uid, or run again with {flag} naming yours (the uid is "
                 "the end of its URL in Connections > Data sources)")
            problems += 1
        elif found.get("type") != types[shipped_uid]:
            warn(f"warning: data source {uid!r} ({found.get('name')}) is of type "
                 f"{found.get('type')!r}, the panels expect {types[shipped_uid]!r}: check "
                 f"{flag}")
            problems += 1
    return problems


def install(url: str, auth: api.Auth, *, folder: str = DEFAULT_FOLDER,
            mapping: Mapping[str, str] | None = None, overwrite: bool = True,
            say: Say = print, warn: Say = print,
            dashboards: Mapping[str, dict] | None = None) -> list[Outcome]:
    """Every shipped dashboard into ``folder``, one line per dashboard. Credentials and
    network failures raise :class:`~rl_insight.grafana.api.GrafanaError` at once; a
    dashboard Grafana refuses is reported and the rest go on."""
    mapping = dict(mapping or {})
    dashboards = shipped() if dashboards is None else dashboards
    url = api.base_url(url)
    about = api.health(url)
    say(f"Grafana {about.get('version', '?')} at {url}")
    target = ensure_folder(url, auth, folder, say)
    types = datasources(dashboards)
    for name, uid in sorted(mapping.items()):
        say(f"data source {name} -> {uid}")
    check_datasources(url, auth, {u: mapping.get(u, u) for u in types}, types, warn)
    message = f"rl-insight {__version__}: rl-insight dashboards install"
    out: list[Outcome] = []
    width = max(len(uid) for uid in dashboards)
    for i, (uid, dashboard) in enumerate(dashboards.items(), 1):
        title = dashboard.get("title", uid)
        step = f"[{i:>{len(str(len(dashboards)))}}/{len(dashboards)}] {uid:<{width}}"
        try:
            saved = api.save_dashboard(url, auth, prepare(dashboard, mapping),
                                       target["uid"], overwrite, message)
        except api.DashboardExists:
            out.append(Outcome(uid, title, "kept"))
            say(f"{step} kept: already in Grafana (--overwrite replaces it)")
            continue
        except api.GrafanaError as exc:
            if exc.fatal:
                raise
            out.append(Outcome(uid, title, "failed", error=str(exc)))
            warn(f"{step} failed: {exc}")
            continue
        version = int(saved.get("version", 0))
        status = "created" if version == 1 else "updated"
        link = api.link(url, saved.get("url", ""))
        out.append(Outcome(uid, title, status, version, link))
        say(f"{step} {status} (version {version})  {link}")
    return out
