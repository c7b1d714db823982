"""The machine's CPU, busy share every few seconds, until stopped: beside a test run, so
scripts/timeline.py can say how busy the CPUs were while each module ran.

    .venv/bin/python scripts/cpu_busy.py /tmp/cpu.tsv &   # each line: epoch seconds, share
"""

from __future__ import annotations

import sys
import time


def totals() -> tuple[int, int]:
    """All jiffies and the idle ones (idle + iowait) since boot, over every CPU."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]


def main(path: str, every_s: float = 2.0) -> None:
    last = totals()
    with open(path, "w") as out:
        while True:
            time.sleep(every_s)
            now = totals()
            spent = max(1, now[0] - last[0])
            out.write(f"{time.time():.1f}\t{1 - (now[1] - last[1]) / spent:.3f}\n")
            out.flush()
            last = now


if __name__ == "__main__":
    main(sys.argv[1])
