"""``MatrixClassification-v0``: a bandit whose matrix contexts and rewards come from a data set.

A labelled data set of matrices becomes a contextual bandit by the standard multiclass-to-bandit
conversion (Dudík, Erhan, Langford and Li, 2014; Open Bandit Pipeline's
``MultiClassToBanditReduction`` does it for vectors): each round shows one sample's matrix,
the arms are the classes, and pulling arm ``a`` pays 1 when ``a`` is the sample's label and 0
otherwise (optionally plus Gaussian noise), or, with a reward table, the table's entry.  Only
the chosen arm's reward is revealed, as in any bandit; ``info`` holds the oracle.

:func:`digits_bandit` ships one real data set: scikit-learn's handwritten digits
(``load_digits``: 1797 images of 8 × 8 pixels, ten classes, so ten arms), split into the
images the bandit draws from and held-out images.  The low-rank model of the agents is then
only an approximation; the parameter intervals' ground truth is the best linear predictor
(:meth:`MatrixClassificationBandit.linear_parameters`, covered with ``projection="none"``),
and the value of a policy has one too: :meth:`MatrixClassificationBandit.policy_value`
gives its exact value under the bandit's own draws (``split="train"``) and its accuracy on
the held-out images (``split="test"``), itself an estimate of the value on new images from a
finite sample.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from lrbandit_gym.context_law import SecondMomentLaw
from lrbandit_gym.decision import split_decision
from lrbandit_gym.env import check_action
from lrbandit_gym.input_checks import (
    MAX_MAGNITUDE,
    check_choice,
    check_positive_float,
)
from lrbandit_gym.memory import check_memory

__all__ = [
    "ENV_ID",
    "SAMPLINGS",
    "SCALES",
    "MatrixClassificationBandit",
    "digits_arrays",
    "digits_bandit",
]

ENV_ID = "MatrixClassification-v0"

#: How a round picks its sample: ``"replacement"`` draws one uniformly, independently of the
#: past; ``"pass"`` walks through a fresh shuffle of all samples, then reshuffles.
SAMPLINGS = ("replacement", "pass")

#: How :func:`digits_arrays` scales the pixels (0 … 16): ``"unit"`` to [0, 1] (the default:
#: the agents' low-rank SGD learns well from it), ``"standardize"`` per pixel by the training
#: images' mean and standard deviation (a pixel constant on them is centred only; rarely lit
#: pixels then reach large values and the SGD learns poorly), ``"none"`` as loaded.
SCALES = ("unit", "standardize", "none")


def _contexts(value: Any, name: str) -> np.ndarray:
    x = np.asarray(value)
    if x.ndim != 3 or x.dtype.kind not in "iuf" or min(x.shape) < 1:
        raise ValueError(
            f"{name} must be a real array of matrices, shape (n, d1, d2) with every size >= 1; "
            f"got dtype {x.dtype}, shape {x.shape}"
        )
    x = np.array(x, dtype=np.float64)
    flat = x.reshape(len(x), -1)
    bad = ~(np.isfinite(flat) & (np.abs(flat) <= MAX_MAGNITUDE)).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"{name} must be finite, each entry at most {MAX_MAGNITUDE:g} in magnitude; "
            f"sample {i} is not"
        )
    return x


def _expected_rewards(
    labels: Any, rewards: Any, n: int, n_actions: int | None, prefix: str
) -> np.ndarray:
    """The ``(n, K)`` table of expected rewards from labels (one-hot) or a reward table."""
    if (labels is None) == (rewards is None):
        raise ValueError(
            f"give exactly one of {prefix}labels (one class per sample) and {prefix}rewards "
            f"(an (n, K) table); got {'both' if labels is not None else 'neither'}"
        )
    if labels is not None:
        y = np.asarray(labels)
        if y.shape != (n,) or y.dtype.kind not in "iu":
            raise ValueError(
                f"{prefix}labels must be integers of shape ({n},), one per sample; got dtype "
                f"{y.dtype}, shape {y.shape}"
            )
        if (y < 0).any():
            i = int(np.argmax(y < 0))
            raise ValueError(f"{prefix}labels must be >= 0; sample {i} has {int(y[i])}")
        if n_actions is None:
            i = int(np.argmax(y))
            check_memory(
                8 * n * (int(y[i]) + 1),
                f"{prefix}labels[{i}]",
                int(y[i]),
                "an expected-reward table with one arm per class up to it",
            )
        else:
            check_memory(8 * n * n_actions, "n_actions", n_actions, "an expected-reward table")
        K = int(y.max()) + 1 if n_actions is None else n_actions
        if (y >= K).any():
            i = int(np.argmax(y >= K))
            raise ValueError(
                f"{prefix}labels must be < n_actions={K}; sample {i} has label {int(y[i])}"
            )
        table = np.zeros((n, K))
        table[np.arange(n), y] = 1.0
        return table
    table = np.asarray(rewards)
    if table.ndim != 2 or table.shape[0] != n or table.dtype.kind not in "iuf":
        raise ValueError(
            f"{prefix}rewards must be a real table of shape ({n}, K), one row per sample; got "
            f"dtype {table.dtype}, shape {table.shape}"
        )
    table = np.array(table, dtype=np.float64)
    if n_actions is not None and table.shape[1] != n_actions:
        raise ValueError(
            f"{prefix}rewards has {table.shape[1]} columns; n_actions={n_actions} was given"
        )
    bad = ~(np.isfinite(table) & (np.abs(table) <= MAX_MAGNITUDE)).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{prefix}rewards must be finite; row {i} holds {table[i].tolist()}")
    return table


class MatrixClassificationBandit(gym.Env):
    """A contextual bandit whose contexts are a data set's matrices and whose rewards come
    from its labels or a reward table.

    ## Description
    Each round shows the matrix ``X_i`` of one sample ``i``; pulling arm ``a`` pays
    ``R[i, a] + σ ξ`` with ``R`` the one-hot labels (1 for the arm equal to the label, else 0)
    or the given reward table, ``σ = noise_std`` and ``ξ ~ N(0, 1)`` (no noise by default).
    This is the multiclass-to-bandit conversion of Open Bandit Pipeline's
    ``MultiClassToBanditReduction``, with matrices for vectors.  Rewards need not be low-rank
    in anything: the agents' low-rank model is an approximation here.

    ## Action Space
    ``Discrete(n_actions)``; ``step`` also takes a :class:`lrbandit_gym.Decision`.

    ## Observation Space
    ``Box(min, max, (d1, d2))``, the bounds of the samples' entries.

    ## Rewards, info
    ``info`` after every step: ``expected_rewards`` (``R[i]``, every arm's expected reward
    for the sample just shown), ``optimal_action`` (its argmax, ties to the lowest arm),
    ``regret`` (of the arm pulled) and ``sample`` (the index ``i``); oracle values, not for
    the agent.

    ## Sampling
    ``sampling="replacement"`` (default) draws ``i`` uniformly and independently each round,
    so the rounds are i.i.d. draws from the samples' empirical law and the value of a policy
    under it is exact (:meth:`policy_value` with ``split="train"``).  ``"pass"`` walks through
    a shuffle of all samples and reshuffles after the last: every sample once per pass, but
    the rounds of a pass are not independent.  Both are seeded by ``reset(seed=...)``.

    ## Held-out samples
    ``test_contexts`` with ``test_labels`` or ``test_rewards`` are never shown; they give
    :meth:`policy_value` with ``split="test"``, the value of a policy on unseen samples (the
    held-out accuracy, for labels).

    ## Arguments
    ``contexts`` ``(n, d1, d2)``, ``labels`` ``(n,)`` or ``rewards`` ``(n, K)``,
    ``n_actions`` (default: largest label + 1, or the table's columns), ``noise_std`` (0.0),
    ``sampling``, ``test_contexts``, ``test_labels``/``test_rewards``, ``render_mode``
    (None or "ansi").

    The agents and the inference wrappers read ``d1``, ``d2``, ``n_actions``, ``context``
    and ``context_law``; ``context`` is ``"gaussian"``, their name for dense contexts, as
    opposed to one-hot completion contexts.  ``context_law`` is the samples' exact second
    moment (a :class:`~lrbandit_gym.context_law.SecondMomentLaw`), the law of every round's
    context: the parameter intervals divide by it.

    ## Parameters the intervals estimate
    Rewards are not linear in the contexts, so ``<M_a, T>`` is read as the best linear
    predictor's: :meth:`linear_parameters` gives ``M*_a``, the least-squares fit of arm
    ``a``'s expected reward on the contexts under the bandit's draws.  The parameter
    intervals with ``projection="none"`` cover ``<M*_a, T>`` for every target the contexts
    identify (docs/method.md §12); the low-rank projections assume ``M*_a`` has rank ``r``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        contexts,
        labels=None,
        rewards=None,
        *,
        n_actions: int | None = None,
        noise_std: float = 0.0,
        sampling: str = "replacement",
        test_contexts=None,
        test_labels=None,
        test_rewards=None,
        render_mode: str | None = None,
    ):
        if n_actions is not None:
            if isinstance(n_actions, bool) or not isinstance(n_actions, int | np.integer):
                raise ValueError(f"n_actions must be an integer >= 2; got {n_actions!r}")
            if n_actions < 2:
                raise ValueError(f"n_actions must be an integer >= 2; got {n_actions!r}")
            n_actions = int(n_actions)
        x = _contexts(contexts, "contexts")
        table = _expected_rewards(labels, rewards, len(x), n_actions, "")
        K = table.shape[1]
        if K < 2:
            raise ValueError(f"a bandit needs at least 2 arms; the labels give n_actions={K}")
        self.noise_std = check_positive_float(noise_std, "noise_std", allow_zero=True)
        self.sampling = check_choice(sampling, "sampling", SAMPLINGS)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {self.metadata['render_modes']}; "
                f"got {render_mode!r}"
            )
        self.render_mode = render_mode
        self._x, self._table = x, table
        for arr in (x, table):
            arr.flags.writeable = False
        self.d1, self.d2 = int(x.shape[1]), int(x.shape[2])
        self.n_actions = K
        #: The agents' and wrappers' name for dense contexts (see the class docstring).
        self.context = "gaussian"
        self.n_samples = len(x)
        #: The law of the contexts the bandit shows: the samples' exact second moment.
        self.context_law = SecondMomentLaw.of_contexts(x)
        if test_contexts is None:
            if test_labels is not None or test_rewards is not None:
                raise ValueError("test_labels/test_rewards need test_contexts")
            self._test = None
        else:
            xt = _contexts(test_contexts, "test_contexts")
            if xt.shape[1:] != x.shape[1:]:
                raise ValueError(
                    f"test_contexts must be matrices of shape {x.shape[1:]} like contexts; got "
                    f"{xt.shape[1:]}"
                )
            tt = _expected_rewards(test_labels, test_rewards, len(xt), K, "test_")
            for arr in (xt, tt):
                arr.flags.writeable = False
            self._test = (xt, tt)
        low, high = float(x.min()), float(x.max())
        self.observation_space = spaces.Box(low, high, (self.d1, self.d2), np.float64)
        self.action_space = spaces.Discrete(K)
        self._index: int | None = None
        self._order: np.ndarray | None = None
        self._position = 0
        self._last: tuple[int, float] | None = None

    # -- data --------------------------------------------------------------------------
    @property
    def contexts(self) -> np.ndarray:
        """The samples the bandit draws from, ``(n, d1, d2)`` (read-only)."""
        return self._x

    @property
    def expected_rewards(self) -> np.ndarray:
        """Their expected rewards ``R``, ``(n, K)`` (read-only): one-hot labels or the table."""
        return self._table

    @property
    def current_sample(self) -> int | None:
        """Index of the sample the current observation shows (None before ``reset``)."""
        return self._index

    @property
    def test_contexts(self) -> np.ndarray | None:
        """The held-out samples, ``(m, d1, d2)`` (read-only), or None."""
        return None if self._test is None else self._test[0]

    @property
    def test_expected_rewards(self) -> np.ndarray | None:
        """Their expected rewards, ``(m, K)`` (read-only), or None."""
        return None if self._test is None else self._test[1]

    def linear_parameters(self) -> np.ndarray:
        """``M*_a`` of every arm, ``(K, d1, d2)``: the minimum-norm least-squares fit of the
        expected rewards on the contexts, ``vec M*_a = Σ⁺ (1/n) Σ_i vec X_i R[i, a]`` with
        ``Σ`` the samples' second moment (:attr:`context_law`).  The estimand of the
        parameter intervals; ``<M*_a, X>`` is the best linear prediction of arm ``a``'s reward
        under the bandit's draws (``sampling="replacement"``; a pass has the same law)."""
        flat = self._x.reshape(self.n_samples, -1)
        moment = flat.T @ self._table / self.n_samples  # (1/n) Σ_i vec X_i R[i, :]
        inverse = self.context_law.whiten(moment.T.reshape(-1, self.d1, self.d2))
        return inverse

    def _split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        split = check_choice(split, "split", ("train", "test"))
        if split == "train":
            return self._x, self._table
        if self._test is None:
            raise ValueError(
                'split="test" needs held-out samples: build the bandit with test_contexts and '
                "test_labels or test_rewards (digits_bandit does)"
            )
        return self._test

    def policy_value(
        self, policy: Callable[[np.ndarray], Any], split: str = "test", *, batched: bool = False
    ) -> float:
        """The value ``(1/m) Σ_i Σ_a π(a | X_i) R[i, a]`` of ``policy`` on a split's samples.

        ``split="train"``: the samples the bandit draws from, so with
        ``sampling="replacement"`` this is the policy's exact value under the bandit (a
        policy-value interval's estimand).  ``split="test"``: the held-out samples (for
        labels, the held-out accuracy), an estimate of the value on new samples whose
        standard error is about ``sqrt(v (1 − v)/m)`` for 0/1 rewards.

        Parameters
        ----------
        policy : callable
            From one context ``(d1, d2)`` to an action or a pmf ``(K,)``; with
            ``batched=True``, from all contexts ``(m, d1, d2)`` to actions ``(m,)`` or pmfs
            ``(m, K)`` in one call (fast).
        split : {"test", "train"}, default "test"
        batched : bool, default False

        Raises
        ------
        ValueError
            For an unknown split, a test split the bandit does not have, or a policy whose
            output is not an action in ``[0, K)`` or a pmf.
        """
        x, table = self._split(split)
        m, K = table.shape
        if batched:
            out = np.asarray(policy(x))
        else:
            out = [np.asarray(policy(xi)) for xi in x]
            shapes = {o.shape for o in out}
            if len(shapes) != 1:
                raise ValueError(
                    f"policy must return an action or a pmf of shape ({K},) for every context; "
                    f"got shapes {sorted(shapes)}"
                )
            out = np.stack(out)
        if out.shape == (m,):
            if out.dtype.kind not in "iu" or ((out < 0) | (out >= K)).any():
                raise ValueError(
                    f"policy actions must be integers in [0, {K}); got dtype {out.dtype}, "
                    f"values {np.unique(out)[:5].tolist()}"
                )
            return float(table[np.arange(m), out].mean())
        if out.shape == (m, K):
            pmf = out.astype(np.float64)
            if not np.isfinite(pmf).all() or (pmf < 0).any():
                raise ValueError("policy pmfs must be finite and non-negative")
            sums = pmf.sum(axis=1)
            if (np.abs(sums - 1.0) > 1e-6).any():
                i = int(np.argmax(np.abs(sums - 1.0) > 1e-6))
                raise ValueError(
                    f"policy pmfs must sum to 1; the pmf of sample {i} sums to {sums[i]!r}"
                )
            return float((pmf * table).sum(axis=1).mean())
        raise ValueError(
            f"policy must give actions ({m},) or pmfs ({m}, {K}) for the {m} samples; got shape "
            f"{out.shape}"
        )

    # -- dynamics --------------------------------------------------------------------------
    def _draw(self) -> np.ndarray:
        if self.sampling == "replacement":
            i = int(self.np_random.integers(self.n_samples))
        else:
            if self._order is None or self._position == self.n_samples:
                self._order = self.np_random.permutation(self.n_samples)
                self._position = 0
            i = int(self._order[self._position])
            self._position += 1
        self._index = i
        return self._x[i].copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._order, self._position, self._last = None, 0, None
        obs = self._draw()
        return obs, {"sample": self._index}

    def step(self, action):
        if self._index is None:
            raise RuntimeError("Call reset() before step().")
        arm, _ = split_decision(action)
        arm = check_action(arm, self.n_actions)
        expected = self._table[self._index].copy()
        reward = float(expected[arm])
        if self.noise_std > 0:
            reward += self.noise_std * float(self.np_random.standard_normal())
        best = int(np.argmax(expected))
        info = {
            "expected_rewards": expected,
            "optimal_action": best,
            "regret": float(expected[best] - expected[arm]),
            "sample": self._index,
        }
        self._last = (arm, reward)
        return self._draw(), reward, False, False, info

    def render(self):
        if self.render_mode != "ansi":
            return None
        if self._last is None:
            return "MatrixClassification: no step yet"
        arm, reward = self._last
        return f"MatrixClassification: last arm {arm}, reward {reward:+.4f}"


