"""design_variance="all-rounds": the design part of the standard error from every round."""

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401  (registers the environment)
from agents import EpsilonGreedy, play
from inference import LinearFormInference, ParameterInference, analyze, build_stack, stack_layers
from inference.cores.design_variance import all_rounds_terms, all_rounds_terms_reference
from inference.cores.exploration_only import ExplorationOnlyInference
from lrbandit_gym import engine
from lrbandit_gym.experiments.cli import main
from lrbandit_gym.experiments.controls import NoIPW
from lrbandit_gym.experiments.validate.run import SettingError, validate
from lrbandit_gym.logs import RecordRounds, make_log, save_log
from lrbandit_gym.onehot import OneHotContexts

PROJECTIONS = ("tangent", "paper", "none")


@pytest.mark.parametrize("projection", PROJECTIONS)
def test_the_terms_are_the_papers_formula_for_dense_and_index_contexts(projection):
    rng = np.random.default_rng(0)
    B, K, d1, d2, r = 4, 3, 7, 5, 2
    U, V = rng.normal(size=(B, K, d1, r)), rng.normal(size=(B, K, d2, r))
    T = rng.normal(size=(2, d1, d2))
    P = rng.dirichlet(np.ones(K), size=B)
    X = rng.normal(size=(B, d1, d2))
    fast = all_rounds_terms(U, V, X, T, 1 / P, 3.0, projection)
    M = np.matmul(U, V.swapaxes(-1, -2))
    ref = [all_rounds_terms_reference(X[b], M[b], T, P[b], r, 3.0, projection) for b in range(B)]
    np.testing.assert_allclose(fast, np.stack(ref), rtol=1e-12)
    rows, cols = rng.integers(d1, size=B), rng.integers(d2, size=B)
    E = np.zeros((B, d1, d2))
    E[np.arange(B), rows, cols] = 1.0
    index = all_rounds_terms(U, V, OneHotContexts(rows, cols, d1, d2), T, 1 / P, 35.0, projection)
    np.testing.assert_allclose(
        index, all_rounds_terms(U, V, E, T, 1 / P, 35.0, projection), rtol=1e-12
    )


def _play(core, rng, rounds, *, moving=True, probs=None, reference=True):
    """Feed ``core`` rounds with Gaussian contexts; return the reference all-rounds sum
    (zeros without ``reference``)."""
    K, d1, d2, r = core.n_actions, core.d1, core.d2, core.rank
    U, V = rng.normal(size=(K, d1, r)), rng.normal(size=(K, d2, r))
    T = np.stack([core.state.T[k] for k in range(len(core.target_names))])
    ref = np.zeros((K, len(T)))
    for _ in range(rounds):
        X = rng.normal(size=(d1, d2))
        p = rng.dirichlet(np.ones(K)) * 0.7 + 0.3 / K if probs is None else probs
        a = int(rng.choice(K, p=p))
        if reference:
            ref += all_rounds_terms_reference(
                X, U @ V.swapaxes(-1, -2), T, p, r, 1.0, core.projection
            )
        core.update(U, V, X, action=a, reward=float(rng.normal()), propensities=p)
        if moving:  # the pulled arm's estimate moves, as after an SGD step
            U, V = U.copy(), V.copy()
            U[a] += 0.1 * rng.normal(size=(d1, r))
            V[a] += 0.1 * rng.normal(size=(d2, r))
    return ref


@pytest.mark.parametrize(
    ("name", "projection"), [("numba", "tangent"), ("numpy", "tangent"), ("numpy", "none")]
)
def test_the_core_adds_every_rounds_terms_and_changes_nothing_else(name, projection):
    targets = {"T1": np.eye(6, 5), "T2": np.arange(30.0).reshape(6, 5) / 30}
    with engine.use(name):
        cores = {
            dv: LinearFormInference(6, 5, 2, 3, targets, design_variance=dv, projection=projection)
            for dv in ("pulled", "all-rounds")
        }
        refs = {dv: _play(core, np.random.default_rng(1), 60) for dv, core in cores.items()}
    pulled, every = cores["pulled"].state, cores["all-rounds"].state
    np.testing.assert_allclose(every.S2_sum[0], refs["all-rounds"], rtol=1e-10)
    assert not np.allclose(every.S2_sum, pulled.S2_sum)
    np.testing.assert_array_equal(every.sigma_sum, pulled.sigma_sum)
    for arm in range(3):
        np.testing.assert_array_equal(
            cores["all-rounds"].debiased_mean(arm), cores["pulled"].debiased_mean(arm)
        )
    se = cores["all-rounds"].standard_errors()
    n = cores["all-rounds"].n_obs
    np.testing.assert_allclose(
        se, np.sqrt(every.sigma_sum[0][:, None] / n * refs["all-rounds"] / n / n)
    )


