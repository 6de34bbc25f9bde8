"""Read-outs of the debiased estimate: point estimates and intervals (Algorithm 3).

With ``n`` rounds absorbed, ``M^unbs_i = (1/n) Σ_t M̃_{i,t}`` (eq. (11)) and the running
sums of :mod:`inference.cores.linear_form_round`::

    m̂_i        = <M̂_i + P_T̂(M^unbs_i − M̂_i), T>                  one-step (method.md §4)
                 T̂ the tangent space of the rank-r matrices at the arm's current estimate
                 M̂_i; with point_estimate="projection" the paper's <M^proj_i, T>,
                 M^proj_i the rank-r SVD truncation of M^unbs_i        eq. (12), Algorithm 3
    σ̂²_i       = (1/n) Σ_t 1{a_t=i}/π_t(i)·res_t²               eq. (13)
    Ŝ²_i       = (1/n) Σ_t 1{a_t=i}/π_t(i)²·c²·<G_t, X_t>²       eq. (14)
    τ²_i        the one-step remainder's variance (inference.cores.remainder)
    interval     m̂_i ± z·(σ̂²_i·Ŝ²_i/n + τ²_i)^½                  eq. (15) with τ²
    difference   (m̂_a − m̂_b) ± z·√(σ̂²_a·Ŝ²_a/n + σ̂²_b·Ŝ²_b/n + τ²_a + τ²_b)   Corollary 3.3

:func:`readout_reference` below is the interval in plain numpy, from the sums of
:func:`inference.cores.linear_form.debiased_sums_reference`.  The read-outs after it are
functions of a :class:`~inference.cores.linear_form.LinearFormCore`'s public fields and its
:class:`~inference.cores.linear_form_state.LinearFormState`, bound by the core as its methods;
the matrices are cached in the state until the next round.
"""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist

import numpy as np

from inference.cores.checks import check_arm, check_confidence_level, check_target_name
from inference.cores.context_check import ContextLawWarning
from inference.cores.remainder import (
    remainder_geometry,
    remainder_variance,
    remainder_variance_reference,
)
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

__all__ = [
    "condition_numbers",
    "context_flags",
    "debiased_mean",
    "design_shares",
    "difference",
    "interval",
    "law_flags",
    "one_step",
    "projected",
    "readout_reference",
    "remainders",
    "round_shares",
    "standard_errors",
    "unidentified_fractions",
]


def readout_reference(
    M_sum,
    sigma_sum,
    S2_sum,
    n,
    M_hat,
    T,
    rank,
    *,
    level=0.95,
    point_estimate="one-step",
    information=None,
    mean_scale=1.0,
):
    """Algorithm 3 in plain numpy: ``m̂``, its standard error and interval for ``<M_i, T>``.

    From one arm's sums of :func:`inference.cores.linear_form.debiased_sums_reference` (``Σ_t
    M̃`` (d1, d2), ``n σ̂²``, ``n Ŝ²`` for the target ``T``) after ``n`` rounds, and ``M̂``
    the arm's estimate before the last round (of rank ``r``).  With ``information`` (the
    arm's pulls ``N_i`` the estimate rests on) the one-step standard error carries the
    remainder's variance ``τ²`` (:func:`~inference.cores.remainder.remainder_variance_reference`,
    ``mean_scale`` the law's ``c̄``).  Under another context law the standard error is the
    robust one instead of ``σ̂Ŝ/√n``.  Returns ``(m̂, se, low, high)``; :func:`interval` is
    the fast path.
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
    if information is not None and point_estimate == "one-step":
        tau2 = remainder_variance_reference(M_hat, T, rank, sigma_sum / n, mean_scale, information)
        se = np.hypot(se, np.sqrt(tau2))
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return m_hat, se, m_hat - z * se, m_hat + z * se


def _layout(core, arr: np.ndarray) -> np.ndarray:
    """``arr`` in the caller's layout: without the trial axis when unbatched."""
    return arr if core.batched else arr[0]


