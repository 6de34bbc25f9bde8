"""Does Algorithm 1's step need the contexts' law?  The plain step against a preconditioned one.

    nice -n 10 python tools/precondition_study.py                # the table of method.md §11
    nice -n 10 python tools/precondition_study.py --start truth  # from the truth, perturbed

The plain step is eq. (8) as :class:`agents.LowRankSGD` takes it, with the gradient
``res · X_t``; the preconditioned step whitens the gradient's context by the law,
``res · Σ⁻¹ vec X_t`` (``ContextLaw.whiten``) in the factor update, while the residual
still reads ``X_t``.  Both use the library's default scale-free step size (with the cap
after a warm start); the preconditioned step is also run with the whole step multiplied
by 0.25 and by 4, and with a regularised preconditioner ``(Σ + λ I)⁻¹``, ``λ`` a fraction
``--ridge`` (default 0.01) of the mean eigenvalue ``tr Σ / (d1 d2)``.  The round is
:func:`agents.estimator.sgd_step_reference` vectorised over seeds, with that one change
(the script checks the plain step against it first).

Settings (``MatrixContextBandit-v0``'s problems, rank-2 truth from ``truth_seed=0``, two
arms, noise s.d. 0.1): i.i.d. N(0, 1) contexts at 10 × 10 (the control: ``Σ = I``, the two
steps coincide), AR(1) correlation 0.9 between rows and between columns at 10 × 10
(``context_corr=0.9``, the env's Kronecker law) and scikit-learn's digits (8 × 8,
standardised as the validation grid's ``contexts="digits"``, the data set's exact second
moment).  Every round is logged by a uniform policy (``π = 1/2``), so only the step
differs.  Per seed, the contexts, actions and rewards are the same for every step.

The start (``--start``): ``fit`` (default), the library's warm-start fit
(``agents.warm_start.initial_estimate``) on ``n0`` uniform rounds
(``default_warm_start_rounds``), the step then capped as after a warm start of ``n0``
rounds; ``truth``, the top-r SVD of the truth plus a fixed Gaussian perturbation of
Frobenius norm 0.1 (the noise level) per arm, without the cap.  ``--n0`` sets the warm
start's length.

Prints a Markdown table: ``‖M̂_a − M_a‖_F`` averaged over the arms and the seeds at
``n`` online rounds, its standard error over seeds at the last ``n``, the log-log slopes
over all the checkpoints and over those from 1000 on (Theorem 2.1's rate is
``n^{−(α−β)/2} = n^{−0.495}`` up to logs), and at the last ``n`` the part of the error along
the weak directions of ``Σ`` (eigenvalues below 1% of the mean) and the root mean square
prediction error ``√E<M̂_a − M_a, X>²`` (the ``Σ``-norm of the error).  A seed whose
estimate diverges (non-finite, or 100 times the truth's norm) is counted and left out.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import lrbandit_gym  # noqa: F401
from agents.estimator import sgd_step_reference
from agents.estimator.step_size import DEFAULT_STEP_GAIN, NUCLEAR_NORM_FLOOR
from agents.warm_start.fit import initial_estimate
from agents.warm_start.rules import default_warm_start_rounds
from lrbandit_gym.context_law import IsotropicLaw, KroneckerLaw
from lrbandit_gym.experiments.validate.setting import named_contexts

CHECKPOINTS = (250, 500, 1000, 2000, 4000)
NOISE = 0.1
RANK = 2
K = 2
#: Estimates whose Frobenius norm exceeds this multiple of the truth's count as diverged.
DIVERGED = 100.0
#: Ridge of the regularised preconditioner ``(Σ + λ I)⁻¹``, as a fraction of ``tr Σ / (d1 d2)``.
RIDGE = 0.01
#: Eigenvalues of ``Σ`` below this fraction of ``tr Σ / (d1 d2)`` span the "weak" directions.
WEAK = 0.01
#: (label, gradient context, multiplier of the whole step).
STEPS = (
    ("plain", "plain", 1.0),
    ("preconditioned", "whiten", 1.0),
    ("preconditioned ×0.25", "whiten", 0.25),
    ("preconditioned ×4", "whiten", 4.0),
    ("ridge-preconditioned", "ridge", 1.0),
)


def batched_step(M, X, G, y, a, t, rank, *, mult=1.0, n0=0, v_bar=None):
    """:func:`sgd_step_reference` for a stack of trials ``M`` (B, K, d1, d2), with the
    factor update's context ``G`` (B, d1, d2) in place of ``X`` (``G = X``: the plain step;
    ``G = Σ⁻¹ X``: the preconditioned one), the whole step multiplied by ``mult``, and the
    uniform logging policy's ``π = 1/K``.  ``v_bar`` (B,): the pulled arm's
    ``mean 1{a_s=a}/π²`` over rounds ``s <= t``."""
    B, k, d1, d2 = M.shape
    idx = np.arange(B)
    Ma = M[idx, a]
    W, s, Zt = np.linalg.svd(Ma)
    root = np.sqrt(s[:, :rank])
    U = W[:, :, :rank] * root[:, None, :]
    V = np.swapaxes(Zt[:, :rank], 1, 2) * root[:, None, :]
    nu = np.linalg.svd(M, compute_uv=False)[..., :rank].sum(axis=-1)  # (B, K)
    gain = np.full(B, DEFAULT_STEP_GAIN * (300 / max(t, 300)) ** 0.99)
    if n0:
        gain = np.minimum(gain, (d1 + d2) * rank / (n0 * v_bar / k + t))
    eta = mult * gain / ((d1 + d2) * np.maximum(nu[idx, a], NUCLEAR_NORM_FLOOR * nu.max(axis=1)))
    res = y - np.einsum("bij,bij->b", Ma, X)
    step = (eta * k * res)[:, None, None]  # η w res with w = 1/π = K
    U_new = U + step * (G @ V)
    V_new = V + step * (np.swapaxes(G, 1, 2) @ U)
    out = M.copy()
    out[idx, a] = U_new @ np.swapaxes(V_new, 1, 2)
    return out


def self_check(problem, rng) -> None:
    """The plain batched step equals :func:`sgd_step_reference` round by round."""
    M = problem.params + 0.05 * rng.standard_normal((K, problem.d1, problem.d2))
    Mb = M[None].copy()
    for t in range(1, 30):
        X = problem.draw_contexts(rng, 1)[0]
        a = int(rng.integers(K))
        y = float(np.sum(problem.params[a] * X[0]) + NOISE * rng.standard_normal())
        v = 4.0  # any value: both sides read the same one
        M, _ = sgd_step_reference(M, X[0], y, a, 0.5, t, RANK, n0=200, v_bar=v)
        Mb = batched_step(
            Mb, X, X, np.array([y]), np.array([a]), t, RANK, n0=200, v_bar=np.array([v])
        )
        assert np.allclose(M, Mb[0], rtol=1e-10, atol=1e-12), "batched step != reference"


def second_moment(law, d1: int, d2: int) -> np.ndarray:
    """The law's whole ``Σ`` (row-major ``vec``), for the settings here."""
    if isinstance(law, IsotropicLaw):
        return np.eye(d1 * d2) / law.isotropic_scale
    if isinstance(law, KroneckerLaw):
        return np.kron(law.row_cov, law.col_cov)
    return law.second_moment


