"""The inference cores: online intervals on any stream ``(X_t, a_t, y_t, π_t)`` with a
predictable low-rank estimate (docs/method.md §4-10).

:class:`LinearFormInference` (``<M_a, T>``, Algorithms 2-3), :class:`OptimalValueInference`
(``V*``, Section 4), :class:`PolicyValueInference` (target policies' values) and
:class:`ExplorationOnlyInference`; the modules beside them hold what they compute each round.
"""

from inference.cores.exploration_only import ExplorationOnlyInference
from inference.cores.linear_form import LinearFormInference
from inference.cores.optimal_value import OptimalValueInference
from inference.cores.policy_value import PolicyValueInference

__all__ = [
    "ExplorationOnlyInference",
    "LinearFormInference",
    "OptimalValueInference",
    "PolicyValueInference",
]