def _warn_no_rounds(what: str, stacklevel: int = 4) -> None:
    warn_insufficient(
        f"no rounds observed yet: at least 1 more round (with a pull of each arm "
        f"involved) is needed to estimate {what}; returning NaN",
        stacklevel=stacklevel,
    )


def round_shares(core) -> np.ndarray:
    """Lindeberg's share of every arm: the largest ``1/π_t(a)`` over their sum since the
    first round, ``(K,)`` or ``(B, K)`` (:mod:`inference.cores.weight_share`).  A read-out
    whose arms have a share above :data:`~inference.cores.weight_share.SHARE_LIMIT` warns;
    NaN before the first round."""
    return _layout(core, core.state.weights.shares())


def design_shares(core) -> np.ndarray:
    """Lindeberg's share of every arm's eq. (14) design terms: the largest
    ``(c·w_t·<G_t, X_t>)²`` of a pulled round over their sum, ``(K, n_T)`` or
    ``(B, K, n_T)`` (whatever ``design_variance`` the standard errors use).
    A few rounds hold the sum where the contexts are heavy-tailed along the directions
    the target reads (rare pixels, an ill-conditioned law, a rarely revealed entry) or
    where a few exploration rounds of large weight carry it (many arms).  It is a
    diagnostic (``lrbandit validate`` reports it): no warning, since shares above one
    half also occur where the intervals cover (docs/method.md §11)."""
    B, K, nT = core.state.S2_sum.shape
    return _layout(core, core.state.design.shares().reshape(B, K, nT))


def _warn_heavy(core, what: str, arms: tuple[int, ...], k: int) -> None:
    """:func:`~inference.cores.weight_share.warn_heavy_rounds` for a read-out of ``arms``, and
    the context check's warning."""
    share = core.state.weights.shares()[:, list(arms)].max(axis=1)
    warn_heavy_rounds(
        share,
        core.n_obs,
        what,
        core.batched,
        "log with more exploration (a higher softmax temperature, or epsilon-greedy).",
        stacklevel=4,
    )
    if core.check_contexts:
        core.state.check.warn(what, core.context_law.describe(), core.batched, stacklevel=5)
        if core.projection == "none":
            _warn_unidentified(core, what, k)
        else:
            _warn_ill_conditioned(core, what)


def condition_numbers(core) -> np.ndarray:
    """The condition number of the law in use on its range, ``()`` or ``(B,)``: above
    :data:`~lrbandit_gym.context_law.CONDITION_LIMIT` a read-out warns."""
    w, B = core.state.whitener, core.state.B
    kappa = w.condition_numbers() if w.estimated else np.full(B, w.condition_number())
    return _layout(core, kappa)


def unidentified_fractions(core) -> np.ndarray:
    """``‖vec T − Σ⁺Σ vec T‖ / ‖vec T‖`` of every target under the law in use, shape
    ``(n_T,)`` or ``(B, n_T)``: the share of each target along directions no context
    takes, where ``<M, T>`` is identified only through the low-rank model.  Above
    :data:`UNIDENTIFIED_LIMIT`, a read-out with ``projection="none"`` warns
    (:class:`~inference.cores.context_check.ContextLawWarning`)."""
    s = core.state
    w = s.whitener
    if w.estimated and w.n == 0:
        return _layout(core, np.zeros((s.B, len(s.names))))
    part = w.range_part(s.T)
    part = part if w.estimated else np.broadcast_to(part, (s.B, *part.shape))
    rest = np.sqrt(((s.T - part) ** 2).sum(axis=(-1, -2)))
    return _layout(core, rest / np.sqrt((s.T**2).sum(axis=(-1, -2))))


