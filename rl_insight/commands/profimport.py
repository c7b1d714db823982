"""`rl-insight import PATH... --profiler torch|nvtx|mstx`: a run's profiler files into the
server as its rank lanes and steps (rl_insight/profiler/importer.py does the work; this
is its progress, its messages and its summary)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rl_insight.commands.common import mark_finished, server_client
from rl_insight.wire import paths

if TYPE_CHECKING:
    from rl_insight.commands.api_client import ServerClient
    from rl_insight.profiler.importer import Import, Tally
    from rl_insight.profiler.readers import Reader

RETRIES = 5  # a busy server (503, Retry-After) is asked again this many times
# an export of up to 5,000 spans: a server beside a training run's load may take long to
# answer one (a fresh clone beside a busy core passed the API's 10 s); nobody waits on an
# import as on a training step
EXPORT_TIMEOUT_S = 60.0
NOTE_EVERY_S = 10.0  # without a terminal, a progress line this often


def _sender(client: ServerClient) -> Callable[[bytes], bool]:
    """``send(export) -> bool`` to the server's /v1/traces, a busy server waited for."""
    from rl_insight.commands.api_client import ApiError

    def send(payload: bytes) -> bool:
        for attempt in range(RETRIES):
            try:
                client.post_bytes(paths.TRACES, payload, "application/x-protobuf")
                return True
            except ApiError as exc:
                if exc.status != 503 or attempt == RETRIES - 1:
                    print(f"rl-insight: {exc}", file=sys.stderr)
                    return False
                time.sleep(1.0 + attempt)
        return False
    return send


