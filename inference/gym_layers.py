"""What an inference wrapper needs to know about the Gymnasium wrappers below it.

An inference wrapper reads the context the environment returned, pairs it with the reward
and passes the action inward unchanged, so everything between it and the bandit must pass
all three through unchanged: :func:`transforms_data` and :func:`transforms_reward`
recognise the wrappers that do not (observation, action and reward wrappers, single and
vector), and :func:`refuse_transforming_layers` refuses them at construction.
:func:`refuse_reset_steps` refuses Gymnasium's ``Autoreset`` below with a ``TimeLimit``
under it: the step after an episode ends would reset the environment, ignore the action and
return reward 0, which is not a round of data.

A round that an inference wrapper refuses after the inner step (a non-finite reward, its own
estimator's fit or step failing) is undone: the bandit returns to its checkpoint, and so must
every wrapper in between that counted the step.  :func:`undo_for` gives, once at
construction, how to save and restore one such wrapper around each step: Gymnasium's
``TimeLimit`` (its step count) and ``RecordEpisodeStatistics`` (its running return and
length, its episode count and the episode it recorded), and any wrapper that offers the
bandit's own protocol, ``checkpoint()`` and ``restore(checkpoint)`` methods.  Wrappers that
do not override ``step``, and Gymnasium's ``OrderEnforcing`` and ``PassiveEnvChecker``
(their state changes on ``reset`` or only gates a first-step check), need nothing.  Any other
wrapper that overrides ``step`` keeps what it recorded of a refused round: restoring an
unknown object's state is not possible in general, and refusing such wrappers would refuse
legitimate ones (a step counter that wants to see every attempt); put it above the inference
wrappers, or give it ``checkpoint()`` and ``restore()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorActionWrapper, VectorObservationWrapper, VectorRewardWrapper

__all__ = [
    "StepUndo",
    "layers_below",
    "refuse_reset_steps",
    "refuse_transforming_layers",
    "transforms_data",
    "transforms_reward",
    "undo_for",
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


class StepUndo:
    """Saves one wrapper's state before a step (:meth:`save`) and puts it back
    (:meth:`restore`) when the round is refused after the inner step."""

    __slots__ = ("layer",)

    def __init__(self, layer) -> None:
        self.layer = layer

    def save(self) -> Any:
        return self.layer.checkpoint()

    def restore(self, saved: Any) -> None:
        self.layer.restore(saved)


class _TimeLimitUndo(StepUndo):
    """Gymnasium's ``TimeLimit``: its count of the episode's steps, ``_elapsed_steps``.
    ``TimeLimit`` has no accessor of its own for it, so it is read and written through
    Gymnasium's public ``get_wrapper_attr`` and ``set_wrapper_attr``, on the ``TimeLimit``
    itself (:func:`undo_for` checks that it holds the count before the wrapper is used)."""

    __slots__ = ()

    def save(self) -> int:
        return self.layer.get_wrapper_attr("_elapsed_steps")

    def restore(self, saved: int) -> None:
        self.layer.set_wrapper_attr("_elapsed_steps", saved)


class _EpisodeStatisticsUndo(StepUndo):
    """Gymnasium's single-env ``RecordEpisodeStatistics``: the running return and length,
    and, when the step ended an episode, the episode it recorded in its queues (and the
    oldest entry a full queue dropped for it)."""

    __slots__ = ()

    def save(self) -> tuple:
        s = self.layer
        q = s.return_queue  # the three queues grow together
        dropped = (s.time_queue[0], q[0], s.length_queue[0]) if q and len(q) == q.maxlen else None
        return s.episode_returns, s.episode_lengths, s.episode_count, s.episode_start_time, dropped

    def restore(self, saved: tuple) -> None:
        s = self.layer
        returns, lengths, count, start, dropped = saved
        if s.episode_count != count:  # the refused round ended an episode: forget it
            queues = (s.time_queue, s.return_queue, s.length_queue)
            for i, q in enumerate(queues):
                q.pop()
                if dropped is not None:
                    q.appendleft(dropped[i])
        s.episode_returns, s.episode_lengths = returns, lengths
        s.episode_count, s.episode_start_time = count, start


def undo_for(layer) -> StepUndo | None:
    """How to undo ``layer``'s share of a refused step, or None when it needs nothing or
    cannot be undone (see the module docstring).

    Raises
    ------
    ValueError
        For a ``TimeLimit`` without the step count this Gymnasium version should have.
    """
    if isinstance(layer, gym.wrappers.TimeLimit):
        if not hasattr(layer, "_elapsed_steps"):
            raise ValueError(
                f"cannot undo a refused round in this Gymnasium's TimeLimit (gymnasium "
                f"{gym.__version__}): make the bandit with max_episode_steps=None and put "
                "gymnasium.wrappers.TimeLimit above the inference wrappers"
            )
        return _TimeLimitUndo(layer)
    if isinstance(layer, gym.wrappers.RecordEpisodeStatistics):
        return _EpisodeStatisticsUndo(layer)
    cls = type(layer)  # the layer's own protocol, not one forwarded from below
    if callable(getattr(cls, "checkpoint", None)) and callable(getattr(cls, "restore", None)):
        return StepUndo(layer)
    return None
