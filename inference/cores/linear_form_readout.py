"""Read-outs of the debiased estimate: point estimates and intervals (Algorithm 3).

With ``n`` rounds absorbed, ``M^unbs_i = (1/n) Σ_t M̃_{i,t}`` (eq. (11)) and the running
sums of :mod:`inference.cores.linear_form_round`::

    m̂_i        = <M̂_i + P_T̂(M^unbs_i − M̂_i), T>                  one-step (method.md §4)
                 T̂ the tangent space of the rank-r matrices at the arm's current estimate
                 M̂_i; with point_estimate="projection" the paper's <M^proj_i, T>,
                 M^proj_i the rank-r SVD truncation of M^unbs_i        eq. (12), Algorithm 3
    σ̂²_i       = (1/n) Σ_t 1{a_t=i}/π_t(i)·res_t²               eq. (13)
    Ŝ²_i       = (1/n) Σ_t 1{a_t=i}/π_t(i)²·c²·<G_t, X_t>²       eq. (14)
    interval     m̂_i ± z·σ̂_i·Ŝ_i/√n                             eq. (15)
    difference   (m̂_a − m̂_b) ± z·√((σ̂²_a·Ŝ²_a + σ̂²_b·Ŝ²_b)/n)   Corollary 3.3

:func:`readout_reference` below is the interval in plain numpy, from the sums of
:func:`inference.cores.linear_form.debiased_sums_reference`.
"""

from __future__ import annotations

import warnings
from statistics import NormalDist

import numpy as np

from inference.cores.checks import check_arm, check_confidence_level, check_target_name
from inference.cores.context_check import ContextLawWarning
from inference.cores.tangent_space import basis_transform
from inference.cores.weight_share import warn_heavy_rounds
from inference.results import (
    IntervalEstimate,
    normal_interval,
    trials_phrase,
    warn_insufficient,
)
from inference.sequences import DEFAULT_TUNING_N, check_kind, kind_interval, sequence_phrase
from lrbandit_gym.context_law import CONDITION_LIMIT

#: Share of a target's norm along directions no context takes above which a read-out with
#: ``projection="none"`` warns: a bias of at most this share of ``‖M − M̂‖_F``.
UNIDENTIFIED_LIMIT = 1e-3

__all__ = ["LinearFormReadout", "readout_reference"]


def readout_reference(
    M_sum, sigma_sum, S2_sum, n, M_hat, T, rank, *, level=0.95, point_estimate="one-step"
):
    """Algorithm 3 in plain numpy: ``m̂``, its standard error and interval for ``<M_i, T>``.

    From one arm's sums of :func:`inference.cores.linear_form.debiased_sums_reference` (``Σ_t
    M̃`` (d1, d2), ``n σ̂²``, ``n Ŝ²`` for the target ``T``) after ``n`` rounds, and ``M̂``
    the arm's estimate before the last round (of rank ``r``).  Under another context law
    the standard error is the robust one instead of ``σ̂Ŝ/√n``.  Returns
    ``(m̂, se, low, high)``; :meth:`LinearFormReadout.interval` is the fast path.
    """
    M_unbs = M_sum / n  # eq. (11)
    if point_estimate == "projection":  # <M^proj, T>: the rank-r truncation, eq. (12)
        W, s, Zt = np.linalg.svd(M_unbs)
        point = (W[:, :rank] * s[:rank]) @ Zt[:rank]
    else:  # one-step: M̂ + P_T̂(M^unbs − M̂), P_T̂ the tangent space at M̂ (method.md §4)
        W, _, Zt = np.linalg.svd(M_hat)
        P_U, P_V, E = W[:, :rank] @ W[:, :rank].T, Zt[:rank].T @ Zt[:rank], M_unbs - M_hat
        point = M_hat + P_U @ E + E @ P_V - P_U @ E @ P_V
    m_hat = np.sum(point * T)
    se = np.sqrt(sigma_sum / n * S2_sum / n / n)  # σ̂·Ŝ/√n, eq. (15)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return m_hat, se, m_hat - z * se, m_hat + z * se