def test_the_pulled_arms_term_is_eq_14s_times_its_propensity():
    """The same ``G_t``: for the pulled arm, ``c²<G, X>²/π`` is eq. (14)'s ``c²<G, X>²/π²``
    times ``π``."""
    targets = {"T": np.eye(5, 4)}
    for projection in ("tangent", "paper"):
        pulled = LinearFormInference(5, 4, 2, 2, targets, projection=projection)
        rng = np.random.default_rng(3)
        U, V = rng.normal(size=(2, 5, 2)), rng.normal(size=(2, 4, 2))
        X, p = rng.normal(size=(5, 4)), np.array([0.3, 0.7])
        pulled.update(U, V, X, action=1, reward=0.5, propensities=p)
        every = all_rounds_terms(
            U[None], V[None], X[None], pulled.state.T, 1 / p[None], 1.0, projection
        )
        assert pulled.state.S2_sum[0, 1, 0] * p[1] == pytest.approx(every[0, 1, 0], rel=1e-12)


def test_both_design_variances_estimate_the_same_mean():
    """Fixed estimates and propensities (0.2, 0.8), 12000 rounds over 40 trials: the
    all-rounds and the pulled sums have the same mean (``c‖G‖²/π_i``); without its ``1/π``
    the all-rounds one would be 5 and 1.25 times too small, with ``1/π²`` as many times too
    large."""
    B, K, d1, d2, r = 40, 2, 6, 5, 2
    rng = np.random.default_rng(7)
    U, V = rng.normal(size=(B, K, d1, r)), rng.normal(size=(B, K, d2, r))
    U[:], V[:] = U[0], V[0]  # one estimate, so one ‖G‖² per arm
    probs = np.broadcast_to([0.2, 0.8], (B, K))
    cores = [
        LinearFormInference(d1, d2, r, K, {"T": np.eye(d1, d2)}, n_trials=B, design_variance=dv)
        for dv in ("pulled", "all-rounds")
    ]
    for _ in range(300):
        X = rng.normal(size=(B, d1, d2))
        actions = (rng.random(B) < 0.8).astype(int)
        rewards = rng.normal(size=B)
        for core in cores:
            core.update(U, V, X, action=actions, reward=rewards, propensities=probs)
    pulled, every = (c.state.S2_sum[:, :, 0].sum(axis=0) for c in cores)
    np.testing.assert_allclose(every / pulled, 1.0, atol=0.15)


def test_laws_and_cores_it_cannot_serve_are_refused_at_construction():
    targets = {"T": np.eye(4, 3)}
    with pytest.raises(ValueError, match="design_variance='all-rounds' supports the laws"):
        LinearFormInference(
            4, 3, 1, 2, targets, context_law="estimated", design_variance="all-rounds"
        )
    for cls in (ExplorationOnlyInference, NoIPW):
        with pytest.raises(ValueError, match="design_variance='all-rounds' weighs every round"):
            cls(4, 3, 1, 2, targets, design_variance="all-rounds")
    with pytest.raises(ValueError, match="design_variance"):
        LinearFormInference(4, 3, 1, 2, targets, design_variance="every")


def test_a_zero_propensity_is_refused_before_any_change():
    core = LinearFormInference(4, 3, 1, 2, {"T": np.eye(4, 3)}, design_variance="all-rounds")
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(2, 4, 1)), rng.normal(size=(2, 3, 1))
    core.update(U, V, rng.normal(size=(4, 3)), action=0, reward=0.1, propensities=[0.5, 0.5])
    before = {k: v.copy() for k, v in vars(core.state).items() if isinstance(v, np.ndarray)}
    with pytest.raises(ValueError, match="arm 1's is 0"):
        core.update(U, V, rng.normal(size=(4, 3)), action=0, reward=0.1, propensities=[1.0, 0.0])
    assert core.n_obs == 1
    for k, v in before.items():
        np.testing.assert_array_equal(getattr(core.state, k), v)


def test_a_design_term_that_overflows_is_refused_before_any_change():
    core = LinearFormInference(4, 3, 1, 2, {"T": np.eye(4, 3)}, design_variance="all-rounds")
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(2, 4, 1)), rng.normal(size=(2, 3, 1))
    X = rng.normal(size=(4, 3)) * 1e60  # admissible; c²<G, X>²/π = 1e120/1e-200 is not
    with pytest.raises(ValueError, match="overflows the running sum of S\\^2"):
        core.update(U, V, X, action=0, reward=0.1, propensities=[1 - 1e-200, 1e-200])
    assert core.n_obs == 0 and not core.state.S2_sum.any()


