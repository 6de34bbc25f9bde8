"""The paper's published numbers that ``lrbandit reproduce`` prints and draws beside its
own: Table 1 (coverage and mean length of the intervals for ``T1`` and ``T2``), Table 2
(``T1`` at ranks 3, 5 and 7), Table 3 (MSE against the exploration-only baseline), the
optimal-value coverage, and the one statement of Appendix B.3 (ensemble sampling).
"""

from __future__ import annotations

__all__ = ["PAPER", "PAPER_ENSEMBLE", "PAPER_TABLE2", "paper_references"]

#: The paper's published numbers: (table, target, n, quantity) -> value.
PAPER = {
    # Table 1: coverage / mean CI length, i = 0 and i = 1.
    **{
        ("coverage", "T1", n, f"arm {i}"): v
        for (n, i), v in {
            (1000, 0): 0.909,
            (1000, 1): 0.913,
            (2000, 0): 0.923,
            (2000, 1): 0.925,
            (3000, 0): 0.929,
            (3000, 1): 0.936,
        }.items()
    },
    **{
        ("coverage", "T2", n, f"arm {i}"): v
        for (n, i), v in {
            (1000, 0): 0.906,
            (1000, 1): 0.908,
            (2000, 0): 0.924,
            (2000, 1): 0.923,
            (3000, 0): 0.931,
            (3000, 1): 0.930,
        }.items()
    },
    **{
        ("mean_length", "T1", n, f"arm {i}"): v
        for (n, i), v in {
            (1000, 0): 0.018,
            (1000, 1): 0.010,
            (2000, 0): 0.013,
            (2000, 1): 0.008,
            (3000, 0): 0.011,
            (3000, 1): 0.006,
        }.items()
    },
    **{
        ("mean_length", "T2", n, f"arm {i}"): v
        for (n, i), v in {
            (1000, 0): 0.065,
            (1000, 1): 0.042,
            (2000, 0): 0.048,
            (2000, 1): 0.031,
            (3000, 0): 0.039,
            (3000, 1): 0.026,
        }.items()
    },
    # Table 3 (i = 1): MSE and CI length, ours / exploration-only.
    **{
        ("mse", t, n, "arm 1"): v * 1e-4
        for (t, n), v in {
            ("T1", 1000): 0.096,
            ("T1", 2000): 0.046,
            ("T1", 3000): 0.029,
            ("T2", 1000): 1.653,
            ("T2", 2000): 0.786,
            ("T2", 3000): 0.510,
        }.items()
    },
    **{
        ("mse_exploration_only", t, n, "arm 1"): v * 1e-4
        for (t, n), v in {
            ("T1", 1000): 0.191,
            ("T1", 2000): 0.095,
            ("T1", 3000): 0.062,
            ("T2", 1000): 3.517,
            ("T2", 2000): 1.735,
            ("T2", 3000): 1.149,
        }.items()
    },
    ("coverage", "V*", 1000, "optimal value"): 0.945,
}
#: Table 2 (T1, n = 3000): coverage and length for r = 3, 5, 7.
PAPER_TABLE2 = {
    3: ((0.929, 0.936), (0.011, 0.006)),
    5: ((0.917, 0.921), (0.015, 0.014)),
    7: ((0.913, 0.906), (0.021, 0.021)),
}

#: Appendix B.3 (ensemble sampling; inference of Appendix A), its figure of z-scores: the
#: paper's only statement about this study.
PAPER_ENSEMBLE = "z-scores close to N(0, 1) at n = 300 and n = 700 (a histogram; no numbers)"


def paper_references(study: str, label: str) -> tuple[dict, dict]:
    """The paper's coverage and length by ``(target, quantity) -> {n: value}``."""
    cov: dict = {}
    length: dict = {}
    if study == "table2":
        rank = int(label.split("=")[1])
        if rank not in PAPER_TABLE2:
            return cov, length
        for arm in (0, 1):
            cov[("T1", f"arm {arm}")] = {3000: PAPER_TABLE2[rank][0][arm]}
            length[("T1", f"arm {arm}")] = {3000: PAPER_TABLE2[rank][1][arm]}
        return cov, length
    if study not in ("table1", "value"):
        return cov, length
    for (what, target, n, quantity), value in PAPER.items():
        if (target == "V*") != (study == "value"):
            continue
        if what == "coverage":
            cov.setdefault((target, quantity), {})[n] = value
        elif what == "mean_length":
            length.setdefault((target, quantity), {})[n] = value
    return cov, length
