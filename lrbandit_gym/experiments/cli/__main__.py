"""``python -m lrbandit_gym.experiments.cli``: the ``lrbandit`` command."""

import sys

from lrbandit_gym.experiments.cli import main

sys.exit(main())