def law_flags(core) -> np.ndarray:
    """Where a parameter read-out warns about the context law
    (:class:`~inference.cores.context_check.ContextLawWarning`): bool, ``()`` or ``(B,)``.
    The contexts contradict the law; or, with a projection, its second moment is
    ill-conditioned (:data:`~lrbandit_gym.context_law.CONDITION_LIMIT`); or, with
    ``projection="none"``, some target is not identified (:meth:`unidentified_fractions`)."""
    flags = np.atleast_1d(context_flags(core)).copy()
    if core.projection == "none":
        flags |= (np.atleast_2d(unidentified_fractions(core)) > UNIDENTIFIED_LIMIT).any(-1)
    else:
        flags |= np.atleast_1d(condition_numbers(core)) > CONDITION_LIMIT
    return _layout(core, flags)


def _warn_unidentified(core, what: str, k: int) -> None:
    frac = np.atleast_2d(unidentified_fractions(core))[:, k]
    bad = frac > UNIDENTIFIED_LIMIT
    if not bad.any():
        return
    i = int(np.argmax(frac))
    where = trials_phrase(bad, core.batched, i)
    warnings.warn(
        ContextLawWarning(
            f"{what}: {frac[i]:.1%} of the target (in norm) lies along directions the "
            f"contexts never take under the law {core.context_law.describe()}{where}: "
            "the contexts do not identify <M, T> there and the interval may not cover. "
            "Read a target the contexts vary along (its part Σ⁺Σ T), or pass "
            "projection='tangent' to lean on the low-rank model (docs/method.md §12)."
        ),
        stacklevel=5,
    )


def _warn_ill_conditioned(core, what: str) -> None:
    kappa = np.atleast_1d(condition_numbers(core))
    bad = kappa > CONDITION_LIMIT
    if not bad.any():
        return
    i = int(np.argmax(kappa))
    where = trials_phrase(bad, core.batched, i)
    warnings.warn(
        ContextLawWarning(
            f"{what}: the contexts barely vary along some directions: the second moment "
            f"of the law {core.context_law.describe()} has condition number "
            f"{kappa[i]:.2g}{where}, above {CONDITION_LIMIT:.0e}. The low-rank estimate is "
            "poorly identified along those directions and the interval may not cover "
            "(real images): pass projection='none', the debiased estimate without the "
            "low-rank step, valid for targets the contexts identify (docs/method.md §12)."
        ),
        stacklevel=5,
    )


def context_flags(core) -> np.ndarray:
    """Whether the contexts so far contradict the law in use
    (:mod:`inference.cores.context_check`): bool, ``()`` or ``(B,)``; every read-out of such
    a trial warns (:class:`~inference.cores.context_check.ContextLawWarning`)."""
    return _layout(core, core.state.check.flagged())


def _debiased(core, arm: int) -> np.ndarray:
    """``M^unbs_arm = (1/n) Σ_t M̃_{arm,t}``, shape (B, d1, d2); needs ``n > 0``."""
    return core.state.sum.total(arm) / core.n_obs


def _matrix_readout(core, arm, what: str, compute) -> np.ndarray:
    """A copy of ``compute(arm)`` in the caller's layout; NaN, with a warning naming
    ``what`` (formatted with ``arm``), before the first round."""
    arm = check_arm(arm, core.n_actions)
    if core.n_obs == 0:
        _warn_no_rounds(what.format(arm=arm), stacklevel=5)  # the public caller's
        return _layout(core, np.full((core.state.B, core.d1, core.d2), np.nan))
    return _layout(core, compute(core, arm).copy())


def debiased_mean(core, arm: int) -> np.ndarray:
    """``M^unbs_{arm,n} = (1/n) Σ_t M̃_{arm,t}`` (eq. (11), Algorithm 2).

    Returns
    -------
    ndarray of shape (d1, d2) or (B, d1, d2)
        NaN (with an :class:`InsufficientDataWarning`) before the first round.
    """
    return _matrix_readout(core, arm, "M^unbs_{arm}", _debiased)


