"""Does the number of rounds behind an arm's ``σ̂²`` explain the cells that under-cover?

    python tools/effective_rounds_study.py eight-arms 300

Runs ``TRIALS`` trials of a grid setting (``lrbandit validate``'s engine, chunks of 100,
seeds ``(0, chunk)``) and, at every checkpoint, prints the quantiles of Kish's effective
number of rounds behind each arm's ``σ̂²``, ``(Σ_t w_t res_t²)² / Σ_t (w_t res_t²)²``, and
the coverage of the single-arm parameter cells by its range.  It wraps the core's
``commit`` to add up the squares (a study, not the library's arithmetic).
"""

from __future__ import annotations

import sys

import numpy as np

from inference.cores import linear_form as lf
from lrbandit_gym.experiments.validate.grid import GRID
from lrbandit_gym.experiments.validate.run import run_chunk

BINS = [(0, 15), (15, 25), (25, 40), (40, 80), (80, np.inf)]


def main(name: str, trials: int) -> None:
    sums: dict[int, list] = {}
    commit, interval = lf.LinearFormInference.commit, lf.LinearFormInference.interval

    def counting_commit(self, terms):
        commit(self, terms)
        B, K = len(terms.action), self.n_actions
        s = sums.setdefault(id(self), [np.zeros((B, K)), np.zeros((B, K))])
        t = terms.weight * terms.res**2
        s[0][np.arange(B), terms.action] += t
        s[1][np.arange(B), terms.action] += t * t

    rows = []
    for chunk in range(trials // 100):
        sums.clear()
        dof: dict[int, np.ndarray] = {}

        def reading_interval(self, arm, target, *args, _dof=dof, **kwargs):
            s, q = sums[id(self)]
            _dof.setdefault(self.n_obs, s * s / np.where(q > 0, q, np.inf))
            return interval(self, arm, target, *args, **kwargs)

        lf.LinearFormInference.commit = counting_commit
        lf.LinearFormInference.interval = reading_interval
        try:
            out = run_chunk(GRID[name], 100, np.random.SeedSequence([0, chunk]))
        finally:
            lf.LinearFormInference.commit, lf.LinearFormInference.interval = commit, interval
        arrays = out["readers"]["checkpoints"]
        for c, n in enumerate(sorted(dof)):
            for j, q in enumerate(out["quantities"]):
                if q.target is None or len(q.arms) != 1:
                    continue
                covered = (arrays["low"][c, j] <= q.truth) & (q.truth <= arrays["high"][c, j])
                rows.append((n, dof[n][:, q.arms[0]], covered))
    for n in sorted({r[0] for r in rows}):
        d = np.concatenate([r[1] for r in rows if r[0] == n])
        c = np.concatenate([r[2] for r in rows if r[0] == n])
        q = np.percentile(d, [5, 25, 50, 75]).round(1)
        print(f"n = {n}: effective rounds, 5/25/50/75%: {q}; coverage {c.mean():.3f}")
        for lo, hi in BINS:
            m = (d >= lo) & (d < hi)
            if m.any():
                print(f"  [{lo}, {hi}): {m.mean():.0%} of cells, coverage {c[m].mean():.3f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