@functools.lru_cache(maxsize=1)
def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ImportError(
            "the digits data set needs scikit-learn: pip install -e '.[data]'"
        ) from err
    data = load_digits()
    images = np.asarray(data.images, dtype=np.float64)
    labels = np.asarray(data.target, dtype=np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def digits_arrays(
    *, test_size: float = 0.3, split_seed: int = 0, scale: str = "unit"
) -> dict[str, np.ndarray]:
    """scikit-learn's handwritten digits as keyword arguments of
    :class:`MatrixClassificationBandit`: ``contexts``, ``labels``, ``test_contexts``,
    ``test_labels``.

    The 1797 images (8 × 8, pixels 0 … 16, ten classes) are split at random by
    ``split_seed``: a share ``test_size`` is held out, the rest is what the bandit draws
    from; ``scale`` (:data:`SCALES`) is fitted on the training images only.

    Raises
    ------
    ValueError
        For a ``test_size`` outside (0, 1) that leaves either split empty, or an unknown
        ``scale``.
    ImportError
        Without scikit-learn (the ``data`` extra).
    """
    scale = check_choice(scale, "scale", SCALES)
    images, labels = _load_digits()
    n = len(labels)
    if isinstance(test_size, bool) or not isinstance(test_size, int | float | np.floating):
        raise ValueError(f"test_size must be a fraction in (0, 1); got {test_size!r}")
    n_test = int(round(float(test_size) * n))
    if not (0.0 < float(test_size) < 1.0) or not 0 < n_test < n:
        raise ValueError(
            f"test_size must be a fraction in (0, 1) leaving both splits non-empty; got "
            f"{test_size!r}"
        )
    order = np.random.default_rng(split_seed).permutation(n)
    test, train = order[:n_test], order[n_test:]
    x_train, x_test = images[train], images[test]
    if scale == "standardize":
        mean = x_train.mean(axis=0)
        std = x_train.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    elif scale == "unit":
        x_train, x_test = x_train / 16.0, x_test / 16.0
    return {
        "contexts": x_train,
        "labels": labels[train],
        "test_contexts": x_test,
        "test_labels": labels[test],
    }


def digits_bandit(
    *,
    test_size: float = 0.3,
    split_seed: int = 0,
    scale: str = "unit",
    noise_std: float = 0.0,
    sampling: str = "replacement",
    render_mode: str | None = None,
) -> MatrixClassificationBandit:
    """The handwritten-digits bandit: ten arms, 8 × 8 contexts, reward 1 for the image's
    digit and 0 otherwise, with a held-out split for :meth:`~MatrixClassificationBandit.
    policy_value` (``split="test"``: held-out accuracy).  Arguments as in
    :func:`digits_arrays` and :class:`MatrixClassificationBandit`.

    Equivalent to ``gym.make("MatrixClassification-v0", **digits_arrays(...))`` without
    Gymnasium's wrappers.

    >>> env = digits_bandit(split_seed=0)
    >>> env.n_actions, env.d1, env.d2, env.n_samples, len(env.test_contexts)
    (10, 8, 8, 1258, 539)
    """
    arrays = digits_arrays(test_size=test_size, split_seed=split_seed, scale=scale)
    return MatrixClassificationBandit(
        **arrays, noise_std=noise_std, sampling=sampling, render_mode=render_mode
    )