def _projected(core, arm: int) -> np.ndarray:
    cache, key = core.state.cache, ("projection", arm)
    if key not in cache:
        u, s, vt = np.linalg.svd(_debiased(core, arm), full_matrices=False)
        r = core.rank
        cache[key] = np.matmul(u[..., :r] * s[..., None, :r], vt[..., :r, :])
    return cache[key]


def projected(core, arm: int) -> np.ndarray:
    """``M^proj_{arm,n}``: the top-``r`` SVD truncation of ``M^unbs_{arm,n}`` (Alg. 3).

    Cached until the next update.

    Returns
    -------
    ndarray of shape (d1, d2) or (B, d1, d2)
        NaN (with an :class:`InsufficientDataWarning`) before the first round.
    """
    return _matrix_readout(core, arm, "M^proj_{arm}", _projected)


def _transforms(core, arm: int) -> tuple[np.ndarray, np.ndarray]:
    """``basis_transform`` of the arm's current factors ``U`` and ``V`` (the ones held for
    the last round absorbed), which the one-step estimate and its remainder both read.
    Cached until the next round."""
    cache, key = core.state.cache, ("transforms", arm)
    if key not in cache:
        U, V = core.state.sum.last_U[:, arm], core.state.sum.last_V[:, arm]
        cache[key] = (basis_transform(U), basis_transform(V))
    return cache[key]


def _one_step(core, arm: int) -> np.ndarray:
    cache, key = core.state.cache, ("one-step", arm)
    if key not in cache:
        # The reference: the arm's current estimate M̂ = U Vᵀ (the one held for the
        # last round absorbed), and orthonormal bases of its column and row spaces.
        U, V = core.state.sum.last_U[:, arm], core.state.sum.last_V[:, arm]
        S_U, S_V = _transforms(core, arm)
        Q_U = np.matmul(U, S_U)
        Q_V = np.matmul(V, S_V)
        M_ref = np.matmul(U, V.swapaxes(-1, -2))
        E = _debiased(core, arm) - M_ref
        # P_T̂(E) = P_U E + E P_V − P_U E P_V = Q_U (Q_Uᵀ E) + (E Q_V − Q_U Q_Uᵀ E Q_V) Q_Vᵀ
        UtE = np.matmul(Q_U.swapaxes(-1, -2), E)
        EV = np.matmul(E, Q_V) - np.matmul(Q_U, np.matmul(UtE, Q_V))
        step = M_ref + np.matmul(Q_U, UtE) + np.matmul(EV, Q_V.swapaxes(-1, -2))
        # An estimate of rank below r spans no rank-r tangent space: there the
        # reference is M^proj itself, around which the one-step is M^proj.
        full = (np.abs(Q_U).sum(axis=-2) > 0).all(axis=-1)
        full &= (np.abs(Q_V).sum(axis=-2) > 0).all(axis=-1)
        if not full.all():
            step[~full] = _projected(core, arm)[~full]
        cache[key] = step
    return cache[key]


def one_step(core, arm: int) -> np.ndarray:
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
    return _matrix_readout(core, arm, "the one-step estimate of M_{arm}", _one_step)


def _point(core, arm: int) -> np.ndarray:
    """The matrix whose inner product with ``T`` is ``m̂`` (``point_estimate``)."""
    if core.projection == "none":  # M̂ + (M^unbs − M̂): the one-step without a projection
        return _debiased(core, arm)
    if core.point_estimate == "one-step":
        return _one_step(core, arm)
    return _projected(core, arm)


def _remainders(core, arm: int) -> np.ndarray:
    """``τ²`` of every target for ``arm``, (B, n_T): the one-step read-out's remainder
    variance (:mod:`inference.cores.remainder`); 0 for the read-outs without that
    remainder (``projection="none"``, ``point_estimate="projection"``).  Needs ``n > 0``.
    Cached until the next round."""
    s = core.state
    if core.projection == "none" or core.point_estimate != "one-step":
        return np.zeros((s.B, len(s.names)))
    cache, key = s.cache, ("remainder", arm)
    if key not in cache:
        U, V = s.sum.last_U[:, arm], s.sum.last_V[:, arm]
        geometry = remainder_geometry(U, V, s.T, _transforms(core, arm))
        scale = core.c if core.c is not None else s.whitener.mean_scale()
        sigma2 = s.sigma_sum[:, arm] / core.n_obs
        information = (s.unweighted_pulls[:, arm] + s.pulls[:, arm]).astype(float)
        cache[key] = remainder_variance(geometry, sigma2, scale, information)
    return cache[key]


