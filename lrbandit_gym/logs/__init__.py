"""Logged bandit feedback: the log format, a recorder wrapper and a replay environment.

A *log* is a mapping of column names to numpy arrays, one row per round (docs/logs.md):
the context acted on (``context``, or ``context_index`` for completion contexts), the
``action``, the ``reward``, the chosen arm's ``propensity`` and optionally the logging
policy's whole ``pmf``, with the simulator's oracle values apart under ``oracle_*``.

- :mod:`lrbandit_gym.logs.format`: :func:`validate_log`, :func:`save_log`,
  :func:`load_log` (``.npz``, or ``.parquet`` with pyarrow);
- :func:`make_log`: a log from plain arrays (a user's own contexts);
- :class:`RecordRounds` / :class:`VectorRecordRounds`: record a run as a log;
- :class:`LogReplayEnv`: replay a log as a bandit, which is how
  :func:`inference.analyze` runs the inference wrappers on a saved log;
- :mod:`lrbandit_gym.logs.export`: :func:`to_obp` (Open Bandit Pipeline's
  ``bandit_feedback``, with a reward model from an estimate) and :func:`to_vw` (Vowpal
  Wabbit's contextual-bandit text format, one line per round or multiline for its ADF
  reductions).
"""

from lrbandit_gym.logs.build import make_log
from lrbandit_gym.logs.export import to_obp, to_vw
from lrbandit_gym.logs.format import (
    CONTEXT_COLUMNS,
    CONTEXT_LAWS,
    FORMAT_VERSION,
    METADATA,
    ORACLE_PREFIX,
    PMF_TOL,
    REQUIRED_COLUMNS,
    LogFormatError,
    load_log,
    log_sizes,
    save_log,
    validate_log,
)
from lrbandit_gym.logs.recorder import ORACLE_KEYS, RecordRounds, VectorRecordRounds
from lrbandit_gym.logs.replay import LogReplayEnv

__all__ = [
    "CONTEXT_COLUMNS",
    "CONTEXT_LAWS",
    "FORMAT_VERSION",
    "METADATA",
    "ORACLE_KEYS",
    "ORACLE_PREFIX",
    "PMF_TOL",
    "REQUIRED_COLUMNS",
    "LogFormatError",
    "LogReplayEnv",
    "RecordRounds",
    "VectorRecordRounds",
    "load_log",
    "log_sizes",
    "make_log",
    "save_log",
    "to_obp",
    "to_vw",
    "validate_log",
]
