"""The Gymnasium wrappers that keep online intervals while any agent plays.

One inference wrapper (:mod:`inference.wrappers.inference_wrapper`) hosts the round for
every tracker of a stack (:mod:`inference.wrappers.tracker`); the public wrappers are its
presets: :class:`ParameterInference`, :class:`ValueInference`, :class:`PolicyEvaluation` and
their vector twins.
"""

from inference.wrappers.parameter_inference import ParameterInference, VectorParameterInference
from inference.wrappers.policy_evaluation import GREEDY, PolicyEvaluation, VectorPolicyEvaluation
from inference.wrappers.value_inference import ValueInference, VectorValueInference

__all__ = [
    "GREEDY",
    "ParameterInference",
    "PolicyEvaluation",
    "ValueInference",
    "VectorParameterInference",
    "VectorPolicyEvaluation",
    "VectorValueInference",
]