def _every_remainder(core) -> np.ndarray:
    """``τ²`` of every arm and target, (B, K, n_T); needs ``n > 0``."""
    return np.stack([_remainders(core, a) for a in range(core.n_actions)], axis=1)


def remainders(core) -> np.ndarray:
    """The one-step read-out's remainder variance ``τ²`` of every arm and target, ``(K,
    n_T)`` or ``(B, K, n_T)`` (:mod:`inference.cores.remainder`): the part of each squared
    standard error beyond ``σ̂²Ŝ²/n``; 0 for the read-outs without that remainder, NaN
    before any data."""
    s = core.state
    if not core.n_obs:
        return _layout(core, s.S2_sum * np.nan)
    return _layout(core, _every_remainder(core))


def standard_errors(core, remainder: bool = True) -> np.ndarray:
    """The standard error of every arm and target, ``(K, n_T)`` or ``(B, K, n_T)``:
    ``σ̂·Ŝ/√n`` (eq. (15)), or the robust one, with the one-step remainder's variance
    ``τ²`` (:mod:`inference.cores.remainder`); NaN before any data.

    ``remainder=False`` leaves ``τ²`` out: the running value of the wrappers' ``info``,
    which reads no target against the arms' current estimates (``τ²`` does, each time an
    estimate moves)."""
    n, s = core.n_obs, core.state
    if not n:
        return _layout(core, s.S2_sum * np.nan)
    if s.B == 1 and not core.robust:  # one trial: Python floats, the same operations
        rows = []
        for sigma, S2_row in zip(s.sigma_sum[0].tolist(), s.S2_sum[0].tolist(), strict=True):
            rows.append([math.sqrt(sigma / n * S2 / n / n) for S2 in S2_row])
        se = np.array([rows])
    else:
        var = s.V_sum / n if core.robust else (s.sigma_sum / n)[..., None] * s.S2_sum / n
        se = np.sqrt(var / n)
    if not remainder:
        return _layout(core, se)
    return _layout(core, np.hypot(se, np.sqrt(_every_remainder(core))))  # (σ̂²Ŝ²/n + τ²)^½


