"""lrbandit-gym: matrix-context bandits with low-rank truth, and valid online inference.

Importing the package registers ``MatrixContextBandit-v0`` and ``MatrixClassification-v0`` (a
bandit from a data set of matrices, :mod:`lrbandit_gym.digits`) idempotently with Gymnasium:

>>> import gymnasium as gym, lrbandit_gym
>>> env = gym.make("MatrixContextBandit-v0", d1=20, d2=20)

``gym.make("lrbandit_gym:MatrixContextBandit-v0")`` imports the package first, which is the
form to use in subprocess workers; ``gym.register_envs(lrbandit_gym)`` keeps linters from
removing the import.
"""

from __future__ import annotations

import gymnasium as gym

from lrbandit_gym.decision import Decision, split_decision
from lrbandit_gym.env import MatrixContextBanditEnv
from lrbandit_gym.problem import CONTEXTS, NOISES, BanditProblem
from lrbandit_gym.truth import draw_low_rank_truth, optimal_value
from lrbandit_gym.vector_env import MatrixContextBanditVectorEnv

__version__ = "0.1.0"
ENV_ID = "MatrixContextBandit-v0"
CLASSIFICATION_ENV_ID = "MatrixClassification-v0"

__all__ = [
    "CLASSIFICATION_ENV_ID",
    "CONTEXTS",
    "ENV_ID",
    "NOISES",
    "BanditProblem",
    "Decision",
    "MatrixContextBanditEnv",
    "MatrixContextBanditVectorEnv",
    "draw_low_rank_truth",
    "optimal_value",
    "register",
    "split_decision",
]


def register() -> None:
    """Register ``MatrixContextBandit-v0`` and ``MatrixClassification-v0`` once; calling it
    again does nothing."""
    if ENV_ID not in gym.registry:
        gym.register(
            id=ENV_ID,
            entry_point="lrbandit_gym.env:MatrixContextBanditEnv",
            vector_entry_point="lrbandit_gym.vector_env:MatrixContextBanditVectorEnv",
        )
    if CLASSIFICATION_ENV_ID not in gym.registry:
        gym.register(
            id=CLASSIFICATION_ENV_ID, entry_point="lrbandit_gym.digits:MatrixClassificationBandit"
        )


register()
