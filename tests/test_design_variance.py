"""The design part of the standard error (docs/method.md §13): eq. (14) ("pulled"), every
round's term ("all-rounds") and the default mix of the two by the arm's propensity ("auto")."""

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401  (registers the environment)
from agents import Decision, EpsilonGreedy, Softmax, play
from inference import LinearFormInference, ParameterInference, analyze, build_stack, stack_layers
from inference.cores.design_variance import (
    DESIGN_FLOOR,
    all_arm_terms,
    design_terms,
    design_terms_reference,
)
from inference.cores.exploration_only import ExplorationOnlyInference
from inference.cores.tangent_space import TargetTriplets
from lrbandit_gym import engine
from lrbandit_gym.experiments.cli import main
from lrbandit_gym.experiments.controls import NoIPW
from lrbandit_gym.experiments.validate.run import SettingError, validate
from lrbandit_gym.logs import RecordRounds, make_log, save_log
from lrbandit_gym.onehot import OneHotContexts

PROJECTIONS = ("tangent", "paper")


@pytest.mark.parametrize("floor", [0.0, 0.3])
@pytest.mark.parametrize("projection", PROJECTIONS)
def test_the_terms_are_the_papers_formula_for_dense_and_index_contexts(projection, floor):
    rng = np.random.default_rng(0)
    B, K, d1, d2, r, c = 6, 3, 7, 5, 2, 3.0
    U, V = rng.normal(size=(B, K, d1, r)), rng.normal(size=(B, K, d2, r))
    T = rng.normal(size=(2, d1, d2))
    P = rng.dirichlet(np.ones(K), size=B)  # some arms below the floor, some above
    a = rng.integers(K, size=B)
    kappa = 2.0 if projection == "paper" else 1.0
    triplets = TargetTriplets.from_targets(T)
    M = np.matmul(U, V.swapaxes(-1, -2))
    X = rng.normal(size=(B, d1, d2))
    rows, cols = rng.integers(d1, size=B), rng.integers(d2, size=B)
    E = np.zeros((B, d1, d2))
    E[np.arange(B), rows, cols] = 1.0
    for contexts, dense in ((X, X), (OneHotContexts(rows, cols, d1, d2), E)):
        g = all_arm_terms(U, V, contexts, triplets, kappa)
        fast = design_terms(g, 1 / P, floor, a, 1 / P[np.arange(B), a], c)
        ref = [
            design_terms_reference(dense[b], M[b], T, P[b], a[b], r, c, projection, floor)
            for b in range(B)
        ]
        np.testing.assert_allclose(fast, np.stack(ref), rtol=1e-10)
    assert (P < 0.3).any() and (P >= 0.3).any()


@pytest.mark.parametrize("floor", [0.0, 0.3])
@pytest.mark.parametrize("projection", PROJECTIONS)
def test_the_compiled_design_kernels_are_the_papers_formula(projection, floor):
    """The kernels the compiled round calls, on balanced factors (orthogonal columns) with
    one arm's factors replaced by the round's change, against the plain-numpy reference;
    pulled arms lie below the floor in some trials, unpulled arms in others."""
    pytest.importorskip("numba")
    from inference.cores import _kernels

    rng = np.random.default_rng(1)
    B, K, d1, d2, r, c = 8, 3, 7, 5, 2, 3.0
    Q1 = np.linalg.qr(rng.normal(size=(B, K, d1, r)))[0]
    Q2 = np.linalg.qr(rng.normal(size=(B, K, d2, r)))[0]
    root = np.sqrt(rng.uniform(0.5, 3.0, size=(B, K, 1, r)))
    U, V = Q1 * root, Q2 * root  # balanced: U = Ũ Σ^½, V = Ṽ Σ^½
    held_U, held_V = U.copy(), V.copy()
    held_U[2, 1], held_V[2, 1] = rng.normal(size=(d1, r)), rng.normal(size=(d2, r))
    bi, ki = np.array([2]), np.array([1])  # the change restores trial 2, arm 1's factors
    T = rng.normal(size=(2, d1, d2))
    P = rng.dirichlet(np.ones(K), size=B)
    a = rng.integers(K, size=B)
    kappa = 2.0 if projection == "paper" else 1.0
    tr = TargetTriplets.from_targets(T)
    M = np.matmul(U, V.swapaxes(-1, -2))
    X = rng.normal(size=(B, d1, d2))
    rows, cols = rng.integers(d1, size=B), rng.integers(d2, size=B)
    E = np.zeros((B, d1, d2))
    E[np.arange(B), rows, cols] = 1.0
    factors = 1 / P
    weight = factors[np.arange(B), a]
    S2 = rng.uniform(size=(B, K, 2))
    for one_hot in (False, True):
        contexts = OneHotContexts(rows, cols, d1, d2) if one_hot else X
        g = all_arm_terms(U, V, contexts, tr, kappa)[np.arange(B), a]  # the pulled arm's
        out = np.empty_like(S2)
        if one_hot:
            bad = _kernels.one_hot_design(
                rows, cols, held_U, held_V, bi, ki, U[2, 1][None], V[2, 1][None], factors,
                floor, a, weight, g, c, kappa, tr.Xs, tr.Ys, tr.x_rows, tr.y_rows,
                tr.Xs_sub, tr.Ys_sub, tr.Sw, S2, out,
            )  # fmt: skip
        else:
            bad = _kernels.dense_design(
                X, held_U, held_V, bi, ki, U[2, 1][None], V[2, 1][None], factors, floor, a,
                weight, g, c, kappa, tr.x_rows, tr.y_rows, tr.Xs_sub, tr.Ys_sub, tr.Sw, S2,
                out,
            )  # fmt: skip
        assert bad == -1
        dense = E if one_hot else X
        ref = [
            design_terms_reference(dense[b], M[b], T, P[b], a[b], r, c, projection, floor)
            for b in range(B)
        ]
        np.testing.assert_allclose(out, S2 + np.stack(ref), rtol=1e-10)
    pulled = P[np.arange(B), a]
    if floor > 0:  # both sides of the floor, for pulled and unpulled arms
        assert (pulled < floor).any() and (pulled >= floor).any()
        assert ((P < floor) & (np.arange(K) != a[:, None])).any()


