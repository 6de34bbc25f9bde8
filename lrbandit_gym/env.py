"""``MatrixContextBandit-v0``: a K-armed bandit whose contexts are matrices."""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from lrbandit_gym.decision import Decision, split_decision
from lrbandit_gym.problem import (
    BanditProblem,
    GroundTruthMixin,
    check_flatten,
    observation_space,
)

__all__ = ["MatrixContextBanditEnv", "check_action"]


def check_action(action, n_actions: int) -> int:
    """Return ``action`` as an ``int`` in ``[0, n_actions)`` or raise ``ValueError``."""
    if isinstance(action, np.ndarray) and action.shape == ():
        action = action.item()
    if isinstance(action, np.ndarray) and action.ndim == 1 and action.size > 1:
        raise ValueError(
            f"action must be one integer in [0, {n_actions}); got {action.size} actions "
            f"{action!r}: a batched Decision goes to the native vector env, "
            'gym.make_vec("MatrixContextBandit-v0", num_envs=B, '
            'vectorization_mode="vector_entry_point"); Gymnasium\'s sync and async vector '
            "envs take an integer array of actions, one per copy of the single env"
        )
    if isinstance(action, bool) or not isinstance(action, numbers.Integral):
        raise ValueError(f"action must be an integer in [0, {n_actions}); got {action!r}")
    if not 0 <= action < n_actions:
        raise ValueError(f"action must be in [0, {n_actions}); got {action!r}")
    return int(action)


