"""Valid online inference on adaptively collected data (docs/method.md §4-5).

Core estimators work on any stream ``(X_t, a_t, y_t, π_t)`` with a predictable low-rank
estimate; the wrappers run them while any agent plays a ``MatrixContextBandit-v0``.
"""

from lrbandit_gym.package_check import check_companion, companion_error

try:  # the agents package must be lrbandit-gym's (see lrbandit_gym.package_check)
    import agents as _agents
except Exception as exc:
    raise companion_error("agents", f"importing it failed: {exc!r}") from exc
check_companion(_agents, "agents", "LowRankSGD")

from inference.analyze import AnalysisResult, analyze  # noqa: E402
from inference.cores.context_check import ContextLawWarning  # noqa: E402
from inference.cores.exploration_only import ExplorationOnlyInference  # noqa: E402
from inference.cores.linear_form import LinearFormInference  # noqa: E402
from inference.cores.optimal_value import OptimalValueInference  # noqa: E402
from inference.cores.played_regret import ValueBiasWarning  # noqa: E402
from inference.cores.policy_value import PolicyValueInference  # noqa: E402
from inference.results import (  # noqa: E402
    InsufficientDataWarning,
    IntervalEstimate,
    SmallPropensityWarning,
)
from inference.wrappers import ParameterInference, VectorParameterInference  # noqa: E402
from inference.wrappers.build import build_stack, stack_layers  # noqa: E402
from inference.wrappers.policy_evaluation import (  # noqa: E402
    GREEDY,
    PolicyEvaluation,
    VectorPolicyEvaluation,
)
from inference.wrappers.value_inference import ValueInference, VectorValueInference  # noqa: E402

__all__ = [
    "GREEDY",
    "AnalysisResult",
    "ContextLawWarning",
    "ExplorationOnlyInference",
    "InferenceCallback",
    "InsufficientDataWarning",
    "IntervalEstimate",
    "LinearFormInference",
    "OptimalValueInference",
    "ParameterInference",
    "PolicyEvaluation",
    "PolicyValueInference",
    "SmallPropensityWarning",
    "ValueBiasWarning",
    "ValueInference",
    "VectorParameterInference",
    "VectorPolicyEvaluation",
    "VectorValueInference",
    "analyze",
    "build_stack",
    "stack_layers",
]


def __getattr__(name):
    # InferenceCallback subclasses stable-baselines3's BaseCallback: imported on first use,
    # so that importing inference needs neither stable-baselines3 nor torch.
    if name == "InferenceCallback":
        from inference.wrappers.sb3_callback import InferenceCallback

        return InferenceCallback
    raise AttributeError(f"module 'inference' has no attribute {name!r}")
