"""Valid online inference on adaptively collected data (docs/method.md §4-5).

Core estimators work on any stream ``(X_t, a_t, y_t, π_t)`` with a predictable low-rank
estimate; the wrappers run them while any agent plays a ``MatrixContextBandit-v0``.
"""

from inference.exploration_only import ExplorationOnlyInference
from inference.linear_form import LinearFormInference
from inference.optimal_value import OptimalValueInference
from inference.results import InsufficientDataWarning, IntervalEstimate
from inference.wrappers import (
    ParameterInference,
    ValueInference,
    VectorParameterInference,
    VectorValueInference,
)

__all__ = [
    "ExplorationOnlyInference",
    "InsufficientDataWarning",
    "IntervalEstimate",
    "LinearFormInference",
    "OptimalValueInference",
    "ParameterInference",
    "ValueInference",
    "VectorParameterInference",
    "VectorValueInference",
]