class LinearFormReadout:
    """The read-out half of :class:`~inference.cores.linear_form.LinearFormCore`: the matrices
    ``M^unbs``, ``M^proj`` and the one-step estimate, and the intervals built on them.

    Mixed into the core; results are cached in ``self._cache`` until the next round.
    """

    def _warn_no_rounds(self, what: str, stacklevel: int = 4) -> None:
        warn_insufficient(
            f"no rounds observed yet: at least 1 more round (with a pull of each arm "
            f"involved) is needed to estimate {what}; returning NaN",
            stacklevel=stacklevel,
        )

    def round_shares(self) -> np.ndarray:
        """Lindeberg's share of every arm: the largest ``1/π_t(a)`` over their sum since the
        first round, ``(K,)`` or ``(B, K)`` (:mod:`inference.cores.weight_share`).  A read-out
        whose arms have a share above :data:`~inference.cores.weight_share.SHARE_LIMIT` warns;
        NaN before the first round."""
        return self._out(self._weights.shares())

    def design_shares(self) -> np.ndarray:
        """Lindeberg's share of every arm's design terms: the largest
        ``(c·w_t·<G_t, X_t>)²`` over their sum ``n·Ŝ²``, ``(K, n_T)`` or ``(B, K, n_T)``.
        A few rounds hold the sum where the contexts are heavy-tailed along the directions
        the target reads (rare pixels, an ill-conditioned law, a rarely revealed entry) or
        where a few exploration rounds of large weight carry it (many arms).  It is a
        diagnostic (``lrbandit validate`` reports it): no warning, since shares above one
        half also occur where the intervals cover (docs/method.md §11)."""
        B, K, nT = self._S2_sum.shape
        return self._out(self._design.shares().reshape(B, K, nT))

    def _warn_heavy(self, what: str, arms: tuple[int, ...], k: int) -> None:
        """:func:`~inference.cores.weight_share.warn_heavy_rounds` for a read-out of ``arms``, and
        the context check's warning."""
        share = self._weights.shares()[:, list(arms)].max(axis=1)
        warn_heavy_rounds(
            share,
            self._n,
            what,
            self.batched,
            "log with more exploration (a higher softmax temperature, or epsilon-greedy).",
            stacklevel=4,
        )
        if self.check_contexts:
            self._check.warn(what, self.context_law.describe(), self.batched, stacklevel=5)
            if self.projection == "none":
                self._warn_unidentified(what, k)
            else:
                self._warn_ill_conditioned(what)

    def condition_numbers(self) -> np.ndarray:
        """The condition number of the law in use on its range, ``()`` or ``(B,)``: above
        :data:`~lrbandit_gym.context_law.CONDITION_LIMIT` a read-out warns."""
        w = self._whitener
        kappa = w.condition_numbers() if w.estimated else np.full(self._B, w.condition_number())
        return self._out(kappa)

    def unidentified_fractions(self) -> np.ndarray:
        """``‖vec T − Σ⁺Σ vec T‖ / ‖vec T‖`` of every target under the law in use, shape
        ``(n_T,)`` or ``(B, n_T)``: the share of each target along directions no context
        takes, where ``<M, T>`` is identified only through the low-rank model.  Above
        :data:`UNIDENTIFIED_LIMIT`, a read-out with ``projection="none"`` warns
        (:class:`~inference.cores.context_check.ContextLawWarning`)."""
        w = self._whitener
        if w.estimated and w.n == 0:
            return self._out(np.zeros((self._B, len(self._names))))
        part = w.range_part(self._T)
        part = part if w.estimated else np.broadcast_to(part, (self._B, *part.shape))
        rest = np.sqrt(((self._T - part) ** 2).sum(axis=(-1, -2)))
        return self._out(rest / np.sqrt((self._T**2).sum(axis=(-1, -2))))

    def law_flags(self) -> np.ndarray:
        """Where a parameter read-out warns about the context law
        (:class:`~inference.cores.context_check.ContextLawWarning`): bool, ``()`` or ``(B,)``.
        The contexts contradict the law; or, with a projection, its second moment is
        ill-conditioned (:data:`~lrbandit_gym.context_law.CONDITION_LIMIT`); or, with
        ``projection="none"``, some target is not identified (:meth:`unidentified_fractions`)."""
        flags = np.atleast_1d(self.context_flags()).copy()
        if self.projection == "none":
            flags |= (np.atleast_2d(self.unidentified_fractions()) > UNIDENTIFIED_LIMIT).any(-1)
        else:
            flags |= np.atleast_1d(self.condition_numbers()) > CONDITION_LIMIT
        return self._out(flags)

    def _warn_unidentified(self, what: str, k: int) -> None:
        frac = np.atleast_2d(self.unidentified_fractions())[:, k]
        bad = frac > UNIDENTIFIED_LIMIT
        if not bad.any():
            return
        i = int(np.argmax(frac))
        where = (
            f" in {int(bad.sum())} of {bad.size} trials (largest: trial {i})"
            if self.batched
            else ""
        )
        warnings.warn(
            ContextLawWarning(
                f"{what}: {frac[i]:.1%} of the target (in norm) lies along directions the "
                f"contexts never take under the law {self.context_law.describe()}{where}: "
                "the contexts do not identify <M, T> there and the interval may not cover. "
                "Read a target the contexts vary along (its part Σ⁺Σ T), or pass "
                "projection='tangent' to lean on the low-rank model (docs/method.md §12)."
            ),
            stacklevel=5,
        )

    def _warn_ill_conditioned(self, what: str) -> None:
        kappa = np.atleast_1d(self.condition_numbers())
        bad = kappa > CONDITION_LIMIT
        if not bad.any():
            return
        i = int(np.argmax(kappa))
        where = (
            f" in {int(bad.sum())} of {bad.size} trials (largest: trial {i})"
            if self.batched
            else ""
        )
        warnings.warn(
            ContextLawWarning(
                f"{what}: the contexts barely vary along some directions: the second moment "
                f"of the law {self.context_law.describe()} has condition number "
                f"{kappa[i]:.2g}{where}, above {CONDITION_LIMIT:.0e}. The low-rank estimate is "
                "poorly identified along those directions and the interval may not cover "
                "(real images): pass projection='none', the debiased estimate without the "
                "low-rank step, valid for targets the contexts identify (docs/method.md §12)."
            ),
            stacklevel=5,
        )

    def context_flags(self) -> np.ndarray:
        """Whether the contexts so far contradict the law in use
        (:mod:`inference.cores.context_check`): bool, ``()`` or ``(B,)``; every read-out of such
        a trial warns (:class:`~inference.cores.context_check.ContextLawWarning`)."""
        return self._out(self._check.flagged())

    def _debiased(self, arm: int) -> np.ndarray:
        """``M^unbs_arm = (1/n) Σ_t M̃_{arm,t}``, shape (B, d1, d2); needs ``n > 0``."""
        return self._sum.total(arm) / self._n

    def _matrix_readout(self, arm, what: str, compute) -> np.ndarray:
        """A copy of ``compute(arm)`` in the caller's layout; NaN, with a warning naming
        ``what`` (formatted with ``arm``), before the first round."""
        arm = check_arm(arm, self.n_actions)
        if self._n == 0:
            self._warn_no_rounds(what.format(arm=arm), stacklevel=5)  # the public caller's
            return self._out(np.full((self._B, self.d1, self.d2), np.nan))
        return self._out(compute(arm).copy())

    def debiased_mean(self, arm: int) -> np.ndarray:
        """``M^unbs_{arm,n} = (1/n) Σ_t M̃_{arm,t}`` (eq. (11), Algorithm 2).

        Returns
        -------
        ndarray of shape (d1, d2) or (B, d1, d2)
            NaN (with an :class:`InsufficientDataWarning`) before the first round.
        """
        return self._matrix_readout(arm, "M^unbs_{arm}", self._debiased)

    def _projected(self, arm: int) -> np.ndarray:
        key = ("projection", arm)
        if key not in self._cache:
            u, s, vt = np.linalg.svd(self._debiased(arm), full_matrices=False)
            r = self.rank
            self._cache[key] = np.matmul(u[..., :r] * s[..., None, :r], vt[..., :r, :])
        return self._cache[key]

    def projected(self, arm: int) -> np.ndarray:
        """``M^proj_{arm,n}``: the top-``r`` SVD truncation of ``M^unbs_{arm,n}`` (Alg. 3).

        Cached until the next update.

        Returns
        -------
        ndarray of shape (d1, d2) or (B, d1, d2)
            NaN (with an :class:`InsufficientDataWarning`) before the first round.
        """
        return self._matrix_readout(arm, "M^proj_{arm}", self._projected)

    def _one_step(self, arm: int) -> np.ndarray:
        key = ("one-step", arm)
        if key not in self._cache:
            # The reference: the arm's current estimate M̂ = U Vᵀ (the one held for the
            # last round absorbed), and orthonormal bases of its column and row spaces.
            U, V = self._sum.last_U[:, arm], self._sum.last_V[:, arm]
            Q_U = np.matmul(U, basis_transform(U))
            Q_V = np.matmul(V, basis_transform(V))
            M_ref = np.matmul(U, V.swapaxes(-1, -2))
            E = self._debiased(arm) - M_ref
            # P_T̂(E) = P_U E + E P_V − P_U E P_V = Q_U (Q_Uᵀ E) + (E Q_V − Q_U Q_Uᵀ E Q_V) Q_Vᵀ
            UtE = np.matmul(Q_U.swapaxes(-1, -2), E)
            EV = np.matmul(E, Q_V) - np.matmul(Q_U, np.matmul(UtE, Q_V))
            step = M_ref + np.matmul(Q_U, UtE) + np.matmul(EV, Q_V.swapaxes(-1, -2))
            # An estimate of rank below r spans no rank-r tangent space: there the
            # reference is M^proj itself, around which the one-step is M^proj.
            full = (np.abs(Q_U).sum(axis=-2) > 0).all(axis=-1)
            full &= (np.abs(Q_V).sum(axis=-2) > 0).all(axis=-1)
            if not full.all():
                step[~full] = self._projected(arm)[~full]
            self._cache[key] = step
        return self._cache[key]

    def one_step(self, arm: int) -> np.ndarray:
        """The one-step estimate ``M̂ + P_T̂(M^unbs − M̂)`` of ``M_arm`` (docs/method.md §4).

        ``M̂`` is the arm's current low-rank estimate and ``P_T̂`` the projection onto the
        tangent space of the rank-``r`` matrices at ``M̂``; where ``M̂`` has rank below
        ``r`` the reference is ``M^proj`` (and the one-step estimate is ``M^proj``).  Its
        error is the projected noise ``P_T̂(M^unbs − M)`` plus a remainder quadratic in
        ``M̂ − M``, where the SVD truncation's remainder is quadratic in the noise of
        ``M^unbs``.  Cached until the next update.

        Returns
        -------
        ndarray of shape (d1, d2) or (B, d1, d2)
            NaN (with an :class:`InsufficientDataWarning`) before the first round.
        """
        return self._matrix_readout(arm, "the one-step estimate of M_{arm}", self._one_step)

    def _point(self, arm: int) -> np.ndarray:
        """The matrix whose inner product with ``T`` is ``m̂`` (``point_estimate``)."""
        if self.projection == "none":  # M̂ + (M^unbs − M̂): the one-step without a projection
            return self._debiased(arm)
        return self._one_step(arm) if self.point_estimate == "one-step" else self._projected(arm)

    def _arm_estimate(
        self, arm: int, k: int, target: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``m̂`` (the one-step estimate, or eq. (12)'s ``<M^proj_arm, T>``), ``σ̂²`` and
        ``Ŝ²`` for one arm and target, shape (B,) each; NaN, with a warning, where they are
        unusable."""
        m_hat = np.einsum("bij,ij->b", self._point(arm), self._T[k])
        sigma2 = self._sigma_sum[:, arm] / self._n
        S2 = self._S2_sum[:, arm, k] / self._n
        if self.robust:  # σ̂²·S2 is then the robust variance (docs/method.md §11)
            with np.errstate(divide="ignore", invalid="ignore"):
                S2 = np.where(sigma2 > 0, self._V_sum[:, arm, k] / self._n / sigma2, 0.0)
        never = self._pulls[:, arm] == 0
        if never.any():
            warn_insufficient(
                f"arm {arm} has never been pulled{self._pull_kind}"
                f"{trials_phrase(never, self.batched)}: at least 1 more "
                f"{self._pull_noun} of arm {arm} is needed before <M_{arm}, T[{target!r}]> "
                f"and its variance can be estimated; returning NaN",
                stacklevel=4,
            )
        flat = ~never & ~(sigma2 * S2 > 0)
        if flat.any():
            warn_insufficient(
                f"the variance of <M_{arm}, T[{target!r}]> is not estimable yet"
                f"{trials_phrase(flat, self.batched)}: sigma_hat^2 * S_hat^2 = 0 (every "
                f"{self._pull_noun} of arm {arm} so far had a zero residual or a zero "
                f"<G_t, X_t>, e.g. while M_hat_{arm} = 0); at least 1 more "
                f"{self._pull_noun} of arm {arm} with a non-zero estimate M_hat_{arm} is "
                f"needed; returning NaN",
                stacklevel=4,
            )
        bad = never | flat
        return (
            np.where(bad, np.nan, m_hat),
            np.where(bad, np.nan, sigma2),
            np.where(bad, np.nan, S2),
        )

    _pull_kind = ""
    _pull_noun = "pull"

    @property
    def _settings_phrase(self) -> str:
        if self.projection == "none":
            return "the debiased mean <M^unbs, T>, no projection"
        return f"{self.point_estimate} point estimate, {self.projection} projection"

    _method_name = "online debiased low-rank estimate (Algorithms 2-3)"

    def _nan_interval(self, level: float, method: str) -> IntervalEstimate:
        nan = np.full(self._B, np.nan)
        return normal_interval(
            nan, nan, n_obs=0, confidence_level=level, method=method, batched=self.batched
        )

    def interval(
        self,
        arm: int,
        target: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``m = <M_arm, T>`` (eq. (15), Algorithm 3).

        ``m̂`` is the point estimate chosen at construction (``point_estimate``: the one-step
        estimate, or ``<M^proj_arm, T>``) and ``se = σ̂·Ŝ/√n``; the p-value is two-sided for
        ``H0: <M_arm, T> = 0``.

        Parameters
        ----------
        arm : int
            Arm index ``i`` in ``[0, K)``.
        target : str
            Name of ``T`` given at construction.
        confidence_level : float, default 0.95
        kind : {"fixed", "sequence"}, default "fixed"
            "fixed": the paper's interval ``m̂ ± z·se``, valid at a number of rounds fixed in
            advance.  "sequence": the asymptotic confidence sequence of
            :mod:`inference.sequences`, valid at every round at once (read it as often as
            you like and stop on any rule); its p-value is anytime-valid.
        tuning_n : int, default 1000
            Round at which the sequence is tightest (``kind="sequence"`` only); fix it
            before looking at the data.

        Returns
        -------
        IntervalEstimate
            NaN entries, with an :class:`InsufficientDataWarning`, before the first round,
            where the arm was never pulled, or where ``σ̂²·Ŝ² = 0``.
        """
        level = check_confidence_level(confidence_level)
        arm = check_arm(arm, self.n_actions)
        k = check_target_name(target, self._names)
        kind, tuning_n = check_kind(kind, tuning_n)
        what = f"<M_{arm}, T[{target!r}]>"
        method = f"{what}: {self._method_name}, {self._settings_phrase}"
        method += sequence_phrase(kind, tuning_n)
        if self._n == 0:
            self._warn_no_rounds(what)
            return self._nan_interval(level, method)
        n = self._n
        m_hat, sigma2, S2 = self._arm_estimate(arm, k, target)
        se = np.sqrt(sigma2) * np.sqrt(S2) / np.sqrt(n)  # σ̂·Ŝ/√n, eq. (15)
        self._warn_heavy(what, (arm,), k)
        return kind_interval(
            kind,
            tuning_n,
            estimate=m_hat,
            standard_error=se,
            n_obs=n,
            confidence_level=level,
            method=method,
            batched=self.batched,
        )

    def difference(
        self,
        arm_a: int,
        arm_b: int,
        target: str,
        confidence_level: float = 0.95,
        *,
        kind: str = "fixed",
        tuning_n: int = DEFAULT_TUNING_N,
    ) -> IntervalEstimate:
        """Confidence interval for ``<M_a - M_b, T>`` (Corollary 3.3).

        ``(m̂_a − m̂_b) ± z·√((σ̂²_a·Ŝ²_a + σ̂²_b·Ŝ²_b)/n)``: the two arms' main terms are
        uncorrelated, so their variances add.  The p-value is
        two-sided for ``H0: <M_a, T> = <M_b, T>``.

        Parameters
        ----------
        arm_a, arm_b : int
            Two different arms.
        target : str
        confidence_level : float, default 0.95
        kind : {"fixed", "sequence"}, default "fixed"
        tuning_n : int, default 1000
            As in :meth:`interval`.
        """
        level = check_confidence_level(confidence_level)
        a = check_arm(arm_a, self.n_actions, "arm_a")
        b = check_arm(arm_b, self.n_actions, "arm_b")
        if a == b:
            raise ValueError(f"arm_a and arm_b must differ, got both = {a}")
        k = check_target_name(target, self._names)
        kind, tuning_n = check_kind(kind, tuning_n)
        what = f"<M_{a} - M_{b}, T[{target!r}]>"
        method = f"{what}: {self._method_name}, {self._settings_phrase} (Corollary 3.3)"
        method += sequence_phrase(kind, tuning_n)
        if self._n == 0:
            self._warn_no_rounds(what)
            return self._nan_interval(level, method)
        n = self._n
        m_a, sigma2_a, S2_a = self._arm_estimate(a, k, target)
        m_b, sigma2_b, S2_b = self._arm_estimate(b, k, target)
        se = np.sqrt((sigma2_a * S2_a + sigma2_b * S2_b) / n)  # √((σ̂²_a·Ŝ²_a + σ̂²_b·Ŝ²_b)/n)
        self._warn_heavy(what, (a, b), k)
        return kind_interval(
            kind,
            tuning_n,
            estimate=m_a - m_b,
            standard_error=se,
            n_obs=n,
            confidence_level=level,
            method=method,
            batched=self.batched,
        )