def test_the_wrappers_and_the_builder_pass_it_to_the_core():
    env = gym.make("MatrixContextBandit-v0", d1=5, d2=5, rank=1, n_actions=2, truth_seed=0)
    agent = EpsilonGreedy(env, rank=1, warm_start=100, seed=0)
    T = {"T": np.eye(5)}
    wrapped = ParameterInference(env, T, estimator=agent.estimator, design_variance="all-rounds")
    assert wrapped.core.design_variance == "all-rounds"
    stack = build_stack(
        gym.make("MatrixContextBandit-v0", d1=5, d2=5, rank=1, n_actions=2, truth_seed=0),
        T,
        value=False,
        estimator=agent.estimator,
        design_variance="all-rounds",
    )
    assert stack_layers(stack)["parameters"].core.design_variance == "all-rounds"
    play(wrapped, agent, 300, seed=0)
    assert np.isfinite(wrapped.interval(0, "T").standard_error)


def test_validate_takes_it_and_names_a_wrong_value():
    with pytest.raises(SettingError, match="design_variance"):
        validate(
            {"d1": 5, "d2": 4, "rank": 1}, n=(50,), trials=4, design_variance="x", progress=False
        )
    result = validate(
        {"d1": 5, "d2": 4, "rank": 1, "context": "completion"},
        targets="entry",
        n=(200,),
        trials=20,
        design_variance="all-rounds",
        progress=False,
    )
    assert np.isfinite(result.arrays["standard_error"]).all()


@pytest.mark.parametrize(
    ("context", "observation"), [("gaussian", "matrix"), ("completion", "index")]
)
def test_a_log_replayed_by_analyze_gives_the_live_intervals(tmp_path, context, observation):
    base = gym.make(
        "MatrixContextBandit-v0", d1=6, d2=5, rank=1, context=context, observation=observation
    )
    rec = RecordRounds(base)
    T = {"T": np.eye(6, 5)}
    live = ParameterInference(rec, T, 1, warm_start=200, design_variance="all-rounds")
    agent = EpsilonGreedy(base, rank=1, epsilon=0.3, warm_start=100, seed=0)
    play(live, agent, 700, seed=0)
    path = rec.save(tmp_path / "log.npz")
    replayed = analyze(path, T, rank=1, warm_start=200, value=False, design_variance="all-rounds")
    pulled = analyze(path, T, rank=1, warm_start=200, value=False)
    for (label, a), (_, b), (_, c) in zip(
        live.results(), replayed.results, pulled.results, strict=True
    ):
        np.testing.assert_allclose(b.standard_error, a.standard_error, rtol=1e-10, err_msg=label)
        assert b.estimate == c.estimate and b.standard_error != c.standard_error, label


def test_analyze_needs_the_pmf_and_the_cli_names_the_option(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 400
    actions = rng.integers(2, size=n)
    log = make_log(
        rng.normal(size=(n, 4, 3)),
        actions,
        rng.normal(size=n),
        propensities=np.full(n, 0.5),
        n_actions=2,
    )
    with pytest.raises(ValueError, match="log the 'pmf' column"):
        analyze(log, {"T": np.eye(4, 3)}, rank=1, warm_start=100, value=False,
                design_variance="all-rounds")  # fmt: skip
    path = save_log(log, tmp_path / "log.npz")
    code = None
    try:
        code = main(["analyze", str(path), "--rank", "1", "--warm-start", "100", "--no-value",
                     "--target", "T=eye", "--design-variance", "all-rounds"])  # fmt: skip
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert "argument --design-variance" in capsys.readouterr().err


def test_a_state_loads_only_into_a_core_of_the_same_design_variance():
    targets = {"T": np.eye(4, 3)}
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(2, 4, 1)), rng.normal(size=(2, 3, 1))
    every = LinearFormInference(4, 3, 1, 2, targets, design_variance="all-rounds")
    every.update(U, V, rng.normal(size=(4, 3)), action=0, reward=0.1, propensities=[0.5, 0.5])
    state = every.state_dict()
    pulled = LinearFormInference(4, 3, 1, 2, targets)
    with pytest.raises(ValueError, match="design_variance"):
        pulled.load_state_dict(state)
    assert pulled.n_obs == 0
    again = LinearFormInference(4, 3, 1, 2, targets, design_variance="all-rounds")
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.state.S2_sum, every.state.S2_sum)


def test_validate_names_the_option_a_law_cannot_take(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--grid", "scaled", "--trials", "4", "--design-variance", "all-rounds"])
    assert exc.value.code == 2
    assert "argument --design-variance: design_variance='all-rounds' supports" in (
        capsys.readouterr().err
    )