def _play(core, rng, rounds, *, moving=True, probs=None, reference=True, floor=0.0):
    """Feed ``core`` rounds with Gaussian contexts; return the reference design sum
    (zeros without ``reference``)."""
    K, d1, d2, r = core.n_actions, core.d1, core.d2, core.rank
    U, V = rng.normal(size=(K, d1, r)), rng.normal(size=(K, d2, r))
    T = np.stack([core.state.T[k] for k in range(len(core.target_names))])
    ref = np.zeros((K, len(T)))
    for _ in range(rounds):
        X = rng.normal(size=(d1, d2))
        p = rng.dirichlet(np.ones(K) * 0.3) * 0.9 + 0.1 / K if probs is None else probs
        a = int(rng.choice(K, p=p))
        if reference:
            M = U @ V.swapaxes(-1, -2)
            ref += design_terms_reference(X, M, T, p, a, r, 1.0, core.projection, floor)
        core.update(U, V, X, action=a, reward=float(rng.normal()), propensities=p)
        if moving:  # the pulled arm's estimate moves, as after an SGD step
            U, V = U.copy(), V.copy()
            U[a] += 0.1 * rng.normal(size=(d1, r))
            V[a] += 0.1 * rng.normal(size=(d2, r))
    return ref


@pytest.mark.parametrize("projection", ["tangent", "none"])
@pytest.mark.parametrize(("dv", "floor"), [("all-rounds", 0.0), ("auto", DESIGN_FLOOR)])
def test_the_core_adds_every_rounds_terms_and_changes_nothing_else(dv, floor, projection):
    targets = {"T1": np.eye(6, 5), "T2": np.arange(30.0).reshape(6, 5) / 30}
    cores = {
        v: LinearFormInference(6, 5, 2, 3, targets, design_variance=v, projection=projection)
        for v in ("pulled", dv)
    }
    refs = {v: _play(core, np.random.default_rng(1), 80, floor=floor) for v, core in cores.items()}
    pulled, every = cores["pulled"].state, cores[dv].state
    np.testing.assert_allclose(every.S2_sum[0], refs[dv], rtol=1e-10)
    assert not np.allclose(every.S2_sum, pulled.S2_sum)
    np.testing.assert_array_equal(every.sigma_sum, pulled.sigma_sum)
    for arm in range(3):
        np.testing.assert_array_equal(
            cores[dv].debiased_mean(arm), cores["pulled"].debiased_mean(arm)
        )
    se = cores[dv].standard_errors(remainder=False)  # eq. (15)'s term, which the design sets
    n = cores[dv].n_obs
    np.testing.assert_allclose(se, np.sqrt(every.sigma_sum[0][:, None] / n * refs[dv] / n / n))


