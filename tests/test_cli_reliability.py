"""Reliability of the command line (issue 26, items 8-11): outputs that cannot be lost or
clobbered, one convention of exit codes and messages, Monte Carlo intervals of coverage that
behave at 0 and 1, and one meaning of ``--out``."""

import math

import numpy as np
import pytest
from scipy import stats

from lrbandit_gym.experiments.studies import coverage_interval, coverage_stats, format_coverage

pytestmark = pytest.mark.filterwarnings("ignore::agents.warm_start_check.WarmStartWarning")


# --------------------------------------------------------------------------- item 10
@pytest.mark.parametrize("covered, trials", [(20, 20), (0, 20), (19, 20), (190, 200), (1, 3)])
def test_coverage_interval_is_scipys_wilson_interval(covered, trials):
    expected = stats.binomtest(covered, trials).proportion_ci(method="wilson")
    low, high = coverage_interval(covered, trials)
    assert math.isclose(low, expected.low, abs_tol=1e-12)
    assert math.isclose(high, expected.high, abs_tol=1e-12)
    assert 0.0 <= low < high <= 1.0  # a width at the edges, never past them


def _all_covering_cell(trials):
    """coverage_stats of ``trials`` intervals that all cover the truth 0."""
    est = np.zeros(trials)
    se = np.ones(trials)
    return coverage_stats(est, se, est - 1.0, est + 1.0, 0.0)


def test_a_perfect_coverage_prints_an_interval_not_plus_minus_zero():
    """20 trials that all cover: the old table printed "1.000 ± 0.000"."""
    row = _all_covering_cell(20)
    expected = stats.binomtest(20, 20).proportion_ci(method="wilson")
    assert row["coverage"] == 1.0
    assert math.isclose(row["coverage_low"], expected.low) and row["coverage_high"] == 1.0
    text = format_coverage(row)
    assert text == f"1.000 [{expected.low:.2f}, 1.00]"
    assert "±" not in text


def _table_row(cell, n=60, quantity="<M_0, e11>"):
    return {"n": n, "quantity": quantity, "truth": 0.0, "flag": "", **cell}


def test_validate_table_and_verdict_show_the_interval():
    from lrbandit_gym.experiments.validate_report import ValidationResult, verdict

    cell = _all_covering_cell(20)
    rows = [_table_row(cell)]
    status, line, band = verdict(rows, 0.95)
    assert status == "VALID" and 0.95 + band > 1
    assert f"± {band:.3f}" not in line  # a band that would pass 1 is cut at 1
    assert f"[{0.95 - band:.3f}, 1]" in line and format_coverage(cell) in line
    result = ValidationResult(
        setting=None,
        rows=rows,
        status=status,
        verdict=line,
        band=band,
        quantities=(),
        arrays={},
        trials=20,
        seed=0,
        batch_size=20,
        confidence_level=0.95,
    )
    table = result.to_markdown()
    assert "1.000 ± 0.000" not in table and format_coverage(cell) in table
    header = result.to_csv().splitlines()[0].split(",")
    assert {"coverage_low", "coverage_high"} <= set(header)


def test_verdict_band_is_wilsons_score_test():
    """A cell is flagged exactly when the nominal level lies outside its Wilson interval at
    the Bonferroni level: the rule behaves at 0 and 1."""
    from lrbandit_gym.experiments.validate_report import FAMILY_LEVEL, cell_flag

    trials, m, level = 40, 3, 0.95
    bonferroni = 1 - (1 - FAMILY_LEVEL) / m
    for covered in range(trials + 1):
        row = {"trials": trials, "coverage": covered / trials}
        low, high = coverage_interval(covered, trials, bonferroni)
        expected = "low" if high < level else ("high" if low > level else "")
        assert cell_flag(row, m, level) == expected, covered


def test_figure_error_bars_stay_inside_zero_and_one():
    from lrbandit_gym.experiments.figures import _mc_band, coverage_error_bars

    rows = [_all_covering_cell(20), _all_covering_cell(20)]
    est = np.zeros(20)
    se = np.ones(20)
    rows[1] = coverage_stats(est, se, est - 1.0, est + np.r_[np.ones(19), -0.5], 0.0)
    assert rows[1]["coverage"] == 19 / 20
    err = coverage_error_bars(rows)
    y = np.array([r["coverage"] for r in rows])
    assert np.all(y + err[1] <= 1.0) and np.all(y - err[0] >= 0.0)
    assert np.all(err[0] > 0)  # a width below 1.000 (the old bar was ±0)
    low, high = _mc_band(0.95, np.array([20.0, 5000.0]))
    assert np.all(high <= 1.0) and np.all(low >= 0.0)


def test_coverage_figure_draws_wilson_error_bars(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from lrbandit_gym.experiments.figures import coverage_figure
    from lrbandit_gym.experiments.studies import StudyConfig, run_study

    drawn = []
    original = Axes.errorbar

    def spy(self, x, y, *args, yerr=None, **kwargs):
        drawn.append((np.asarray(y, float), np.asarray(yerr, float)))
        return original(self, x, y, *args, yerr=yerr, **kwargs)

    monkeypatch.setattr(Axes, "errorbar", spy)
    config = StudyConfig(checkpoints=(30,), warm_start=300, d1=12, d2=10, rank=2)
    result = run_study(config, 6, seed=5, batch_size=6)
    coverage_figure(result, tmp_path / "c.png")
    assert drawn
    for y, yerr in drawn:
        assert yerr.shape == (2, y.size)
        assert np.all(y + yerr[1] <= 1.0 + 1e-12) and np.all(y - yerr[0] >= -1e-12)
        assert np.all(yerr[0] + yerr[1] > 0)  # 6 trials never pin a coverage down
