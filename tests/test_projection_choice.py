"""``projection="auto"``: the debiased mean where the contexts barely vary along some
directions, the tangent-space read-out elsewhere (inference.cores.projection_choice)."""

import numpy as np
import pytest

from inference.cores.projection_choice import choose_projection, contexts_condition_number
from lrbandit_gym.context_law import (
    CONDITION_LIMIT,
    EntryLaw,
    EstimatedLaw,
    IsotropicLaw,
    KroneckerLaw,
    SecondMomentLaw,
    ar1_correlation,
)
from lrbandit_gym.digits import digits_arrays
from lrbandit_gym.onehot import OneHotContexts


def _digits() -> np.ndarray:
    return digits_arrays()["contexts"]


def test_auto_keeps_the_low_rank_read_out_on_well_conditioned_laws():
    laws = [
        IsotropicLaw(20, 20, "gaussian"),
        IsotropicLaw(10, 10, "completion"),
        KroneckerLaw(ar1_correlation(20, 0.9), ar1_correlation(20, 0.9)),
        EntryLaw(np.outer(np.arange(1, 11) ** -0.5, np.arange(1, 11) ** -0.5)),
    ]
    for law in laws:
        assert law.condition_number() < CONDITION_LIMIT
        assert choose_projection("auto", law) == "tangent"


def test_auto_takes_the_debiased_mean_on_images():
    law = SecondMomentLaw.of_contexts(_digits())
    assert law.condition_number() > CONDITION_LIMIT
    assert choose_projection("auto", law) == "none"
    # the paper's truncation asked for keeps a low-rank read-out
    assert choose_projection("auto", law, point_estimate="projection") == "tangent"


def test_an_explicit_choice_is_kept():
    law = SecondMomentLaw.of_contexts(_digits())
    for p in ("tangent", "paper", "none"):
        assert choose_projection(p, law) == p
        assert choose_projection(p, IsotropicLaw(4, 3)) == p


def test_an_estimated_law_is_judged_by_the_contexts_it_is_given():
    law = EstimatedLaw(8, 8)
    assert choose_projection("auto", law) == "tangent"  # nothing seen yet
    kappa = contexts_condition_number(_digits(), "full")
    assert choose_projection("auto", law, condition=kappa) == "none"
    rng = np.random.default_rng(0)
    iid = rng.standard_normal((2000, 8, 8))
    assert choose_projection("auto", law, condition=contexts_condition_number(iid, "full")) == (
        "tangent"
    )


def test_the_contexts_condition_number_is_the_laws():
    x = _digits()
    assert contexts_condition_number(x, "full") == pytest.approx(
        SecondMomentLaw.of_contexts(x).condition_number(), rel=1e-9
    )
    rng = np.random.default_rng(1)
    R, C = ar1_correlation(6, 0.8), ar1_correlation(5, 0.5)
    X = np.linalg.cholesky(R) @ rng.standard_normal((20000, 6, 5)) @ np.linalg.cholesky(C).T
    kappa = KroneckerLaw(R, C).condition_number()
    assert contexts_condition_number(X, "kronecker") == pytest.approx(kappa, rel=0.1)
    rows, cols = rng.integers(0, 3, 600), rng.integers(0, 4, 600)
    rows[:300], cols[:300] = 0, 0  # entry (0, 0) revealed far more often
    counts = np.zeros((3, 4))
    np.add.at(counts, (rows, cols), 1)
    assert contexts_condition_number(OneHotContexts(rows, cols, 3, 4), "full") == (
        counts.max() / counts[counts > 0].min()
    )


def test_the_wrappers_and_analyze_choose_by_the_contexts():
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401
    from inference import ParameterInference, analyze
    from lrbandit_gym.digits import digits_bandit
    from lrbandit_gym.logs import make_log

    T = {"centre": np.zeros((8, 8))}
    T["centre"][4, 4] = 1.0
    images = ParameterInference(digits_bandit(), T, rank=2)
    assert images.core.projection == "none"  # the images' exact law: ill-conditioned
    paper = ParameterInference(gym.make("MatrixContextBandit-v0", d1=8, d2=8, rank=2), T, rank=2)
    assert paper.core.projection == "tangent"
    # a log's estimated law is judged by all its contexts before the replay
    rng = np.random.default_rng(2)
    n = 900
    for X, expected in ((_digits()[:n], "none"), (rng.standard_normal((n, 8, 8)), "tangent")):
        actions = rng.integers(0, 2, n)
        rewards = X[:, 4, 4] * (actions == 1) + 0.1 * rng.standard_normal(n)
        log = make_log(X, actions, rewards, pmf=np.full((n, 2), 0.5))
        result = analyze(log, T, rank=1, warm_start=300, value=False)
        assert result.wrappers["parameters"].core.projection == expected
