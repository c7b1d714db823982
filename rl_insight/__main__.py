"""``python -m rl_insight``: the `rl-insight` command (as upstream 0.3.0 has it)."""

import sys

from rl_insight.commands.main import main

sys.exit(main())
