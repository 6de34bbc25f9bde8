"""``lrbandit compare``: agents side by side on the same trials.

:mod:`.run` runs a comparison; :mod:`.units` its work units (one agent on a chunk of
trials), :mod:`.stack` the wrappers on one agent's trajectory, :mod:`.report` and
:mod:`.figures` its results.
"""

from lrbandit_gym.experiments.compare.figures import comparison_figures
from lrbandit_gym.experiments.compare.report import OUTPUT_FILES, ComparisonResult, ReportedQuantity
from lrbandit_gym.experiments.compare.run import (
    DEFAULT_AGENTS,
    AgentSpec,
    ComparisonSetting,
    OurAgent,
    SB3Model,
    batched,
    compare,
    default_lineup,
    per_trial,
    sb3,
    sb3_available,
    trial_seeds,
)
from lrbandit_gym.experiments.compare.stack import REFUSALS, PropensityTracker, TrajectoryInference
from lrbandit_gym.experiments.compare.units import (
    TrialBatchEnv,
    make_trial_env,
    merge_units,
    run_unit,
)

__all__ = [
    "AgentSpec",
    "ComparisonResult",
    "ComparisonSetting",
    "DEFAULT_AGENTS",
    "OUTPUT_FILES",
    "OurAgent",
    "PropensityTracker",
    "REFUSALS",
    "ReportedQuantity",
    "SB3Model",
    "TrajectoryInference",
    "TrialBatchEnv",
    "batched",
    "compare",
    "comparison_figures",
    "default_lineup",
    "make_trial_env",
    "merge_units",
    "per_trial",
    "run_unit",
    "sb3",
    "sb3_available",
    "trial_seeds",
]
