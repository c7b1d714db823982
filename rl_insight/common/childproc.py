"""Child processes that die with their parent, started without running Python code
between fork and exec (``preexec_fn`` is unsafe in a process with threads, which the
server and every node agent are).

The child's PR_SET_PDEATHSIG is set by util-linux's ``setpriv --pdeathsig`` right before
it execs the real program, or, where setpriv is missing, by a small Python stage that
does the same and execs. The flag survives exec (prctl(2)), so a SIGKILLed parent leaves
no orphan behind.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence

# the fallback stage: set the flag, leave at once if the parent already went, then exec
_STAGE = ("import ctypes, os, signal, sys\n"
          "ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)\n"
          "if os.getppid() == int(sys.argv[1]):\n"
          "    os.execvp(sys.argv[2], sys.argv[2:])\n")


def die_with_parent(argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped so the program gets SIGTERM when this process dies."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, "--pdeathsig", "TERM", "--", *argv]
    import os

    return [sys.executable, "-c", _STAGE, str(os.getpid()), *argv]
