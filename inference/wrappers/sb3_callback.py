"""Record the inference wrappers' intervals in stable-baselines3's logger during ``learn()``.

:class:`InferenceCallback` reads, at the end of every rollout (and every ``every`` steps if
asked), the intervals of the :class:`~inference.ParameterInference` and
:class:`~inference.ValueInference` wrappers in the training environment and records them with
``self.logger.record``, so they are written by whatever output formats the model's logger has
(stdout, CSV, TensorBoard) next to SB3's own training curves.  The TensorBoard output
(``configure(folder, ["tensorboard"])``) needs the ``tensorboard`` package, which the ``sb3``
extra does not install: ``pip install tensorboard``.  Keys, for each target ``T``
and arm ``a`` and for the optimal value::

    {prefix}/{T}/arm{a}/estimate   .../low   .../high   .../se
    {prefix}/V_star/estimate       .../low   .../high   .../se

(with ``/env{i}`` after the prefix when the vector env holds several environments).  Nothing
is recorded before inference has started (the wrappers' warm start).  Needs the ``sb3``
extra; :mod:`inference` exports the class lazily, so importing :mod:`inference` does not.
"""

from __future__ import annotations

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from inference.wrappers import ParameterInference, VectorParameterInference
from inference.wrappers.value_inference import ValueInference, VectorValueInference

__all__ = ["InferenceCallback", "find_inference_wrappers"]

_WRAPPERS = (ParameterInference, ValueInference, VectorParameterInference, VectorValueInference)


def find_inference_wrappers(env) -> list:
    """The inference wrappers in a stack of Gymnasium wrappers, outermost first."""
    found = []
    while env is not None:
        if isinstance(env, _WRAPPERS):
            found.append(env)
        env = getattr(env, "env", None)
    return found


class InferenceCallback(BaseCallback):
    """Log the inference wrappers' estimates, bounds and standard errors in SB3's logger.

    Parameters
    ----------
    wrappers : list, optional
        The inference wrappers to read (one list per environment of the training vector env,
        or one flat list for a single environment).  By default they are found in the
        training environment, which must then be a ``DummyVecEnv`` (the wrappers of a
        ``SubprocVecEnv`` live in other processes: pass them, or log there).
    every : int, optional
        Also record every ``every`` steps (by default only at the end of each rollout: for
        PPO/A2C just before SB3 writes its logs, for DQN every ``train_freq`` steps).
    dump : bool, default False
        Write the logs (``logger.dump``) after each recording.  Off-policy models on a bandit
        whose episodes never end never write their logs themselves; turn this on for them.
    confidence_level : float, default 0.95
    prefix : str, default "inference"
        First part of every key.

    Attributes
    ----------
    last_values : dict
        The values recorded last, by key (also for tests and for printing the keys).
    """

    def __init__(
        self,
        wrappers=None,
        *,
        every: int | None = None,
        dump: bool = False,
        confidence_level: float = 0.95,
        prefix: str = "inference",
        verbose: int = 0,
    ):
        super().__init__(verbose)
        if every is not None and (isinstance(every, bool) or int(every) != every or every < 1):
            raise ValueError(f"every must be a positive integer or None; got {every!r}")
        if not 0.0 < float(confidence_level) < 1.0:
            raise ValueError(f"confidence_level must be in (0, 1); got {confidence_level!r}")
        self._given = wrappers
        self.every = None if every is None else int(every)
        self.dump = bool(dump)
        self.confidence_level = float(confidence_level)
        self.prefix = str(prefix)
        self.last_values: dict[str, float] = {}
        self._groups: list[list] = []

    def _on_training_start(self) -> None:
        if self._given is not None:
            given = list(self._given)
            nested = bool(given) and isinstance(given[0], list | tuple)
            self._groups = [list(g) for g in given] if nested else [given]
        else:
            envs = getattr(self.training_env, "envs", None)
            if envs is None:
                raise ValueError(
                    "InferenceCallback finds the wrappers in a DummyVecEnv's environments; "
                    f"the training env is a {type(self.training_env).__name__}: pass "
                    "wrappers=[...]"
                )
            self._groups = [find_inference_wrappers(env) for env in envs]
        if not any(self._groups):
            raise ValueError(
                "InferenceCallback found no inference wrapper (ParameterInference or "
                "ValueInference) in the training environment"
            )

    def _on_step(self) -> bool:
        if self.every is not None and self.num_timesteps % self.every == 0:
            self.record()
        return True

    def _on_rollout_end(self) -> None:
        self.record()

    def record(self) -> dict[str, float]:
        """Read every interval now and record it; returns what was recorded."""
        values: dict[str, float] = {}
        several = len(self._groups) > 1
        for i, group in enumerate(self._groups):
            head = f"{self.prefix}/env{i}" if several else self.prefix
            for wrapper in group:
                if not wrapper.core.n_obs:
                    continue  # the warm start: no interval yet
                for key, ci in _intervals(wrapper, self.confidence_level):
                    for field, name in (
                        ("estimate", "estimate"),
                        ("low", "low"),
                        ("high", "high"),
                        ("standard_error", "se"),
                    ):
                        value = np.asarray(getattr(ci, field), dtype=float).reshape(-1)[0]
                        values[f"{head}/{key}/{name}"] = float(value)
        for key, value in values.items():
            self.logger.record(key, value)
        if values and self.dump:
            self.logger.dump(self.num_timesteps)
        if values:
            self.last_values = values
        return values


def _intervals(wrapper, level: float):
    """``(key, IntervalEstimate)`` for every target and arm, or for V*."""
    if isinstance(wrapper, ValueInference | VectorValueInference):
        yield "V_star", wrapper.interval(level)
        return
    for name in wrapper.target_names:
        for arm in range(wrapper.n_actions):
            yield f"{name}/arm{arm}", wrapper.interval(arm, name, level)
