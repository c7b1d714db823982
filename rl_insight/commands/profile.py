"""`rl-insight profile`: ask the server for a profile of one trainer rank of a run, wait
for its node's lane actor to capture it, print its top frames and write it as speedscope
JSON (rl_insight/server/analyses/profiles.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rl_insight.anatomy.ranks import frame_lines
from rl_insight.commands.api_client import ApiError, ServerClient
from rl_insight.wire import paths

POLL_S = 1.0


def run(client: ServerClient, project: str, experiment: str, rank: str,
        seconds: float | None, wait_s: float, output: str | None) -> int:
    try:
        p = client.post(paths.PROFILES, {"project": project, "experiment_name": experiment,
                                             "rank": str(rank),
                                             **({"seconds": seconds} if seconds else {})})
    except ApiError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 1
    print(f"profile {p['id']} of rank {rank} of {project}/{experiment}: asked for "
          f"{p['seconds']:g} s; its node's lane actor (outside Ray: the rank's own "
          "process) takes it at its next look",
          file=sys.stderr)
    deadline = time.monotonic() + wait_s
    said = p["status"]
    while p["status"] in ("pending", "capturing") and time.monotonic() < deadline:
        time.sleep(POLL_S)
        try:
            p = client.get(paths.PROFILE.format(pid=p["id"]))
        except ApiError as exc:
            print(f"rl-insight: {exc}", file=sys.stderr)
            return 1
        if p["status"] != said:
            said = p["status"]
            print(f"  {said}" + (f" by {p['taken_by']}" if p.get("taken_by") else ""),
                  file=sys.stderr)
    if p["status"] in ("pending", "capturing"):
        print(f"rl-insight: profile {p['id']} is still {p['status']} after {wait_s:g} s; "
              f"`rl-insight profile` again later, or GET /api/v1/profiles/{p['id']}",
              file=sys.stderr)
        return 1
    if p["status"] != "done":
        print(f"rl-insight: profile {p['id']} {p['status']}: {p.get('error')}",
              file=sys.stderr)
        return 1
    print(f"rank {rank} ({p['process']}), {p['method']}, {p['seconds']:g} s; where its "
          "time went:")
    for line in frame_lines(p.get("top_frames", []), 8, total=True):
        print("  " + line)
    if not p.get("top_frames"):
        print("  no samples of its code: every thread waited the whole time (in a lock, "
              "a queue, a sleep or a call into C); profile it again while it works, for "
              "longer (--seconds)")
    path = Path(output or f"profile-{project}-{experiment}-rank{rank}-{p['id']}.json")
    path.write_text(_download(client, p["id"]))
    print(f"written to {path} (open it in speedscope.app or ui.perfetto.dev)")
    return 0


def _download(client: ServerClient, pid: str) -> str:
    import json

    got = client.get(paths.PROFILE_SPEEDSCOPE.format(pid=pid))
    return got if isinstance(got, str) else json.dumps(got)
