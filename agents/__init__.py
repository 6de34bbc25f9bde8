"""Agents for ``MatrixContextBandit-v0``: the online low-rank SGD estimator (Algorithm 1) and
policies that report, with every action, the exact probability of every arm.

The names here are the ones a user builds: the estimator, the policies (each returns a
:class:`Decision`), the warm start, the stable-baselines3 agent, and the loop that plays a
policy on an env (:func:`play`). The rest lives in its module's own ``__all__``:
:mod:`agents.base` (``PolicyBase``, ``problem_shape``, ``sample_actions``),
:mod:`agents.low_rank` (``LowRankPolicy``), :mod:`agents.warm_start` (the stores, the fits,
``default_warm_start_rounds``), :mod:`agents.state` (saving).
"""

from agents.base import Decision, Policy
from agents.baselines import LinearEpsilonGreedy, Oracle, UniformRandom
from agents.ensemble import EnsembleSampling
from agents.estimator import LowRankSGD
from agents.forced_exploration import ForcedExploration
from agents.low_rank import EpsilonGreedy, Softmax
from agents.play import play
from agents.sb3 import SB3Agent
from agents.warm_start import WarmStart

__all__ = [
    "Decision",
    "EnsembleSampling",
    "EpsilonGreedy",
    "ForcedExploration",
    "LinearEpsilonGreedy",
    "LowRankSGD",
    "Oracle",
    "Policy",
    "SB3Agent",
    "Softmax",
    "UniformRandom",
    "WarmStart",
    "play",
]
