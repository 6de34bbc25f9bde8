"""The estimator's parts answer for themselves: the factor store and the product cache own
their memory (``nbytes``), and the warm start owns the hand-off to the estimator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import play, small_env

import lrbandit_gym  # noqa: F401  (registers the environment)
from agents import EpsilonGreedy
from agents.base import ProblemShape
from agents.estimator import LowRankSGD
from agents.estimator.products import ProductCache
from agents.warm_start import WarmStart
from inference.wrappers.own_estimator import OwnEstimator
from lrbandit_gym.rounds import Round

F8 = 8  # bytes of a float64 or an int64
#: The short warm starts here warn that they are short; what they hand off is the point.
SHORT = pytest.mark.filterwarnings("ignore:warm start. too few rounds:RuntimeWarning")


def test_product_cache_counts_the_round_products_it_holds():
    cache = ProductCache(5, 4, None)
    empty = (5 * 4 + 1) * F8  # the fingerprint's weights and the trial index
    assert cache.nbytes == empty
    X = np.random.default_rng(0).standard_normal((1, 5, 4))
    V_cat = np.zeros((1, 4, 3, 2))
    cache.all_arm_products(X, V_cat)
    assert cache.nbytes == empty + F8 + 5 * 3 * 2 * F8  # fingerprint (1,), X V (1, 5, 3, 2)
    cache.invalidate()
    assert cache.nbytes == empty


@pytest.mark.parametrize("n_trials", [None, 3])
def test_estimator_nbytes_sums_its_store_and_its_own_arrays(n_trials):
    d1, d2, r, K = 5, 4, 2, 3
    B = 1 if n_trials is None else n_trials
    est = LowRankSGD(d1, d2, r, K, n_trials=n_trials)
    factors = B * K * (d1 * r + 2 * d2 * r + r)  # U, V, V side by side, sv
    counters = B * K * (1 + 1 + 2) + B  # counts, arm versions, step support, trial index
    cache = d1 * d2 + B
    assert est.store.nbytes == (factors + counters + cache) * F8
    assert est.nbytes == est.store.nbytes + (B + B * K + B) * F8
    rng = np.random.default_rng(1)
    est.initialize(rng.standard_normal((K, d1, d2)))
    assert est.store.nbytes == (factors + counters + cache) * F8
    shape = (d1, d2) if n_trials is None else (B, d1, d2)
    X = rng.standard_normal(shape)
    a = 0 if n_trials is None else np.zeros(B, dtype=int)
    pulled = est.pulled(*est.check_context(X)[:1], np.zeros(B, dtype=np.int64))
    held = B + B + pulled.XV.size + pulled.XtU.size  # fingerprint, actions, X V, Xᵀ U
    if n_trials is not None:  # gathered copies; unbatched they are views of the factors
        held += pulled.U.size + pulled.V.size
    assert est.store.nbytes == (factors + counters + cache + held) * F8
    props = np.full(K, 1 / K) if n_trials is None else np.full((B, K), 1 / K)
    est.update(X, a, np.zeros(B) if n_trials else 0.0, props)  # a step drops the products
    assert est.store.nbytes == (factors + counters + cache) * F8


def test_a_saved_state_keeps_its_format():
    est = LowRankSGD(5, 4, 2, 3, n_trials=2)
    est.initialize(np.random.default_rng(2).standard_normal((3, 5, 4)), prior_rounds=7)
    state = est.state_dict()
    assert list(state) == [
        "format_version",
        *("d1", "d2", "rank", "n_actions", "n_trials", "context", "step_scale"),
        *("step_offset", "step_decay", "propensities", "step_gain"),
        *("U", "V", "singular_values", "counts", "t", "initialized", "max_singular_value"),
        *("prior_rounds", "square_weight_sum"),
    ]
    back = LowRankSGD.from_state_dict(state)
    assert back.store is not est.store
    assert back.state_dict()["prior_rounds"] == 7
    np.testing.assert_array_equal(back.estimates, est.estimates)


class _Initialize:
    """An estimator stand-in that records ``initialize``'s ``prior_rounds``, or fails."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.prior_rounds: list[int] = []

    def initialize(self, M_init, *, prior_rounds: int = 0) -> None:
        if self.fail:
            raise FloatingPointError("initialize failed")
        self.prior_rounds.append(prior_rounds)


def _full_warm_start(rounds: int = 12) -> WarmStart:
    ws = WarmStart(4, 3, n_actions=2, rank=1, rounds=rounds)
    rng = np.random.default_rng(3)
    for t in range(rounds):
        X = rng.standard_normal((1, 4, 3))
        ws.add_round(Round(X, np.array([t % 2]), rng.standard_normal(1), None, None))
    return ws


@SHORT
@pytest.mark.parametrize("uniform, prior", [(True, 12), (False, 0)])
def test_hand_off_passes_the_uniform_rounds_and_ends_the_phase(uniform, prior):
    ws = _full_warm_start()
    M_init, _ = ws.finish(check=False, who="test")
    est = _Initialize()
    assert ws.nbytes == ws.store.nbytes == 12 * (4 * 3 * 4 + 24)  # float32 X, a, y, w
    ws.hand_off(est, M_init, uniform=uniform)
    assert est.prior_rounds == [prior]
    assert not ws.active and ws.nbytes == 0


@SHORT
def test_a_failing_hand_off_takes_the_last_round_back_out():
    ws = _full_warm_start()
    M_init, _ = ws.finish(check=False, who="test")
    with pytest.raises(FloatingPointError, match="initialize failed"):
        ws.hand_off(_Initialize(fail=True), M_init, uniform=True)
    assert ws.active and ws.store.n == 11 and not ws.full


@SHORT
def test_policy_and_wrapper_hand_off_through_the_warm_start():
    env = small_env()
    agent = EpsilonGreedy(env, rank=2, epsilon=0.1, warm_start=20, seed=0)
    obs, _ = env.reset(seed=0)
    play(env, agent, obs, 20)
    assert agent.estimator.initialized
    assert agent.estimator.state_dict()["prior_rounds"] == 20  # uniform rounds cap the step

    own = OwnEstimator(ProblemShape(6, 5, 2, "gaussian", None), 2, 20, {})
    rng = np.random.default_rng(4)
    for t in range(20):
        X = rng.standard_normal((1, 6, 5))
        props = np.array([[0.7, 0.3]])
        round_ = Round(X, np.array([t % 2]), rng.standard_normal(1), props, None)
        with warnings.catch_warnings():  # the held-out check may find 20 rounds too few
            warnings.simplefilter("ignore")
            own.prepare(round_, "test")()
    assert own.estimator.initialized and not own.warm_start.active
    assert own.estimator.state_dict()["prior_rounds"] == 0  # 1/π-weighted rounds cap nothing
