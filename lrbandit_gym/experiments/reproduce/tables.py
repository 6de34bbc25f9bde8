"""What ``lrbandit reproduce`` reports of a study: its rows (the study's procedure and its
comparison variants, :func:`study_rows`), the facts recorded beside them
(:func:`study_diagnostics`), and the tables it prints with the paper's numbers beside ours
(:func:`print_table`, :func:`print_ensemble`, :func:`print_uniform`).
"""

from __future__ import annotations

import numpy as np

from lrbandit_gym.experiments.coverage import (
    format_coverage,
    summarize_parameters,
    summarize_value,
)
from lrbandit_gym.experiments.ensemble_study import EnsembleStudyConfig
from lrbandit_gym.experiments.reproduce.paper_numbers import PAPER, PAPER_ENSEMBLE, PAPER_TABLE2

__all__ = [
    "print_ensemble",
    "print_table",
    "print_uniform",
    "study_diagnostics",
    "study_rows",
]


def study_rows(config, result: dict) -> list[dict]:
    """Rows of one setting: the study's procedure ("ours") and its comparison variants."""
    if isinstance(config, EnsembleStudyConfig):
        plug_in = {
            "value_estimate": result["plug_in:value_estimate"],
            "value_se": result["plug_in:value_se"],
            "optimal_value": result["optimal_value"],
            "checkpoints": result["checkpoints"],
        }
        return summarize_value(result) + [
            dict(r, method="plug_in") for r in summarize_value(plug_in)
        ]
    if config.value:
        return summarize_value(result)
    rows = summarize_parameters(result)
    if "exploration_only" in config.variants:
        rows += [
            dict(r, method="exploration_only")
            for r in summarize_parameters(result, variant="exploration_only")
        ]
    if "paper" in config.variants:
        rows += [
            dict(r, method="paper_projection")
            for r in summarize_parameters(result, variant="paper")
        ]
    return rows


def study_diagnostics(config, result: dict) -> dict:
    """Run facts worth recording beside the table (the ensemble's exploration and errors)."""
    if not isinstance(config, EnsembleStudyConfig):
        return {"mean_regret": float(np.mean(result["regret"]))}
    return {
        "mean_regret": float(np.mean(result["regret"])),
        "warm_start_rounds": config.warm_start,
        "initial_error_mean": [float(e) for e in np.mean(result["initial_error"], axis=-1)],
        "estimation_error_mean": {
            int(n): [float(e) for e in np.mean(result["estimation_error"][c], axis=-1)]
            for c, n in enumerate(result["checkpoints"])
        },
        "mean_exploration": {
            int(n): float(np.mean(result["exploration"][c]))
            for c, n in enumerate(result["checkpoints"])
        },
    }


def print_table(study, rows, stream) -> None:
    """The study's table: one line per row, the paper's number beside ours where it has
    one."""
    head = (
        f"{'setting':<9}{'method':<17}{'target':<7}{'n':>5} {'quantity':<14}"
        f"{'coverage [95% MC interval]':>27} {'(paper)':>7} {'length':>8} {'(paper)':>7} "
        f"{'MSE':>9} {'z mean':>7} {'z sd':>6}"
    )
    print(head, file=stream)
    print("-" * len(head), file=stream)
    for r in rows:
        key = (r["target"], r["n"], r["quantity"])
        if study == "table2":
            rank = int(r["setting"].split("=")[1])
            single = r["quantity"].startswith("arm ") and " - " not in r["quantity"]
            arm = int(r["quantity"].split()[1]) if single else None
            paper_cov = (
                PAPER_TABLE2[rank][0][arm]
                if arm is not None
                and r["target"] == "T1"
                and r["n"] == 3000
                and rank in PAPER_TABLE2
                else None
            )
            paper_len = PAPER_TABLE2[rank][1][arm] if paper_cov is not None else None
        elif study in ("table1", "table3", "value") and r["method"] == "ours":
            # The V* entry is the value study's; T1/T2 entries are Table 1's setting.
            mine = (r["target"] == "V*") == (study == "value")
            paper_cov = PAPER.get(("coverage",) + key) if mine else None
            paper_len = PAPER.get(("mean_length",) + key) if mine else None
        else:
            paper_cov = paper_len = None

        def fmt(v, spec):
            return format(v, spec) if v is not None else " " * len(format(0.0, spec))

        print(
            f"{r['setting']:<9}{r['method']:<17}{r['target']:<7}{r['n']:>5} "
            f"{r['quantity']:<14}{format_coverage(r):>27}"
            f"{fmt(paper_cov, '>7.3f')} {r['mean_length']:>8.4f} {fmt(paper_len, '>7.3f')}"
            f" {r['mse']:>9.2e} {r['z_mean']:>+7.3f} {r['z_sd']:>6.3f}",
            file=stream,
        )


def print_ensemble(rows, diagnostics, stream) -> None:
    """Our z-score moments and coverage beside the paper's statement (Appendix B.3)."""
    print(f"paper (Appendix B.3, ensemble sampling): {PAPER_ENSEMBLE}", file=stream)
    for r in rows:
        if r["method"] != "ours":
            continue
        print(
            f"  ours, n = {r['n']}: z mean {r['z_mean']:+.3f} ± {r['z_mean_mcse']:.3f} "
            f"(N(0,1): 0), z sd {r['z_sd']:.3f} ± {r['z_sd_mcse']:.3f} (N(0,1): 1), "
            f"coverage {format_coverage(r)} (nominal 0.95)",
            file=stream,
        )
    errors = ", ".join(f"{e:.3f}" for e in diagnostics["initial_error_mean"])
    explore = ", ".join(f"n={n}: {e:.4f}" for n, e in diagnostics["mean_exploration"].items())
    print(
        f"  warm start {diagnostics['warm_start_rounds']} uniform rounds: mean "
        f"||M_hat_a - M_a||_F = {errors} when inference starts; mean e_hat_t {explore}; "
        f"plug_in = (1/n) sum_t q_t without the correction (a control, same se)",
        file=stream,
    )


def print_uniform(rows, stream) -> None:
    """The time-uniform coverage table: fixed-n intervals against confidence sequences."""
    first = rows[0]
    print(
        f"\ntime-uniform coverage, read at every round n = {first['n0']}..{first['N']} "
        f"(sequences tuned at n = {first['tuning_n']}; at N a sequence is "
        f"{first['width_ratio']:.2f}x the fixed-n interval's width)",
        file=stream,
    )
    head = (
        f"{'setting':<8}{'target':<7}{'quantity':<15}{'fixed at N':>11}"
        f"{'fixed, all n':>21}{'sequence, all n':>21}"
    )
    print(head, file=stream)
    print("-" * len(head), file=stream)
    for r in rows:
        print(
            f"{r['setting']:<8}{r['target']:<7}{r['quantity']:<15}{r['fixed_at_N']:>11.3f}"
            f"{format_coverage(r, 'uniform_fixed'):>21}"
            f"{format_coverage(r, 'uniform_sequence'):>21}",
            file=stream,
        )