def test_below_the_floor_an_arm_keeps_eq_14s_terms_and_above_it_every_rounds():
    """Propensities (0.005, 0.995): arm 0 lies below ``DESIGN_FLOOR`` in every round, so
    "auto" sums eq. (14)'s terms for it (those of "pulled", exactly) and every round's for
    arm 1 (those of "all-rounds")."""
    targets = {"T": np.eye(6, 5)}
    probs = np.array([0.005, 0.995])
    sums = {}
    for dv in ("pulled", "all-rounds", "auto"):
        core = LinearFormInference(6, 5, 2, 2, targets, design_variance=dv)
        _play(core, np.random.default_rng(4), 400, probs=probs, reference=False)
        sums[dv] = core.state.S2_sum[0]
        assert core.n_pulls[0] > 0  # the rare arm was pulled: its eq. (14) terms count
    np.testing.assert_array_equal(sums["auto"][0], sums["pulled"][0])
    np.testing.assert_allclose(sums["auto"][1], sums["all-rounds"][1], rtol=1e-12)
    assert not np.allclose(sums["all-rounds"][0], sums["auto"][0], rtol=1e-3)


def _shared_run(name, dv, context, policy):
    """Intervals' ``S²`` sums of a wrapper sharing an agent's estimator (the balanced
    factors of the compiled path) under engine ``name``."""
    with engine.use(name):
        env = gym.make(
            "MatrixContextBandit-v0", d1=8, d2=6, rank=2, n_actions=3, context=context,
            max_episode_steps=None,
        )  # fmt: skip
        if policy == "softmax":  # propensities far below the floor in some contexts
            agent = Softmax(env, seed=0, warm_start=200, temperature=0.2)
        else:
            agent = EpsilonGreedy(env, seed=0, warm_start=200)
        T = {"T": np.eye(8, 6), "U": np.outer(np.arange(8), np.ones(6)) / 10}
        wrapped = ParameterInference(env, T, estimator=agent.estimator, design_variance=dv)
        play(wrapped, agent, 500, seed=1)
        return wrapped.core.state.S2_sum.copy()


@pytest.mark.parametrize("context", ["gaussian", "completion"])
@pytest.mark.parametrize("policy", ["epsilon-greedy", "softmax"])
def test_the_compiled_kernels_agree_with_numpy(context, policy):
    dv = "auto" if context == "gaussian" else "all-rounds"  # completion's "auto" is eq. (14)
    numba = _shared_run("numba", dv, context, policy)
    numpy = _shared_run("numpy", dv, context, policy)
    np.testing.assert_allclose(numba, numpy, rtol=1e-10)
    assert not np.allclose(numpy, _shared_run("numpy", "pulled", context, policy), rtol=1e-3)


def test_the_pulled_arms_term_is_eq_14s_times_its_propensity():
    """The same ``G_t``: for the pulled arm, ``c²<G, X>²/π`` is eq. (14)'s ``c²<G, X>²/π²``
    times ``π``."""
    targets = {"T": np.eye(5, 4)}
    for projection, kappa in (("tangent", 1.0), ("paper", 2.0)):
        pulled = LinearFormInference(
            5, 4, 2, 2, targets, projection=projection, design_variance="pulled"
        )
        rng = np.random.default_rng(3)
        U, V = rng.normal(size=(2, 5, 2)), rng.normal(size=(2, 4, 2))
        X, p = rng.normal(size=(5, 4)), np.array([0.3, 0.7])
        pulled.update(U, V, X, action=1, reward=0.5, propensities=p)
        g = all_arm_terms(U[None], V[None], X[None], pulled.state.triplets, kappa)
        every = design_terms(g, 1 / p[None], 0.0, np.array([1]), np.array([1 / p[1]]), 1.0)
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


def test_laws_and_cores_it_cannot_serve_refuse_all_rounds_and_take_eq_14_for_auto():
    targets = {"T": np.eye(4, 3)}
    with pytest.raises(ValueError, match="design_variance='all-rounds' supports the laws"):
        LinearFormInference(
            4, 3, 1, 2, targets, context_law="estimated", design_variance="all-rounds"
        )
    for cls in (ExplorationOnlyInference, NoIPW):
        with pytest.raises(ValueError, match="design_variance='all-rounds' weighs every round"):
            cls(4, 3, 1, 2, targets, design_variance="all-rounds")
        assert cls(4, 3, 1, 2, targets).design_floor is None  # "auto": eq. (14)
    assert LinearFormInference(4, 3, 1, 2, targets, context_law="estimated").design_floor is None
    assert LinearFormInference(4, 3, 1, 2, targets).design_floor == DESIGN_FLOOR
    # completion contexts: "auto" is eq. (14); "all-rounds" is there when asked for
    completion = {"context": "completion"}
    assert LinearFormInference(4, 3, 1, 2, targets, **completion).design_floor is None
    every = LinearFormInference(4, 3, 1, 2, targets, design_variance="all-rounds", **completion)
    assert every.design_floor == 0
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
    auto = LinearFormInference(4, 3, 1, 2, {"T": np.eye(4, 3)})  # below the floor: eq. (14)
    auto.update(U, V, rng.normal(size=(4, 3)), action=0, reward=0.1, propensities=[1.0, 0.0])
    assert auto.state.S2_sum[0, 1, 0] == 0 and auto.state.S2_sum[0, 0, 0] > 0


