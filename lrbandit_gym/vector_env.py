"""Native vector twin of ``MatrixContextBandit-v0``: B independent trials, one numpy call."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from lrbandit_gym.decision import split_decision
from lrbandit_gym.input_checks import check_positive_int
from lrbandit_gym.problem import (
    BanditProblem,
    GroundTruthMixin,
    check_flatten,
    observation_space,
)

__all__ = ["MatrixContextBanditVectorEnv"]


class MatrixContextBanditVectorEnv(GroundTruthMixin, VectorEnv):
    """``num_envs`` independent copies of :class:`MatrixContextBanditEnv` sharing one truth.

    Built by ``gym.make_vec("MatrixContextBandit-v0", num_envs=B,
    vectorization_mode="vector_entry_point", **kwargs)`` with the single environment's keyword
    arguments.  Each step draws the ``(B, d1, d2)`` contexts and the B noises in one call each
    from ``self.np_random``; trials are independent given the truth, and their law is that of
    B single environments (tested statistically; the random streams are not those of a
    ``SyncVectorEnv``).  ``reset(seed=s)`` reseeds the whole batch; a list of B seeds is
    combined into one ``SeedSequence``.

    Actions: an integer array ``(B,)`` or a batched :class:`lrbandit_gym.Decision`.
    ``infos``: ``"expected_rewards"`` ``(B, K)``, ``"optimal_action"`` ``(B,)``, ``"regret"``
    ``(B,)`` (oracle values of the contexts just acted on).  By default nothing ever ends
    (``max_episode_steps=None``): a bandit has no episodes, and every step is a round.  With
    ``max_episode_steps`` the sub-environments truncate together, and the autoreset modes of
    Gymnasium 1.x are followed (``autoreset_mode``: ``SAME_STEP`` by default, where the reset
    happens within the truncating step so every step stays a real round; ``NEXT_STEP``,
    whose step after a truncation ignores the action and returns reward 0, which the
    inference wrappers refuse to watch; or ``DISABLED``).

    The returned observation array is fresh every step; rewards were computed when it was
    drawn, so editing it in place does not change them.  With ``observation="index"``
    (completion contexts) it is the int64 array ``(B, 2)`` of the revealed indices
    ``(j, k)``, drawn as the matrix form draws them.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        max_episode_steps: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        d1: int = 50,
        d2: int = 50,
        rank: int = 3,
        n_actions: int = 2,
        context: str = "gaussian",
        noise_std=0.1,
        singular_values=1.0,
        params=None,
        truth_seed=0,
        noise: str = "gaussian",
        flatten: bool = False,
        dtype=np.float64,
        render_mode: str | None = None,
        observation: str = "matrix",
        context_std=1.0,
        context_corr=0.0,
        entry_probs=None,
        contexts=None,
    ):
        self.num_envs = check_positive_int(num_envs, "num_envs")
        self.max_episode_steps = (
            None
            if max_episode_steps is None
            else check_positive_int(max_episode_steps, "max_episode_steps")
        )
        try:
            self.autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(
                f"autoreset_mode must be one of {[m.value for m in AutoresetMode]}; "
                f"got {autoreset_mode!r}"
            ) from None
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        if render_mode is not None:
            raise ValueError(f"render_mode must be None for the vector env; got {render_mode!r}")
        self.render_mode = None
        self.problem = BanditProblem(
            d1,
            d2,
            rank,
            n_actions,
            context,
            noise_std,
            singular_values,
            params,
            truth_seed,
            noise,
            dtype,
            context_std,
            context_corr,
            entry_probs,
            contexts,
        )
        self.flatten = check_flatten(flatten)
        p = self.problem
        self.single_observation_space = observation_space(p, self.flatten, observation)
        #: "matrix" or "index" (see :class:`~lrbandit_gym.MatrixContextBanditEnv`).
        self.observation = observation
        self.single_action_space = spaces.Discrete(p.n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._expected: np.ndarray | None = None
        self._steps = np.zeros(self.num_envs, dtype=np.int64)
        self._autoreset = np.zeros(self.num_envs, dtype=bool)

    def _draw(self) -> np.ndarray:
        p = self.problem
        index = self.observation == "index"
        x, flat_index = p.draw_contexts(self.np_random, self.num_envs, matrix=not index)
        self._expected = p.expected_rewards(x, flat_index)
        if index:
            return np.stack(np.divmod(flat_index, p.d2), axis=1).astype(np.int64, copy=False)
        return x.reshape(self.num_envs, -1) if self.flatten else x

    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        if seed is not None and not isinstance(seed, (int, np.integer)):
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(
                    f"seed must be an int or a sequence of num_envs={self.num_envs} ints; "
                    f"got {len(seeds)} seeds"
                )
            seed = int(np.random.SeedSequence([int(s) for s in seeds]).generate_state(1)[0])
        super().reset(seed=seed)
        self._steps[:] = 0
        self._autoreset[:] = False
        return self._draw(), {}

    def _check_actions(self, action) -> np.ndarray:
        arm, _ = split_decision(action)
        arr = np.asarray(arm)
        if arr.shape != (self.num_envs,) or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"actions must be an integer array of shape ({self.num_envs},); "
                f"got {arr.dtype} array of shape {arr.shape}"
            )
        bad = (arr < 0) | (arr >= self.problem.n_actions)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"actions must be in [0, {self.problem.n_actions}); got {arr[i]!r} "
                f"for sub-environment {i}"
            )
        return arr

    def step(self, actions):
        if self._expected is None:
            raise RuntimeError("Call reset() before step().")
        arms = self._check_actions(actions)
        p = self.problem
        b = np.arange(self.num_envs)
        expected = self._expected
        noise = p.noise_std[arms] * p.draw_noise(self.np_random, self.num_envs)
        rewards = expected[b, arms] + noise
        best = expected.argmax(axis=1)
        infos = {
            "expected_rewards": expected,
            "optimal_action": best,
            "regret": expected[b, best] - expected[b, arms],
        }
        terminations = np.zeros(self.num_envs, dtype=bool)
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset.any():
            # The step after a truncation is the reset of those sub-environments: the action
            # is ignored, reward 0, and the steps counter restarts (Gymnasium 1.x NEXT_STEP).
            done = self._autoreset
            rewards = np.where(done, 0.0, rewards)
            infos["regret"] = np.where(done, 0.0, infos["regret"])
            self._steps[done] = 0
            self._steps[~done] += 1
        else:
            self._steps += 1
        truncations = (
            np.zeros(self.num_envs, dtype=bool)
            if self.max_episode_steps is None
            else self._steps >= self.max_episode_steps
        )
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            truncations &= ~self._autoreset
            self._autoreset = truncations.copy()
        obs = self._draw()
        if self.autoreset_mode == AutoresetMode.SAME_STEP and truncations.any():
            # The context just drawn ends the episode (it is never acted on); the reset draws
            # afresh.  Contexts are i.i.d., so redrawing the whole batch changes no law.
            infos["final_obs"] = obs
            infos["_final_obs"] = truncations.copy()
            infos["final_info"] = {}
            infos["_final_info"] = truncations.copy()
            self._steps[truncations] = 0
            obs = self._draw()
        return obs, rewards, terminations, truncations, infos
