"""``python -m rl_insight.cli``: the command at upstream's path. Upstream's own scripts and
tests run it so (and the `rl-insight` script of an environment installed before the move
names it); the parser and the commands are rl_insight/commands/main.py."""

import sys

from rl_insight.commands.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
