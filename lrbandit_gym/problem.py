"""A validated matrix-context bandit instance: sizes, laws and the low-rank truth.

The single environment and its vector twin both hold one :class:`BanditProblem`, so
argument checking and the oracle quantities exist once.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
from gymnasium import spaces

from lrbandit_gym.context_law import ContextLaw, IsotropicLaw
from lrbandit_gym.context_source import ContextSource
from lrbandit_gym.input_checks import MAX_MAGNITUDE, check_positive_int
from lrbandit_gym.truth import (
    draw_low_rank_truth,
    gaussian_expected_max,
    optimal_value,
    validate_params,
)

__all__ = [
    "CONTEXTS",
    "NOISES",
    "OBSERVATIONS",
    "BanditProblem",
    "GroundTruthMixin",
    "check_flatten",
    "check_truth_seed",
    "observation_space",
]

CONTEXTS = ("gaussian", "completion")
#: Unit-variance noise laws; ``noise_std`` scales them.  "uniform" and "rademacher" are
#: sub-Gaussian alternatives to "gaussian"; "student_t" (3 degrees of freedom) and "laplace"
#: are heavy(ier)-tailed, for robustness studies.
NOISES = ("gaussian", "uniform", "rademacher", "laplace", "student_t")
STUDENT_T_DF = 3.0
#: Forms of the observation: the context matrix, or (completion contexts only) its index.
OBSERVATIONS = ("matrix", "index")


class BanditProblem:
    """Sizes, context and noise laws, and the truth ``M_a`` of docs/method.md §1.

    Parameters are those of :class:`lrbandit_gym.MatrixContextBanditEnv`; every invalid one
    raises ``ValueError`` naming the argument and its value.
    """

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
        dtype=np.float64,
        context_std=1.0,
        context_corr=0.0,
        entry_probs=None,
        contexts=None,
    ):
        check_truth_seed(truth_seed)
        self.d1 = check_positive_int(d1, "d1")
        self.d2 = check_positive_int(d2, "d2")
        self.rank = check_positive_int(rank, "rank")
        if self.rank > min(self.d1, self.d2):
            raise ValueError(
                f"rank must be at most min(d1, d2) = {min(self.d1, self.d2)}; got {rank!r}"
            )
        self.n_actions = check_positive_int(n_actions, "n_actions")
        if self.n_actions < 2:
            raise ValueError(f"n_actions must be at least 2; got {n_actions!r}")
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}; got {context!r}")
        self.context = context
        self.source = ContextSource(
            self.d1, self.d2, context, context_std, context_corr, entry_probs, contexts
        )
        # The source draws only a law other than the paper's two; fixed for the problem.
        self._source_draw = self.source.draw if self.source.active else None
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}; got {noise!r}")
        self.noise = noise
        std = np.asarray(noise_std, dtype=float)
        if std.ndim == 0:
            std = np.full(self.n_actions, float(std))
        if std.shape != (self.n_actions,):
            raise ValueError(
                f"noise_std must be a scalar or one value per action ({self.n_actions}); "
                f"got {noise_std!r}"
            )
        if not np.all(np.isfinite(std)) or np.any(std < 0):
            raise ValueError(f"noise_std must be finite and non-negative; got {noise_std!r}")
        if np.any(std > MAX_MAGNITUDE):
            raise ValueError(
                f"noise_std must be at most MAX_MAGNITUDE = {MAX_MAGNITUDE:g} (the variance and "
                f"the rewards' squares must stay finite); got {noise_std!r}"
            )
        self.noise_std = std
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"dtype must be float32 or float64; got {dtype!r}")
        if params is None:
            self.params = draw_low_rank_truth(
                self.d1, self.d2, self.rank, self.n_actions, singular_values, truth_seed
            )
        else:
            if not (np.ndim(singular_values) == 0 and float(singular_values) == 1.0):
                raise ValueError(
                    "singular_values cannot be combined with params (the truth is given); "
                    f"got singular_values={singular_values!r}"
                )
            self.params = validate_params(params, self.n_actions, self.d1, self.d2, self.rank)
        # ‖M_a‖_F sets the scale of the rewards, of the Gram matrix <M_a, M_b> and of V*:
        # a truth whose norm squared overflows float64 gives an infinite V* and rewards no
        # estimator can absorb.
        with np.errstate(over="ignore", invalid="ignore"):
            norms = np.linalg.norm(self.params.reshape(self.n_actions, -1), axis=1)
        if not np.all(norms <= MAX_MAGNITUDE):
            arm = int(np.argmax(~(norms <= MAX_MAGNITUDE)))
            if params is None:
                which = f"singular_values={singular_values!r}"
            else:
                which = f"params with largest entry {float(np.abs(self.params).max()):.3g}"
            raise ValueError(
                f"the truth's Frobenius norm ‖M_{arm}‖_F = {norms[arm]:.3g} exceeds "
                f"MAX_MAGNITUDE = {MAX_MAGNITUDE:g}, so V* and the rewards' squares are not "
                f"finite in float64; got {which}: rescale to order 1"
            )
        self.params.setflags(write=False)
        self.truth_seed = truth_seed
        #: (K, d1·d2) view used for every oracle reward: one matrix-vector product.
        self.flat_params = self.params.reshape(self.n_actions, -1)
        #: ``c`` of Appendix C: ``E[<A, X> X] = A / c``.
        self.context_scale = float(self.d1 * self.d2) if context == "completion" else 1.0

    @property
    def context_law(self) -> ContextLaw | str:
        """The contexts' law (:mod:`lrbandit_gym.context_law`), as the inference wrappers
        take it by default; ``"estimated"`` for a data set too large to hold its second
        moment."""
        if not self.source.active:
            return IsotropicLaw(self.d1, self.d2, self.context)
        return self.source.law if self.source.law is not None else "estimated"

    def draw_contexts(self, rng: np.random.Generator, batch: int, matrix: bool = True):
        """Draw ``batch`` contexts of shape ``(batch, d1, d2)`` from ``rng``.

        Returns ``(X, flat_index)``: for completion contexts ``X[b] = e_j e_kᵀ`` and
        ``flat_index[b] = j·d2 + k`` (so oracle rewards need no pass over ``X``); ``None``
        for Gaussian contexts.  With ``matrix=False`` (completion only) ``X`` is None and
        only the index is drawn: the same draw from ``rng``, so both forms give the same
        contexts.  A law other than the paper's two is drawn by :attr:`source`.
        """
        if self._source_draw is not None:
            return self._source_draw(rng, batch, self.dtype, matrix)
        if self.context == "gaussian":
            return rng.standard_normal((batch, self.d1, self.d2), dtype=self.dtype), None
        d1, d2 = self.d1, self.d2
        flat_index = rng.integers(0, d1 * d2, size=batch)
        if not matrix:
            return None, flat_index
        x = np.zeros((batch, d1 * d2), dtype=self.dtype)
        x[np.arange(batch), flat_index] = 1
        return x.reshape(batch, d1, d2), flat_index

    def draw_noise(self, rng: np.random.Generator, size) -> np.ndarray:
        """Draw unit-variance, zero-mean noise of the problem's law (``size`` as numpy's;
        None: one float)."""
        kind = self.noise
        if kind == "gaussian":
            return rng.standard_normal(size)
        if kind == "uniform":
            return rng.uniform(-math.sqrt(3.0), math.sqrt(3.0), size)
        if kind == "rademacher":
            return rng.integers(0, 2, size=size) * 2.0 - 1.0
        if kind == "laplace":
            return rng.laplace(0.0, 1.0 / math.sqrt(2.0), size)
        return rng.standard_t(STUDENT_T_DF, size) / math.sqrt(STUDENT_T_DF / (STUDENT_T_DF - 2))

    @cached_property
    def arm_values(self) -> np.ndarray:
        """``E<M_a, X>`` of every arm, shape (K,): the value of always playing ``a``."""
        if self.source.active:
            mean = self.source.context_mean()
        elif self.context == "completion":
            mean = np.full((self.d1, self.d2), 1.0 / (self.d1 * self.d2))
        else:
            return np.zeros(self.n_actions)
        return self.flat_params @ mean.ravel()

    @cached_property
    def optimal_value(self) -> float:
        """``V* = E[max_a <M_a, X>]``, exact (docs/method.md §1)."""
        if self.source.active:
            return self.source.optimal_value(self.params, gaussian_expected_max)
        return float(optimal_value(self.params, self.context))

    def linear_form(self, target) -> np.ndarray:
        """``<M_a, T>`` for every arm, shape ``(K,)``."""
        t = np.asarray(target, dtype=float)
        if t.shape != (self.d1, self.d2):
            raise ValueError(f"target must have shape ({self.d1}, {self.d2}); got {t.shape}")
        if not np.all(np.isfinite(t)):
            raise ValueError("target must be finite; got NaN or inf entries")
        return self.flat_params @ t.ravel()

    def expected_rewards(self, contexts: np.ndarray, flat_index: np.ndarray | None) -> np.ndarray:
        """``<M_a, X_b>`` for a batch of contexts, shape ``(B, K)``."""
        if flat_index is not None:
            return self.flat_params[:, flat_index].T.copy()
        flat = contexts.reshape(contexts.shape[0], -1)
        # One GEMV per arm: OpenBLAS runs a GEMM with K (~2) columns several times slower.
        out = np.empty((flat.shape[0], self.n_actions))
        for a, row in enumerate(self.flat_params):
            np.matmul(flat, row, out=out[:, a])
        return out


class GroundTruthMixin:
    """Sizes and oracle quantities of ``self.problem``, shared by the single and vector env."""

    problem: BanditProblem

    d1 = property(lambda self: self.problem.d1)
    d2 = property(lambda self: self.problem.d2)
    rank = property(lambda self: self.problem.rank)
    n_actions = property(lambda self: self.problem.n_actions)
    context = property(lambda self: self.problem.context)
    noise_std = property(lambda self: self.problem.noise_std)
    context_scale = property(lambda self: self.problem.context_scale)
    context_law = property(lambda self: self.problem.context_law)

    @property
    def true_params(self) -> np.ndarray:
        """The truth ``M_a``, shape ``(K, d1, d2)`` (read-only)."""
        return self.problem.params

    @property
    def optimal_value(self) -> float:
        """Exact ``V* = E[max_a <M_a, X>]``."""
        return self.problem.optimal_value

    def linear_form(self, target) -> np.ndarray:
        """``<M_a, T>`` for every arm, shape ``(K,)``."""
        return self.problem.linear_form(target)


def observation_space(problem: BanditProblem, flatten: bool, observation: str) -> spaces.Space:
    """The observation space of one environment, after checking ``observation``.

    ``"matrix"``: ``Box(-inf, inf, (d1, d2))`` for Gaussian contexts, ``Box(0, 1, (d1, d2))``
    for completion contexts (``(d1·d2,)`` with ``flatten``).  ``"index"`` (completion
    contexts only): ``MultiDiscrete([d1, d2])``, the pair ``(j, k)`` of ``X = e_j e_kᵀ`` as
    int64, so that a round never builds the ``d1 x d2`` matrix.

    Raises
    ------
    ValueError
        For an unknown ``observation``, ``"index"`` with Gaussian contexts, or ``"index"``
        with ``flatten=True``.
    """
    if observation not in OBSERVATIONS:
        raise ValueError(f"observation must be one of {OBSERVATIONS}; got {observation!r}")
    p = problem
    if observation == "index":
        if p.context != "completion":
            raise ValueError(
                "observation='index' needs context='completion' (a Gaussian context has no "
                f"index); got context={p.context!r}"
            )
        if flatten:
            raise ValueError(
                "flatten=True applies to matrix observations; observation='index' is already "
                "flat (the pair (row, column))"
            )
        return spaces.MultiDiscrete([p.d1, p.d2], dtype=np.int64)
    shape = (p.d1 * p.d2,) if flatten else (p.d1, p.d2)
    if p.context == "gaussian":
        return spaces.Box(-np.inf, np.inf, shape, dtype=p.dtype)
    return spaces.Box(0.0, 1.0, shape, dtype=p.dtype)


def check_truth_seed(truth_seed) -> None:
    """Raise unless ``truth_seed`` is an integer >= 0, a ``SeedSequence`` or None, naming
    it (numpy's own error for ``-1``, "expected non-negative integer", names nothing)."""
    if truth_seed is None or isinstance(truth_seed, np.random.SeedSequence):
        return
    if isinstance(truth_seed, bool | np.bool_) or not isinstance(truth_seed, int | np.integer):
        raise ValueError(
            f"truth_seed must be an integer >= 0, a SeedSequence or None; got {truth_seed!r}"
        )
    if truth_seed < 0:
        raise ValueError(f"truth_seed must be an integer >= 0; got {truth_seed!r}")


def check_flatten(flatten) -> bool:
    """``flatten`` as a bool; anything but ``True``/``False`` is refused (``bool("no")`` is
    True: a string would flatten the observations it meant to keep as matrices)."""
    if not isinstance(flatten, bool | np.bool_):
        raise ValueError(f"flatten must be True or False; got {flatten!r}")
    return bool(flatten)