class Progress:
    """Files read of N, ranks and bytes: a tqdm bar on a terminal, a line every
    ``NOTE_EVERY_S`` otherwise (a log file), nothing for a few files."""

    def __init__(self, total: int, tally: Tally) -> None:
        from tqdm import tqdm

        self.tally, self.total = tally, total
        tty = sys.stderr.isatty()
        self.bar = tqdm(total=total, unit="file", disable=not tty or total < 20,
                        file=sys.stderr) if tty else None
        self.quiet = tty or total < 20
        self.noted = time.monotonic()

    def __call__(self, _path: Path) -> None:
        t = self.tally
        if self.bar is not None:
            self.bar.set_postfix_str(f"{len(t.ranks)} ranks, {t.bytes / 1e6:.0f} MB",
                                     refresh=False)
            self.bar.update(1)
        elif not self.quiet and time.monotonic() - self.noted >= NOTE_EVERY_S:
            self.noted = time.monotonic()
            print(f"read {t.read + len(t.bad)} of {self.total} files, {len(t.ranks)} "
                  f"ranks, {t.bytes / 1e6:.0f} MB", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _ranges(numbers: set[int]) -> str:
    """``0-7, 9`` for a set of ranks or steps."""
    out, run = [], []
    for n in sorted(numbers):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def summary(tally: Tally, args: argparse.Namespace, url: str) -> list[str]:
    """What came in, what was skipped and why, and where to look."""
    lines = [f"{tally.read} of {tally.files} files imported into {url} as "
             f"{args.project}/{args.experiment}: {len(tally.ranks)} ranks "
             f"({_ranges(tally.ranks) or 'none'}), {len(tally.steps)} steps "
             f"({_ranges(tally.steps) or 'none'}), {tally.spans} spans"
             + (f"; roles {', '.join(sorted(tally.roles))}" if tally.roles else "")]
    if tally.experts:
        lines.append(f"the experts' load of {tally.experts} stage"
                     f"{'s' if tally.experts != 1 else ''} (msprobe's dumps) in the report "
                     "and the Step anatomy dashboard")
    if tally.unmarked:
        lines.append(f"{tally.unmarked} ranges that are no verl stage (FSDP's, your own "
                     "record_function) are in the timeline only")
    for path, why in sorted(tally.bad.items()):
        lines.append(f"skipped {path}: {why}")
    if tally.steps:
        step = max(tally.steps)
        lines.append(f"see it: rl-insight report --project {args.project} "
                     f"--experiment-name {args.experiment} --step {step}")
    elif tally.read:
        lines.append("no file said which step it holds (verl's torch traces name it, "
                     "step<N>): the ranks' lanes are in, no step marks; a run monitored "
                     "live has its own: import into it")
    return lines


def _expert_loads(roots: list[str], bad: dict[str, str]) -> dict:
    """An MoE model's expert loads where verl's msprobe dumps lie among the inputs
    (rl_insight/profiler/experts.py); a dump that cannot be read is said in ``bad``."""
    from rl_insight.profiler import experts

    out: dict = {}
    for root in roots:
        if not Path(root).is_dir():
            continue
        said: list[str] = []
        for key, layers in experts.read(root, said).items():
            out.setdefault(key, {}).update(layers)
        for line in said:
            where, _, why = line.partition(": ")
            bad[where] = why or line
    return out


def cmd_import_profiler(args: argparse.Namespace) -> int:
    """Import the files once (or follow them with ``--follow``), then say what came in."""
    from rl_insight.profiler import importer, readers
    from rl_insight.profiler.timeline import RankTimeline

    try:
        reader = readers.get(args.profiler)
    except readers.NoReader as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 2
    missing = [p for p in args.files if not Path(p).exists()]
    if missing and not args.follow:
        print(f"rl-insight: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    options = {}
    if args.rank_from:
        try:
            options = _rank_from(reader, args.rank_from)
        except (OSError, ValueError) as exc:
            print(f"rl-insight: --rank-from {args.rank_from}: {exc}", file=sys.stderr)
            return 2
    client = server_client(args)
    client.timeout = max(client.timeout, EXPORT_TIMEOUT_S)
    live = _live(client, args)
    timeline = RankTimeline(args.timeline, f"{args.project}/{args.experiment}") \
        if args.timeline else None
    job = importer.Import(args.profiler, args.project, args.experiment, _sender(client),
                          timeline, options, _expert_loads(args.files, bad := {}))
    job.tally.bad.update(bad)
    try:
        if args.follow:
            _follow(job, args)
        else:
            files = importer.inputs(reader, args.files)
            if not files:
                print(f"rl-insight: no {args.profiler} trace file under "
                      f"{' '.join(args.files)}", file=sys.stderr)
                return 2
            progress = Progress(len(files), job.tally)
            if args.jobs > 1 and timeline is not None:
                print("rl-insight: --timeline reads the files in this process; --jobs "
                      "left out", file=sys.stderr)
            try:
                job.run(files, progress, jobs=max(1, args.jobs))
            finally:
                progress.close()
    except importer.SendFailed as exc:
        print(f"rl-insight: {exc}; stopped after {job.tally.read} whole files. Check "
              "`rl-insight server status`, then run the same command again (a rank's "
              "phase sent twice is one at the server)", file=sys.stderr)
        return 1
    finally:
        if timeline is not None:
            timeline.close()
    for line in summary(job.tally, args, client.url):
        print(line)
    if timeline is not None:
        print(f"wrote every rank's ranges and device work ({timeline.ranks} ranks) to "
              f"{args.timeline}: open it in https://ui.perfetto.dev")
    if live:
        print(f"{args.project}/{args.experiment} was running at the server: its imported "
              "ranks joined its steps, and it is left running")
    else:
        _finish(client, args)
    return 1 if job.tally.bad and not job.tally.read else 0


def _follow(job: Import, args: argparse.Namespace) -> None:
    from rl_insight.profiler import importer

    follower = importer.Follower(job, args.files, settle_s=args.settle)
    print(f"following {', '.join(args.files)} ({args.profiler} traces) into run "
          f"{args.project}/{args.experiment}; a file is read once it stopped growing "
          f"for {args.settle:g} s; Ctrl-C stops", flush=True)
    try:
        while True:
            for path in follower.poll():
                why = job.tally.bad.get(str(path))
                print(f"{path}: skipped, {why}" if why else f"{path}: imported", flush=True)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    follower.finish()


def _rank_from(reader: Reader, path: str) -> dict:
    """``--rank-from FILE``: lines ``<file name, host:pid or pid> <rank>``, for a reader
    whose files may not say their rank (Nsight's reports without RANK in their
    environment); the reader's ``ranks=``."""
    import inspect

    if "ranks" not in inspect.signature(reader.read).parameters:
        raise ValueError("this profiler's files say their rank themselves; leave it out")
    ranks = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, rank = line.strip().rpartition(" ")
        if not key.strip() or not rank.isdigit():
            raise ValueError(f"line {n} is not `<file name or host:pid or pid> <rank>`")
        ranks[key.strip()] = int(rank)
    return {"ranks": ranks}


def _live(client: ServerClient, args: argparse.Namespace) -> bool:
    """Whether the run is active at the server already (monitored live: joined, and
    not marked finished by the import)."""
    from rl_insight.commands.api_client import ApiError

    try:
        runs = client.get(paths.EXPERIMENTS).get("experiments", [])
    except ApiError:
        return False
    return any(r.get("project") == args.project and
               r.get("experiment_name") == args.experiment and r.get("status") == "active"
               for r in runs)


def _finish(client: ServerClient, args: argparse.Namespace) -> None:
    """A one-off import marks the run finished, so its last step is final now."""
    if not (args.running or args.follow):
        mark_finished(client, args.project, args.experiment)