class MatrixContextBanditEnv(GroundTruthMixin, gym.Env):
    """A contextual bandit with matrix contexts and low-rank arm parameters.

    ## Description
    Each round a context ``X_t ∈ R^{d1×d2}`` is observed, the agent pulls arm ``a_t`` and
    receives ``y_t = <M_{a_t}, X_t> + σ_{a_t} ξ_t`` with ``<A, B> = tr(AᵀB)`` and every
    ``M_a`` of rank ``rank`` (docs/method.md §1; the paper's Section 2).  The truth is drawn
    once from ``truth_seed`` (or given as ``params``) and never changes on ``reset``: reseeding
    changes contexts and noise only, so many trials can share one truth.

    ## Action Space
    ``Discrete(n_actions)``.  ``step`` also accepts a :class:`lrbandit_gym.Decision` (an action
    with its propensities, as returned by the agents); the environment reads its ``action``.

    ## Observation Space
    The context of the next round: ``Box(-inf, inf, (d1, d2))`` for Gaussian contexts
    (i.i.d. N(0, 1) entries), ``Box(0, 1, (d1, d2))`` for completion contexts (one-hot
    ``e_j e_kᵀ`` with ``(j, k)`` uniform).  ``flatten=True`` gives shape ``(d1·d2,)``, the
    form stable-baselines3's MLP policies take.  For completion contexts
    ``observation="index"`` gives the revealed index instead: ``MultiDiscrete([d1, d2])``,
    an int64 array ``[j, k]``, which the agents and the inference wrappers read without
    ever forming the ``d1 x d2`` matrix (a round then costs O((d1 + d2) r) instead of
    O(d1 d2)); same draws, rewards and ``info`` as the matrix form with the same seed.  The
    truth is never in the observation.

    ## Rewards
    ``y_t``.  ``info`` after every step (fixed keys and shapes, oracle values for the context
    just acted on): ``"expected_rewards"`` ``(K,)``, ``"optimal_action"`` ``int``,
    ``"regret"`` ``float`` (expected regret of the chosen arm).  ``reset`` returns ``{}``.

    ## Episode End
    Never terminates and, as registered, never truncates: a bandit has no episodes.  Pass
    ``max_episode_steps`` to ``gym.make`` for Gymnasium's truncation.

    ## Arguments
    ============== =========================== ===========================================
    argument       default                     meaning
    ============== =========================== ===========================================
    d1, d2         50, 50                      context shape
    rank           3                           rank r of every ``M_a``
    n_actions      2                           number of arms K ≥ 2
    context        "gaussian"                  "gaussian" or "completion"
    noise_std      0.1                         σ, scalar or one per arm
    singular_values 1.0                        scalar, (r,) or (K, r)
    params         None                        a user-supplied ``(K, d1, d2)`` truth
    truth_seed     0                           seed of the truth (independent of reset)
    noise          "gaussian"                  "gaussian", "uniform", "rademacher",
                                               "laplace" or "student_t" (3 d.o.f.),
                                               all scaled to standard deviation σ
    flatten        False                       flat ``(d1·d2,)`` observations
    dtype          float64                     observation dtype (float32 or float64)
    observation    "matrix"                    "matrix" or, for completion contexts,
                                               "index" (the pair ``(j, k)``, int64)
    context_std    1.0                         Gaussian contexts: the entries' s.d.
    context_corr   0.0                         Gaussian contexts: AR(1) correlation of
                                               neighbouring rows and columns (or a
                                               ``(row, column)`` pair)
    entry_probs    None                        completion contexts: ``(d1, d2)``
                                               frequencies of the revealed entries
    contexts       None                        a data set ``(N, d1, d2)`` to draw the
                                               contexts from uniformly (images, say)
    ============== =========================== ===========================================

    ## Ground truth (on ``env.unwrapped``)
    ``true_params`` ``(K, d1, d2)``, ``optimal_value`` (exact ``V*``), ``linear_form(T)``
    ``(K,)``, ``context_scale`` (``c`` of Appendix C), ``context_law`` (the contexts'
    second moment, :mod:`lrbandit_gym.context_law`: the law the inference wrappers use by
    default; ``V*`` is exact under every law above, :mod:`lrbandit_gym.context_source`).

    ## Version History
    * v0: initial version (``observation="index"`` added later: the same dynamics).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
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
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {self.metadata['render_modes']}; "
                f"got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.flatten = check_flatten(flatten)
        p = self.problem
        self.observation_space = observation_space(p, self.flatten, observation)
        #: "matrix" or "index" (the observation form, see Observation Space).
        self.observation = observation
        self.action_space = spaces.Discrete(p.n_actions)
        self._context: np.ndarray | None = None
        self._expected: np.ndarray | None = None
        self._last: tuple[int, float] | None = None

    # -- dynamics -----------------------------------------------------------------------
    def _draw(self) -> np.ndarray:
        p = self.problem
        index = self.observation == "index"
        x, flat_index = p.draw_contexts(self.np_random, 1, matrix=not index)
        if index:  # the pair (j, k); no d1 x d2 matrix is built
            f = int(flat_index[0])
            self._expected = p.flat_params[:, f].copy()
            self._context = np.array(divmod(f, p.d2), dtype=np.int64)
            return self._context.copy()
        x = x[0]
        # Oracle rewards are computed at draw time, so an agent that edits the observation
        # in place cannot change the reward it will receive.
        if flat_index is None:
            self._expected = p.flat_params @ x.ravel()
        else:
            self._expected = p.flat_params[:, flat_index[0]].copy()
        self._context = x
        return x.reshape(-1) if self.flatten else x

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._last = None
        return self._draw(), {}

    def step(self, action):
        if self._context is None:
            raise RuntimeError("Call reset() before step().")
        p = self.problem
        arm = action.action if isinstance(action, Decision) else split_decision(action)[0]
        if type(arm) is not int or not 0 <= arm < p.n_actions:  # a Python int in range passes
            arm = check_action(arm, p.n_actions)
        expected = self._expected
        noise = p.noise_std[arm] * p.draw_noise(self.np_random, None)
        reward = float(expected[arm] + noise)
        best = int(np.argmax(expected))
        info = {
            "expected_rewards": expected,
            "optimal_action": best,
            "regret": float(expected[best] - expected[arm]),
        }
        self._last = (arm, reward)
        return self._draw(), reward, False, False, info

    def render(self):
        if self.render_mode != "ansi":
            return None
        if self._last is None:
            return "MatrixContextBandit: no step yet"
        arm, reward = self._last
        return f"MatrixContextBandit: last arm {arm}, reward {reward:+.4f}"
