"""``lrbandit validate``: a Monte Carlo check of the intervals' coverage in any setting.

:mod:`.run` runs it; :mod:`.setting` is what it checks, :mod:`.grid` the settings outside
the paper's, :mod:`.stack` the wrappers of a chunk, :mod:`.readers` and :mod:`.uniform`
their read-outs, :mod:`.report` the tables and the verdict.
"""

from lrbandit_gym.experiments.validate.grid import GRID, OTHER_LAWS
from lrbandit_gym.experiments.validate.readers import CheckpointReader, Reader
from lrbandit_gym.experiments.validate.report import (
    FAMILY_LEVEL,
    Quantity,
    ValidationResult,
    cell_flag,
    flag_cells,
    verdict,
)
from lrbandit_gym.experiments.validate.run import (
    check_setting,
    default_batch_size,
    run_chunk,
    run_validation,
    validate,
)
from lrbandit_gym.experiments.validate.setting import (
    ENV_KEYS,
    ESTIMATORS,
    EXPLORING_POLICIES,
    LOW_RANK_POLICIES,
    POLICIES,
    SettingError,
    ValidationSetting,
    load_targets,
    make_env,
    make_policy,
    problem_sizes,
    sgd_kwargs,
    shares_estimator,
    warm_start_rounds,
)
from lrbandit_gym.experiments.validate.stack import InferenceStack
from lrbandit_gym.experiments.validate.uniform import UniformReader, uniform_verdict

__all__ = [
    "CheckpointReader",
    "ENV_KEYS",
    "ESTIMATORS",
    "EXPLORING_POLICIES",
    "FAMILY_LEVEL",
    "GRID",
    "InferenceStack",
    "LOW_RANK_POLICIES",
    "OTHER_LAWS",
    "POLICIES",
    "Quantity",
    "Reader",
    "SettingError",
    "UniformReader",
    "ValidationResult",
    "ValidationSetting",
    "cell_flag",
    "check_setting",
    "default_batch_size",
    "flag_cells",
    "load_targets",
    "make_env",
    "make_policy",
    "problem_sizes",
    "run_chunk",
    "run_validation",
    "sgd_kwargs",
    "shares_estimator",
    "uniform_verdict",
    "validate",
    "verdict",
    "warm_start_rounds",
]
