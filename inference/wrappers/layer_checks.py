"""What an inference wrapper needs to know about the Gymnasium wrappers below it.

An inference wrapper reads the context the environment returned, pairs it with the reward
and passes the action inward unchanged, so everything between it and the bandit must pass
all three through unchanged: :func:`transforms_data` and :func:`transforms_reward`
recognise the wrappers that do not (observation, action and reward wrappers, single and
vector), and :func:`refuse_transforming_layers` refuses them at construction.
:func:`refuse_reset_steps` refuses Gymnasium's ``Autoreset`` below with a ``TimeLimit``
under it: the step after an episode ends would reset the environment, ignore the action and
return reward 0, which is not a round of data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorActionWrapper, VectorObservationWrapper, VectorRewardWrapper

__all__ = [
    "layers_below",
    "refuse_reset_steps",
    "refuse_transforming_layers",
    "transforms_data",
    "transforms_reward",
]

# Gymnasium's reward wrappers, by name, for those that do not subclass the reward wrapper
# classes (and for other libraries' wrappers of the same names).
_REWARD_WRAPPERS = frozenset(
    {"NormalizeReward", "ClipReward", "TransformReward", "VectorizeTransformReward"}
)

# Gymnasium's wrappers (single and vector) that change observations or actions, by name, for
# those that do not subclass the observation or action wrapper classes (and for other
# libraries' wrappers of the same names).
_DATA_WRAPPERS = frozenset(
    {
        "AddRenderObservation",
        "AtariPreprocessing",
        "ClipAction",
        "DelayObservation",
        "DiscretizeAction",
        "DiscretizeObservation",
        "DtypeObservation",
        "FilterObservation",
        "FlattenObservation",
        "FrameStackObservation",
        "GrayscaleObservation",
        "MaxAndSkipObservation",
        "NormalizeObservation",
        "RepeatAction",
        "RescaleAction",
        "RescaleObservation",
        "ReshapeObservation",
        "ResizeObservation",
        "StickyAction",
        "TimeAwareObservation",
        "TransformAction",
        "TransformObservation",
        "VectorizeTransformAction",
        "VectorizeTransformObservation",
    }
)

_DATA_CLASSES = (
    gym.ObservationWrapper,
    gym.ActionWrapper,
    VectorObservationWrapper,
    VectorActionWrapper,
)


def layers_below(env) -> Iterator[Any]:
    """The wrappers from ``env`` down to the bandit (``env.unwrapped``), excluded."""
    base = env.unwrapped
    layer = env
    while layer is not None and layer is not base:
        yield layer
        layer = getattr(layer, "env", None)


def transforms_data(wrapper) -> bool:
    """Whether ``wrapper`` changes the observations or the actions it passes on: a subclass
    of Gymnasium's observation or action wrappers (single or vector), or a class of one of
    Gymnasium's names for such wrappers anywhere in its MRO."""
    if isinstance(wrapper, _DATA_CLASSES):
        return True
    return any(cls.__name__ in _DATA_WRAPPERS for cls in type(wrapper).__mro__)


def transforms_reward(wrapper) -> bool:
    """Whether ``wrapper`` changes the rewards it passes on: a subclass of
    ``gym.RewardWrapper`` or ``VectorRewardWrapper``, or a class of one of Gymnasium's names
    for reward wrappers anywhere in its MRO."""
    if isinstance(wrapper, gym.RewardWrapper | VectorRewardWrapper):
        return True
    return any(cls.__name__ in _REWARD_WRAPPERS for cls in type(wrapper).__mro__)


def refuse_transforming_layers(env, who: str) -> None:
    """Refuse, naming ``who`` (the inference wrapper's class), any wrapper between ``env``
    and the bandit that changes rewards, observations or actions: the inference wrapper
    would estimate from the changed data.

    Raises
    ------
    ValueError
        Naming the first such wrapper, outermost first, and where it belongs.
    """
    for layer in layers_below(env):
        if transforms_reward(layer):
            raise ValueError(
                f"{who} must sit below reward-transforming wrappers, not above "
                f"{type(layer).__name__}: it would estimate the transformed reward, not "
                "<M_a, X>; wrap the bandit with the inference wrappers first and add "
                f"{type(layer).__name__} on top"
            )
        if transforms_data(layer):
            raise ValueError(
                f"{who} must sit below wrappers that change observations or "
                f"actions, not above {type(layer).__name__}: it would pair the changed "
                "context or action with the bandit's reward and estimate the wrong "
                "<M_a, T>; wrap the bandit with the inference wrappers first and add it "
                f"on top (or give {who} env.unwrapped)"
                + (
                    "; for flat observations make the bandit with flatten=True"
                    if "Flatten" in type(layer).__name__
                    else ""
                )
            )


def refuse_reset_steps(env, who: str) -> None:
    """Refuse, naming ``who`` (the inference wrapper's class), Gymnasium's ``Autoreset``
    between ``env`` and the bandit with a ``TimeLimit`` below it: the step after each
    episode would reset the environment, ignore the action and return reward 0, and the
    inference wrapper would absorb it as a round.

    Raises
    ------
    ValueError
        Saying where ``Autoreset`` belongs, or to make the bandit without episodes.
    """
    layers = list(layers_below(env))
    for i, layer in enumerate(layers):
        if not isinstance(layer, gym.wrappers.Autoreset):
            continue
        if any(isinstance(w, gym.wrappers.TimeLimit) for w in layers[i:]):
            raise ValueError(
                f"{who} cannot sit above gymnasium.wrappers.Autoreset when the episodes end "
                "(a TimeLimit, from max_episode_steps, is below it): the step after each "
                "episode resets the environment, ignores the action and returns reward 0, "
                f"which is not a round of data; put Autoreset above {who}, or make the "
                "bandit with max_episode_steps=None"
            )
