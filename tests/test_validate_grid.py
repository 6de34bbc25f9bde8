"""Validity outside the paper's settings: a reduced run of ``lrbandit validate``'s grid
(docs/reproduction.md, "Validity outside the paper").

200 trials of five grid settings (unequal dimensions and noise, three arms with softmax,
four arms with Student-t noise, rank 5 at d = 25, completion contexts), fixed seeds, both
cores; under a minute.
The same trials with every standard error off by a factor √2 (a variance off by a factor 2,
either way) must fail the check the real intervals pass: the check has the power to see it.
"""

import math

import numpy as np
import pytest
from scipy import stats

from lrbandit_gym.experiments.validate import GRID, CheckpointReader, run_validation
from lrbandit_gym.experiments.validate_report import verdict

pytestmark = pytest.mark.slow

TRIALS = 200
# The grid's settings with fewer checkpoints where that saves time.
REDUCED = {
    "unequal": GRID["unequal"],
    "softmax3": GRID["softmax3"],
    "student-t": GRID["student-t"].replace(n=(500,)),
    "rank5": GRID["rank5"].replace(n=(1000,)),
    "completion": GRID["completion"].replace(n=(1000,)),
}


@pytest.fixture(scope="module")
def results():
    return {
        name: run_validation(setting, trials=TRIALS, jobs=2, progress=False)
        for name, setting in REDUCED.items()
    }


def failures(rows, level=0.95) -> list[str]:
    """Why a coverage table is not that of valid intervals: an UNDER-COVERS verdict (99%
    family-wise band), or a cell whose z-scores have mean or s.d. more than 4 Monte Carlo
    standard errors from 0 and 1 (about ±0.28 and ±0.2 at 200 trials)."""
    out = []
    status, line, _ = verdict(rows, level)
    if status == "UNDER-COVERS":
        out.append(line)
    for r in rows:
        if abs(r["z_mean"]) > 4 * r["z_mean_mcse"] or abs(r["z_sd"] - 1) > 4 * r["z_sd_mcse"]:
            out.append(
                f"{r['quantity']} at n = {r['n']}: z mean {r['z_mean']:+.3f}, z s.d. "
                f"{r['z_sd']:.3f} ({r['trials']} trials)"
            )
    return out


def rescaled(result, factor: float) -> list[dict]:
    """The table of the same trials with every standard error (and interval) times
    ``factor``."""
    a = result.arrays
    z = stats.norm.ppf(0.5 + result.confidence_level / 2)
    se = a["standard_error"] * factor
    arrays = {
        "estimate": a["estimate"],
        "standard_error": se,
        "low": a["estimate"] - z * se,
        "high": a["estimate"] + z * se,
    }
    return CheckpointReader.summarize(
        arrays, result.quantities, result.setting, result.confidence_level
    )


@pytest.mark.parametrize("name", list(REDUCED))
def test_intervals_are_valid_outside_the_papers_settings(results, name):
    result = results[name]
    assert all(r["trials"] == TRIALS for r in result.rows)
    assert failures(result.rows) == [], f"{name}:\n" + result.report()
    assert result.status in ("VALID", "OVER-COVERS")
    assert result.warnings == []  # no warm-start warning with the default warm start


@pytest.mark.parametrize("name", list(REDUCED))
def test_a_variance_off_by_a_factor_two_fails(results, name):
    result = results[name]
    too_small = rescaled(result, 1 / math.sqrt(2))
    assert verdict(too_small, 0.95)[0] == "UNDER-COVERS"
    assert failures(too_small)
    too_large = rescaled(result, math.sqrt(2))
    assert failures(too_large)
    assert np.median([r["z_sd"] for r in too_large]) < 0.8