def test_a_design_term_that_overflows_is_refused_before_any_change():
    core = LinearFormInference(4, 3, 1, 2, {"T": np.eye(4, 3)}, design_variance="all-rounds")
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(2, 4, 1)), rng.normal(size=(2, 3, 1))
    X = rng.normal(size=(4, 3)) * 1e60  # admissible; c²<G, X>²/π = 1e120/1e-200 is not
    with pytest.raises(ValueError, match="overflows the running sum of S\\^2"):
        core.update(U, V, X, action=0, reward=0.1, propensities=[1 - 1e-200, 1e-200])
    assert core.n_obs == 0 and not core.state.S2_sum.any()


@pytest.mark.parametrize("name", ["numba", "numpy"])
def test_a_wrapper_refuses_an_overflowing_design_term_before_any_change(name):
    """Through a wrapper sharing an agent's estimator (the compiled kernels under numba): an
    unpulled arm of propensity 1e-307 makes its all-rounds term ``c²<G, X>²/π`` infinite
    (``<G, X>`` about 1e3)."""
    with engine.use(name):
        env = gym.make("MatrixContextBandit-v0", d1=5, d2=4, rank=1, max_episode_steps=None)
        agent = EpsilonGreedy(env, rank=1, warm_start=100, seed=0)
        T = {"T": 1e3 * np.eye(5, 4)}
        wrapped = ParameterInference(
            env, T, estimator=agent.estimator, design_variance="all-rounds"
        )
        play(wrapped, agent, 150, seed=0)
        core = wrapped.core
        before = core.state.S2_sum.copy(), core.n_obs
        with pytest.raises(ValueError, match="overflows the running sum of S\\^2"):
            wrapped.step(Decision(0, np.array([1.0, 1e-307])))
        np.testing.assert_array_equal(core.state.S2_sum, before[0])
        assert core.n_obs == before[1]


def test_the_wrappers_and_the_builder_pass_it_to_the_core():
    env = gym.make("MatrixContextBandit-v0", d1=5, d2=5, rank=1, n_actions=2, truth_seed=0)
    agent = EpsilonGreedy(env, rank=1, warm_start=100, seed=0)
    T = {"T": np.eye(5)}
    default = ParameterInference(env, T, estimator=agent.estimator)
    assert default.core.design_variance == "auto" and default.core.design_floor == DESIGN_FLOOR
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
    live = ParameterInference(rec, T, 1, warm_start=200)  # design_variance="auto"
    agent = EpsilonGreedy(base, rank=1, epsilon=0.3, warm_start=100, seed=0)
    play(live, agent, 700, seed=0)
    path = rec.save(tmp_path / "log.npz")
    replayed = analyze(path, T, rank=1, warm_start=200, value=False)
    pulled = analyze(path, T, rank=1, warm_start=200, value=False, design_variance="pulled")
    for (label, a), (_, b), (_, c) in zip(
        live.results(), replayed.results, pulled.results, strict=True
    ):
        np.testing.assert_allclose(b.standard_error, a.standard_error, rtol=1e-10, err_msg=label)
        assert b.estimate == c.estimate, label
        # "auto" is eq. (14) on completion contexts, every round's term on dense ones
        assert (b.standard_error == c.standard_error) == (context == "completion"), label


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
    # "auto" has no other arm's propensity to read: eq. (14), as "pulled"
    auto, pulled = (
        analyze(log, {"T": np.eye(4, 3)}, rank=1, warm_start=100, value=False, design_variance=dv)
        for dv in ("auto", "pulled")
    )
    for (label, a), (_, b) in zip(auto.results, pulled.results, strict=True):
        assert a.standard_error == b.standard_error, label
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
    pulled = LinearFormInference(4, 3, 1, 2, targets)  # "auto"
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