def _arm_estimate(
    core, arm: int, k: int, target: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``m̂`` (the one-step estimate, or eq. (12)'s ``<M^proj_arm, T>``), ``σ̂²``,
    ``Ŝ²`` and the remainder's ``τ²`` for one arm and target, shape (B,) each; NaN, with a
    warning, where they are unusable."""
    s, n = core.state, core.n_obs
    m_hat = np.einsum("bij,ij->b", _point(core, arm), s.T[k])
    sigma2 = s.sigma_sum[:, arm] / n
    S2 = s.S2_sum[:, arm, k] / n
    if core.robust:  # σ̂²·S2 is then the robust variance (docs/method.md §11)
        with np.errstate(divide="ignore", invalid="ignore"):
            S2 = np.where(sigma2 > 0, s.V_sum[:, arm, k] / n / sigma2, 0.0)
    never = s.pulls[:, arm] == 0
    if never.any():
        warn_insufficient(
            f"arm {arm} has never been pulled{core.pull_kind}"
            f"{trials_phrase(never, core.batched)}: at least 1 more "
            f"{core.pull_noun} of arm {arm} is needed before <M_{arm}, T[{target!r}]> "
            f"and its variance can be estimated; returning NaN",
            stacklevel=4,
        )
    flat = ~never & ~(sigma2 * S2 > 0)
    if flat.any():
        warn_insufficient(
            f"the variance of <M_{arm}, T[{target!r}]> is not estimable yet"
            f"{trials_phrase(flat, core.batched)}: sigma_hat^2 * S_hat^2 = 0 (every "
            f"{core.pull_noun} of arm {arm} so far had a zero residual or a zero "
            f"<G_t, X_t>, e.g. while M_hat_{arm} = 0); at least 1 more "
            f"{core.pull_noun} of arm {arm} with a non-zero estimate M_hat_{arm} is "
            f"needed; returning NaN",
            stacklevel=4,
        )
    bad = never | flat
    return (
        np.where(bad, np.nan, m_hat),
        np.where(bad, np.nan, sigma2),
        np.where(bad, np.nan, S2),
        np.where(bad, np.nan, _remainders(core, arm)[:, k]),
    )


def _method(core, what: str) -> str:
    """The interval's method: ``what``, the estimator and its settings."""
    if core.projection == "none":
        settings = "the debiased mean <M^unbs, T>, no projection"
    else:
        settings = f"{core.point_estimate} point estimate, {core.projection} projection"
    return f"{what}: {core.method_name}, {settings}"


def _nan_interval(core, level: float, method: str) -> IntervalEstimate:
    nan = np.full(core.state.B, np.nan)
    return normal_interval(
        nan, nan, n_obs=0, confidence_level=level, method=method, batched=core.batched
    )


def interval(
    core,
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
    arm = check_arm(arm, core.n_actions)
    k = check_target_name(target, core.target_names)
    kind, tuning_n = check_kind(kind, tuning_n)
    what = f"<M_{arm}, T[{target!r}]>"
    method = _method(core, what) + sequence_phrase(kind, tuning_n)
    if core.n_obs == 0:
        _warn_no_rounds(what)
        return _nan_interval(core, level, method)
    n = core.n_obs
    m_hat, sigma2, S2, tau2 = _arm_estimate(core, arm, k, target)
    # σ̂·Ŝ/√n (eq. (15)) with the remainder's variance: (σ̂²Ŝ²/n + τ²)^½
    se = np.hypot(np.sqrt(sigma2) * np.sqrt(S2) / np.sqrt(n), np.sqrt(tau2))
    _warn_heavy(core, what, (arm,), k)
    return kind_interval(
        kind,
        tuning_n,
        estimate=m_hat,
        standard_error=se,
        n_obs=n,
        confidence_level=level,
        method=method,
        batched=core.batched,
    )


def difference(
    core,
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
    a = check_arm(arm_a, core.n_actions, "arm_a")
    b = check_arm(arm_b, core.n_actions, "arm_b")
    if a == b:
        raise ValueError(f"arm_a and arm_b must differ, got both = {a}")
    k = check_target_name(target, core.target_names)
    kind, tuning_n = check_kind(kind, tuning_n)
    what = f"<M_{a} - M_{b}, T[{target!r}]>"
    method = _method(core, what) + " (Corollary 3.3)" + sequence_phrase(kind, tuning_n)
    if core.n_obs == 0:
        _warn_no_rounds(what)
        return _nan_interval(core, level, method)
    n = core.n_obs
    m_a, sigma2_a, S2_a, tau2_a = _arm_estimate(core, a, k, target)
    m_b, sigma2_b, S2_b, tau2_b = _arm_estimate(core, b, k, target)
    se = np.sqrt((sigma2_a * S2_a + sigma2_b * S2_b) / n)  # √((σ̂²_a·Ŝ²_a + σ̂²_b·Ŝ²_b)/n)
    se = np.hypot(se, np.sqrt(tau2_a + tau2_b))  # with both remainders' variances
    _warn_heavy(core, what, (a, b), k)
    return kind_interval(
        kind,
        tuning_n,
        estimate=m_a - m_b,
        standard_error=se,
        n_obs=n,
        confidence_level=level,
        method=method,
        batched=core.batched,
    )
