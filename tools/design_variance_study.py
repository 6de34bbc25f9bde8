"""Is the design variance ``Ŝ²`` (eq. (14)) what under-covers where few rounds carry an arm?

    python tools/design_variance_study.py run completion-default 500 [FIRST_CHUNK] [OUT.npz]
    python tools/design_variance_study.py show OUT.npz [MORE.npz ...]

Runs trials of a grid setting as ``lrbandit validate --seed 0`` does (chunks of 100, the
same seeds and stack, so the same trials) and, beside the library's standard error ``σ̂ Ŝ/√n``, computes
one with the *all-rounds* design variance

    Ŝ²_all,i = (1/n) Σ_t c² <G_{i,t}, X_t>² / π_t(i | X_t)

(every round's context, arm ``i``'s propensity in that round, ``G_{i,t}`` from
``M̂_{i,t−1}``), whose conditional mean given the past equals that of eq. (14)'s
``(1/n) Σ_t 1{a_t = i}/π_t(i)² · c² <G_{i,t}, X_t>²``: the same limit, without the indicator
that leaves an arm explored with probability ``ε/K`` a handful of terms of weight ``1/π²``.
Same trials, same estimate, same ``σ̂²``: only the design part of the standard error differs.

The library's laws with a scalar ``c`` (Gaussian, uniform completion), dense observations
and the tangent read-out only (the grid's defaults there).  ``run`` prints the coverage and
z s.d. of every single-arm parameter cell both ways and saves the z-scores to ``OUT.npz``;
``show`` pools saved runs (for chunks run in parallel: ``FIRST_CHUNK`` numbers them).
A study, not the library's arithmetic.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

from lrbandit_gym.experiments.validate.grid import GRID
from lrbandit_gym.experiments.validate.setting import (
    load_targets,
    make_env,
    make_policy,
    problem_sizes,
)
from lrbandit_gym.experiments.validate.stack import InferenceStack

CHUNK = 100
Z95 = 1.959963984540054


def all_rounds_terms(estimator, X, propensities, T, c):
    """``c² <G_{i,t}, X_t>² / π_t(i)`` for every trial, arm and target, ``(B, K, n_T)``, from
    the estimates before the round (``G = T − P_U⊥ T P_V⊥``, the tangent read-out's)."""
    QU, QV = estimator.store.subspaces()  # (B, K, d, r)
    # <G, X> = <P_U T, X> + <T P_V, X> − <P_U T P_V, X>, each through r-column products.
    UX = np.matmul(QU.swapaxes(-1, -2), X[:, None])  # Q_Uᵀ X (B, K, r, d2)
    UT = np.einsum("bkir,tij->bktrj", QU, T)  # Q_Uᵀ T (B, K, n_T, r, d2)
    XV = np.matmul(X[:, None], QV)  # X Q_V (B, K, d1, r)
    TV = np.einsum("tij,bkjr->bktir", T, QV)  # T Q_V (B, K, n_T, d1, r)
    UXV = np.matmul(UX, QV)  # Q_Uᵀ X Q_V (B, K, r, r)
    UTV = np.matmul(UT, QV[:, :, None])  # Q_Uᵀ T Q_V (B, K, n_T, r, r)
    gx = (
        np.einsum("bktrj,bkrj->bkt", UT, UX)
        + np.einsum("bktir,bkir->bkt", TV, XV)
        - np.einsum("bktrs,bkrs->bkt", UTV, UXV)
    )
    return c * c * gx * gx / propensities[:, :, None]


def run_chunk(setting, chunk: int) -> dict[tuple[int, str], tuple[np.ndarray, np.ndarray]]:
    """``{(n, label): (z, z_all)}`` for one chunk of :data:`CHUNK` trials."""
    # The chunk's seed is validate's: the chunk-th child of SeedSequence(0).
    env_seed, agent_seed = np.random.SeedSequence(0, spawn_key=(chunk,)).spawn(2)
    venv = make_env(setting.env, CHUNK)
    d1, d2, _, K, _ = problem_sizes(venv, setting)
    targets = load_targets(setting.targets, d1, d2)
    agent = make_policy(setting, venv, agent_seed)
    stack = InferenceStack(venv, agent, setting, targets)
    core = stack.parameters.core
    if core.c is None or core.projection != "tangent":
        raise SystemExit(f"{core.c=}, {core.projection=}: the study covers c·X laws, tangent")
    T = np.stack([np.asarray(t, float) for t in targets.values()])
    A = np.zeros((CHUNK, K, len(T)))
    checkpoints = sorted(set(int(n) for n in setting.n))
    out = {}
    env = stack.env
    obs, _ = env.reset(seed=int(env_seed.generate_state(1)[0]))
    n = 0
    while n < checkpoints[-1]:
        decision = agent.act(obs)
        terms = None
        if agent.estimator.initialized:  # after the warm start: the round may enter inference
            props = np.asarray(decision.propensities).reshape(CHUNK, K)
            X = np.asarray(obs, dtype=float)
            if X.ndim != 3:
                raise SystemExit("dense observations only")
            terms = all_rounds_terms(agent.estimator, X, props, T, core.c)
        before = stack.n_obs
        next_obs, reward, _, _, _ = env.step(decision)
        agent.update(obs, decision, reward)
        obs = next_obs
        n = stack.n_obs
        if n == before:
            continue
        A += terms
        if n not in checkpoints:
            continue
        sigma2 = core.state.sigma_sum / n
        for q, iv in zip(stack.quantities, stack.intervals(0.95), strict=True):
            if q.target is None or len(q.arms) != 1:
                continue
            a, k = q.arms[0], list(targets).index(q.target)
            se_all = np.sqrt(sigma2[:, a] * A[:, a, k] / n / n)
            out[(n, q.label)] = (
                (iv.estimate - q.truth) / iv.standard_error,
                (iv.estimate - q.truth) / se_all,
            )
    return out


def show(pooled: dict[tuple[int, str], list]) -> None:
    for (n, label), pairs in sorted(pooled.items()):
        z = np.concatenate([p[0] for p in pairs])
        za = np.concatenate([p[1] for p in pairs])
        print(
            f"n = {n} {label}: eq. (14) covers {np.mean(np.abs(z) <= Z95):.3f} (z s.d. "
            f"{np.nanstd(z):.2f}); all rounds {np.mean(np.abs(za) <= Z95):.3f} (z s.d. "
            f"{np.nanstd(za):.2f}); {z.size} trials"
        )


def main(argv: list[str]) -> None:
    warnings.simplefilter("ignore")
    if argv[0] == "show":
        pooled: dict = {}
        for path in argv[1:]:
            with np.load(path) as f:
                for key in f.files:
                    if key.endswith("|z"):
                        n, label = key[:-2].split("|", 1)
                        pooled.setdefault((int(n), label), []).append((f[key], f[key[:-2] + "|za"]))
        show(pooled)
        return
    name, trials = argv[1], int(argv[2])
    first = int(argv[3]) if len(argv) > 3 else 0
    pooled = {}
    for chunk in range(first, first + trials // CHUNK):
        for key, pair in run_chunk(GRID[name], chunk).items():
            pooled.setdefault(key, []).append(pair)
    show(pooled)
    if len(argv) > 4:
        arrays = {}
        for (n, label), pairs in pooled.items():
            arrays[f"{n}|{label}|z"] = np.concatenate([p[0] for p in pairs])
            arrays[f"{n}|{label}|za"] = np.concatenate([p[1] for p in pairs])
        np.savez(argv[4], **arrays)


if __name__ == "__main__":
    main(sys.argv[1:])