def problem_of(setting: str):
    """The env's problem and its exact law for a setting name."""
    if setting == "iid":
        kw = {"d1": 10, "d2": 10}
    elif setting == "ar1":
        kw = {"d1": 10, "d2": 10, "context_corr": 0.9}
    else:
        kw = {"d1": 8, "d2": 8, "contexts": named_contexts("digits")}
    env = gym.make(
        "MatrixContextBandit-v0", rank=RANK, n_actions=K, noise_std=NOISE, truth_seed=0, **kw
    )
    problem = env.unwrapped.problem
    return problem, problem.context_law


def run_setting(
    setting: str,
    seeds: int,
    n: int,
    start: str,
    ridge_frac: float = RIDGE,
    only: str = "",
    warm: int = 0,
) -> list[dict]:
    problem, law = problem_of(setting)
    self_check(problem, np.random.default_rng(12345))
    d1, d2 = problem.d1, problem.d2
    truth = np.asarray(problem.params, dtype=float)
    n0 = (warm or default_warm_start_rounds(d1, d2, RANK, K)) if start == "fit" else 0
    total = n0 + n
    X = np.empty((seeds, total, d1, d2))
    acts = np.empty((seeds, total), dtype=int)
    y = np.empty((seeds, total))
    for b in range(seeds):
        rng = np.random.default_rng(1000 + b)
        X[b] = problem.draw_contexts(rng, total)[0]
        acts[b] = rng.integers(0, K, size=total)
        mean = np.einsum("tij,tij->t", truth[acts[b]], X[b])
        y[b] = mean + NOISE * rng.standard_normal(total)
    if start == "fit":
        M0 = initial_estimate(X[:, :n0], acts[:, :n0], y[:, :n0], K, rank=RANK)
    else:
        rng = np.random.default_rng(7)
        M0 = np.empty((seeds, K, d1, d2))
        for k in range(K):
            P = rng.standard_normal((d1, d2))
            W, s, Zt = np.linalg.svd(truth[k] + NOISE * P / np.linalg.norm(P))
            M0[:, k] = (W[:, :RANK] * s[:RANK]) @ Zt[:RANK]
    Xo, Ao, Yo = X[:, n0:], acts[:, n0:], y[:, n0:]
    S = second_moment(law, d1, d2)
    evals, evecs = np.linalg.eigh(S)
    level = np.trace(S) / (d1 * d2)
    weak = evecs[:, evals < WEAK * level]  # directions the contexts barely take
    ridge = np.linalg.inv(S + ridge_frac * level * np.eye(d1 * d2))
    grads = {
        "plain": Xo,
        "whiten": law.whiten(Xo.reshape(-1, d1, d2)).reshape(Xo.shape),
        "ridge": (Xo.reshape(seeds, n, -1) @ ridge).reshape(Xo.shape),
    }
    limit = DIVERGED * np.linalg.norm(truth.reshape(K, -1), axis=1).max()
    start = np.linalg.norm((M0 - truth).reshape(seeds, K, -1), axis=-1)
    start_err = start[start.max(axis=1) <= limit].mean()  # over the starts not lost at once
    rows = []
    for label, grad, mult in STEPS:
        if only and label not in only.split(","):
            continue
        clock = time.perf_counter()
        M = M0.copy()
        pulls = np.zeros((seeds, K))
        lost = np.zeros(seeds, dtype=bool)  # seeds whose estimate diverged
        errs, extra = {}, {}
        for t in range(1, n + 1):
            a = Ao[:, t - 1]
            pulls[np.arange(seeds), a] += 1
            v_bar = K * K * pulls[np.arange(seeds), a] / t
            G = grads[grad][:, t - 1]
            with np.errstate(all="ignore"):
                M = batched_step(
                    M, Xo[:, t - 1], G, Yo[:, t - 1], a, t, RANK, mult=mult, n0=n0, v_bar=v_bar
                )
            big = ~np.isfinite(M).all(axis=(1, 2, 3))
            big |= np.linalg.norm(np.nan_to_num(M).reshape(seeds, K, -1), axis=-1).max(1) > limit
            if big.any():  # park a diverged seed at the truth and leave it out
                lost |= big
                M[big] = truth
            if t in CHECKPOINTS and not lost.all():
                D = (M - truth)[~lost].reshape(-1, d1 * d2)
                errs[t] = np.linalg.norm(D, axis=1).reshape(-1, K).mean(axis=1)
                extra = {
                    "pred": np.sqrt(law.predicted_moment(D.reshape(-1, d1, d2)).mean()),
                    "weak": np.linalg.norm(D @ weak, axis=1).mean(),
                }
        rows.append(
            {
                "setting": setting,
                "step": label,
                "start": start_err,
                "errs": errs,
                "lost": int(lost.sum()),
                "seeds": seeds,
                "n_weak": weak.shape[1],
                "seconds": time.perf_counter() - clock,
                **extra,
            }
        )
    return rows


