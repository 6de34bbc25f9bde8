"""Agents for ``MatrixContextBandit-v0``: the online low-rank SGD estimator (Algorithm 1) and
policies that report, with every action, the exact probability of every arm.
"""

from agents.base import Decision, Policy, PolicyBase, problem_shape, sample_actions
from agents.baselines import LinearEpsilonGreedy, Oracle, UniformRandom
from agents.ensemble import EnsembleSampling
from agents.estimator import LowRankSGD
from agents.forced_exploration import ForcedExploration
from agents.low_rank import EpsilonGreedy, LowRankPolicy, Softmax
from agents.sb3 import SB3Agent
from agents.warm_start import (
    CompletionWarmStartBuffer,
    StreamingWarmStart,
    WarmStart,
    WarmStartBuffer,
    default_warm_start_rounds,
    initial_estimate,
    nuclear_norm_fit,
)

__all__ = [
    "CompletionWarmStartBuffer",
    "Decision",
    "EnsembleSampling",
    "EpsilonGreedy",
    "ForcedExploration",
    "LinearEpsilonGreedy",
    "LowRankPolicy",
    "LowRankSGD",
    "Oracle",
    "Policy",
    "PolicyBase",
    "SB3Agent",
    "Softmax",
    "StreamingWarmStart",
    "UniformRandom",
    "WarmStart",
    "WarmStartBuffer",
    "default_warm_start_rounds",
    "initial_estimate",
    "nuclear_norm_fit",
    "problem_shape",
    "sample_actions",
]