def table(rows: list[dict], n: int) -> str:
    checks = [c for c in CHECKPOINTS if c <= n]
    head = (
        "| contexts | step | diverged | start | "
        + " | ".join(f"n = {c}" for c in checks)
        + " | s.e. | slope | slope ≥ 1000 | weak part | pred. RMSE |"
    )
    lines = [head, "|" + "---|" * (len(checks) + 9)]
    names = {"iid": "i.i.d. N(0, 1)", "ar1": "AR(1) ρ = 0.9", "digits": "digits 8 × 8"}
    for r in rows:
        lost = f"{r['lost']}/{r['seeds']}"
        if len(r["errs"]) < len(checks):
            cells = ["all"] + [""] * (len(checks) + 5)
        else:
            means = [r["errs"][c].mean() for c in checks]
            last = r["errs"][checks[-1]]
            slope = np.polyfit(np.log(checks), np.log(means), 1)[0]
            tail = [c >= 1000 for c in checks]
            late = (
                np.polyfit(np.log(checks)[tail], np.log(means)[tail], 1)[0] if sum(tail) > 1 else 0
            )
            cells = [f"{m:.4f}" for m in means]
            cells += [f"{last.std(ddof=1) / np.sqrt(last.size):.4f}", f"{slope:+.2f}"]
            cells += [f"{late:+.2f}", f"{r['weak']:.4f}", f"{r['pred']:.4f}"]
        lines.append(
            f"| {names[r['setting']]} | {r['step']} | {lost} | {r['start']:.4f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--start", choices=("fit", "truth"), default="fit")
    parser.add_argument("--settings", default="iid,ar1,digits")
    parser.add_argument("--n0", type=int, default=0, help="warm-start rounds (default: the rule)")
    parser.add_argument("--ridge", type=float, default=RIDGE, help="λ / (tr Σ / (d1 d2))")
    parser.add_argument("--steps", default="", help="labels of STEPS to run (default: all)")
    args = parser.parse_args()
    rows = []
    for setting in args.settings.split(","):
        rows += run_setting(
            setting, args.seeds, args.n, args.start, args.ridge, args.steps, args.n0
        )
    print(table(rows, args.n))
    weak = ", ".join(sorted({f"{r['setting']} {r['n_weak']}" for r in rows}))
    print(f"\n{args.seeds} seeds, start={args.start}; weak directions of Σ: {weak}")
    print("seconds per step:", end=" ")
    print(", ".join(f"{r['setting']}/{r['step']} {r['seconds']:.0f}" for r in rows))


if __name__ == "__main__":
    main()
