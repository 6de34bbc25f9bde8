"""Issue 15 cases on the inference side: refusals with clear messages, before any state
changes, for the settings the inference cannot be right in."""

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy
from inference import (
    LinearFormInference,
    ParameterInference,
    ValueInference,
    VectorParameterInference,
    VectorValueInference,
)
from lrbandit_gym import Decision
from lrbandit_gym.input_checks import MIN_PROPENSITY

D = 4


def make_env(**kw):
    return gym.make("MatrixContextBandit-v0", d1=D, d2=D, rank=1, **kw)


def make_vec(mode="vector_entry_point", **kw):
    return gym.make_vec(
        "MatrixContextBandit-v0", num_envs=3, vectorization_mode=mode, d1=D, d2=D, rank=1, **kw
    )


@pytest.mark.parametrize(
    "reward_wrapper",
    [
        gym.wrappers.NormalizeReward,
        lambda e: gym.wrappers.TransformReward(e, lambda r: 2 * r),
        lambda e: gym.wrappers.ClipReward(e, -1.0, 1.0),
    ],
)
@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
def test_inference_refuses_to_sit_above_a_reward_transforming_wrapper(reward_wrapper, cls):
    env = gym.wrappers.RecordEpisodeStatistics(reward_wrapper(make_env()))
    args = ({"T": np.eye(D)},) if cls is ParameterInference else ()
    with pytest.raises(ValueError, match="reward-transforming"):
        cls(env, *args, rank=1)
    # below it is fine: the wrapper sees the bandit's own reward
    wrapped = cls(make_env(), *args, rank=1)
    gym.wrappers.NormalizeReward(wrapped)


@pytest.mark.parametrize("cls", [VectorParameterInference, VectorValueInference])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_wrappers_name_the_native_vector_env(cls, mode):
    venv = make_vec(mode)
    args = ({"T": np.eye(D)},) if cls is VectorParameterInference else ()
    try:
        with pytest.raises(ValueError, match='vectorization_mode="vector_entry_point"'):
            cls(venv, *args, rank=1)
    finally:
        venv.close()


@pytest.mark.parametrize("cls", [VectorParameterInference, VectorValueInference])
def test_vector_wrappers_refuse_next_step_autoreset_with_truncation(cls):
    args = ({"T": np.eye(D)},) if cls is VectorParameterInference else ()
    venv = make_vec(max_episode_steps=5, autoreset_mode="NextStep")
    with pytest.raises(ValueError, match="reward 0"):
        cls(venv, *args, rank=1)
    cls(make_vec(max_episode_steps=5), *args, rank=1)  # same-step autoreset: every step a round
    cls(make_vec(autoreset_mode="NextStep"), *args, rank=1)  # never truncates: nothing to skip


def test_a_vector_run_past_the_old_episode_length_has_no_fake_rounds():
    venv = make_vec()
    venv.reset(seed=0)
    for _ in range(1001):
        _, rewards, _, trunc, _ = venv.step(np.zeros(3, dtype=int))
    assert not trunc.any() and np.all(rewards != 0.0)


def test_single_env_does_not_truncate_before_the_agents_warm_start_ends():
    env = make_env()
    agent = EpsilonGreedy(env, rank=1, warm_start=2000, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(2001):
        d = agent.act(obs)
        obs2, r, term, trunc, _ = env.step(d)
        agent.update(obs, d, r)
        obs = obs2
        assert not term and not trunc
    assert not agent.in_warm_start


@pytest.mark.parametrize("p_chosen", [1e-8, 1e-300, 0.0])
def test_a_chosen_propensity_below_the_floor_is_refused_before_anything_changes(p_chosen):
    env = make_env()
    params = ParameterInference(env, {"T": np.eye(D)}, rank=1, warm_start=30)
    value = ValueInference(params)
    value.reset(seed=0)
    ok = np.full(2, 0.5)
    for t in range(40):
        value.step(Decision(t % 2, ok))
    assert params.core.n_obs == 10
    before = (params.state_dict(), value.state_dict())
    bad = np.array([1.0 - p_chosen, p_chosen])
    with pytest.raises(ValueError, match="MIN_PROPENSITY"):
        value.step(Decision(1, bad))
    after = (params.state_dict(), value.state_dict())
    for b, a in zip(before, after, strict=True):
        assert b.keys() == a.keys() and b["rounds_seen"] == a["rounds_seen"]
        for k, v in b.items():
            if k.startswith(("estimator.", "core.")):
                np.testing.assert_array_equal(v, a[k], err_msg=k)
    core = LinearFormInference(D, D, 1, 2, {"T": np.eye(D)})
    U = np.ones((2, D, 1))
    with pytest.raises(ValueError, match="MIN_PROPENSITY"):
        core.update(U, U, np.eye(D), 1, 0.5, bad)
    assert core.n_obs == 0
    assert MIN_PROPENSITY == 1e-6


FOREIGN = {
    "agents": "from agents.run import Runner  # an unrelated package named agents\n",
    "inference": "def get_model(model_id):  # an unrelated package named inference\n    pass\n",
}


@pytest.mark.parametrize("name", ["agents", "inference"])
@pytest.mark.parametrize("importer", ["inference", "lrbandit_gym.experiments.cli"])
def test_a_foreign_top_level_package_is_named_with_the_fix(tmp_path, name, importer):
    """Another distribution's ``agents`` or ``inference`` ahead of ours on the path: the
    import fails with an error that says what happened and how to fix it.  A foreign
    ``inference`` imported by name is simply theirs; the env and the agents still run."""
    import subprocess
    import sys

    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(FOREIGN[name] if name == "inference" else "VERSION = 1\n")

    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONPATH": str(tmp_path), "PATH": ""},
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )

    if importer == "inference" and name == "inference":
        # The foreign package is what `import inference` finds: none of our code runs there,
        # but the environment and the agents, which never import inference, still work,
        # and the command line (which does) names the fix (the other importer's case).
        proc = run(
            "import inference, gymnasium as gym, lrbandit_gym\n"
            "from agents import EpsilonGreedy\n"
            "assert hasattr(inference, 'get_model') and inference.__file__.startswith("
            f"{str(tmp_path)!r}), inference.__file__\n"
            "env = gym.make('MatrixContextBandit-v0', d1=4, d2=3, rank=1)\n"
            "agent = EpsilonGreedy(env, rank=1, warm_start=20, seed=0)\n"
            "obs, _ = env.reset(seed=0)\n"
            "for _ in range(30):\n"
            "    d = agent.act(obs)\n"
            "    nxt, r, *_ = env.step(d)\n"
            "    agent.update(obs, d, r)\n"
            "    obs = nxt\n"
            "assert agent.estimator.initialized\n"
            "print('agents ran')\n"
        )
        assert proc.returncode == 0, proc.stderr
        assert "agents ran" in proc.stdout
        return
    proc = run(f"import {importer}")
    assert proc.returncode != 0
    assert f"the top-level package {name!r} is not the one lrbandit-gym ships" in proc.stderr
    assert "virtual environment" in proc.stderr


def _copy_state(value):
    if isinstance(value, dict):
        return {k: _copy_state(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy_state(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _assert_same(a, b, where="state"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    else:
        assert a == b, where


def _raiser(error):
    def fail(*args, **kwargs):
        raise error

    return fail


@pytest.mark.parametrize("failure", ["warm-start fit", "SGD step", "core's round"])
def test_a_failure_after_the_inner_step_changes_no_core_and_names_the_round(monkeypatch, failure):
    """Issue 15 case 3, as decided in issue 35: an error after the inner step (the own
    estimator's fit or step, a core's round) leaves every tracker and the estimator as
    they were, with a note naming the round; the environment has stepped, and the next
    step goes on from the context it returned."""
    params = ParameterInference(make_env(), {"T": np.eye(D)}, rank=1, warm_start=20)
    value = ValueInference(params, rank=1)  # shares the inner wrapper's own estimator
    uniform = np.full(2, 0.5)
    value.reset(seed=3)
    rounds = 19 if "fit" in failure else 30  # the next round completes the warm start
    for t in range(rounds):
        value.step(Decision(t % 2, uniform))
    if failure == "warm-start fit":
        error = FloatingPointError("the fit failed")
        store = params.tracker.own.warm_start.store
        monkeypatch.setattr(store, "initial_estimate", _raiser(error))
    elif failure == "SGD step":
        error = FloatingPointError("diverged: reduce step_scale")
        monkeypatch.setattr(params.estimator, "propose_step", _raiser(error))
    else:  # a tracker that stages fails once the parameter core has staged its round
        monkeypatch.setattr(value.tracker, "stages", True)
        monkeypatch.setattr(value.tracker, "stage", _raiser(FloatingPointError("core")))
    before = [_copy_state(w.state_dict()) for w in (params, value)]
    generator = value.unwrapped.np_random.bit_generator.state
    with pytest.raises(FloatingPointError) as err:
        value.step(Decision(1, uniform))
    assert any(f"round {rounds + 1}" in note for note in err.value.__notes__)
    after = [_copy_state(w.state_dict()) for w in (params, value)]
    for state_before, state_after in zip(before, after, strict=True):
        assert not np.array_equal(state_before.pop("obs"), state_after.pop("obs"))
    _assert_same(before, after)
    assert value.unwrapped.np_random.bit_generator.state != generator  # the env stepped
    monkeypatch.undo()
    value.step(Decision(1, uniform))  # the next round goes through, once, everywhere
    assert params.rounds_seen == value.rounds_seen == rounds + 1
    assert params.estimator.initialized


def test_case5_reproducer_a_short_own_warm_start_neither_diverges_nor_goes_nan():
    """Issue 15 case 5: a wrapper's own LowRankSGD at the default step size (d = 5 x 3,
    K = 4, σ = 1, singular values 10, warm start 40) reached factors near 1e177 and NaN
    intervals.  Its warm start is now defined for arms with too few rounds (with a warning)
    and the divergence guard stands behind it: 3000 rounds stay finite and bounded."""
    env = gym.make(
        "MatrixContextBandit-v0",
        d1=5,
        d2=3,
        rank=2,
        n_actions=4,
        noise_std=1.0,
        singular_values=10.0,
    )
    params = ParameterInference(env, {"T": np.eye(5, 3)}, rank=2, warm_start=40)
    value = ValueInference(params)
    value.reset(seed=0)
    uniform = np.full(4, 0.25)
    rng = np.random.default_rng(0)
    with pytest.warns(RuntimeWarning, match="too few rounds"):
        for _ in range(3000):
            value.step(Decision(int(rng.integers(4)), uniform))
    assert params.estimator.singular_values.max() < 100.0
    cis = [params.interval(a, "T") for a in range(4)] + [value.interval()]
    for ci in cis:
        assert np.isfinite([ci.estimate, ci.low, ci.high, ci.standard_error]).all(), ci


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_agents_and_a_batched_decision_name_the_native_vector_env(mode):
    """Issue 15 case 8: Gymnasium's sync/async vector envs of this env."""
    venv = make_vec(mode)
    try:
        with pytest.raises(ValueError, match='vectorization_mode="vector_entry_point"'):
            EpsilonGreedy(venv, rank=1)
        venv.reset(seed=0)
        batched = Decision(np.zeros(3, dtype=int), np.full((3, 2), 0.5))
        if mode == "sync":  # the async env fails inside Gymnasium before reaching ours
            with pytest.raises(ValueError, match="native vector env"):
                venv.step(batched)
        _, rewards, *_ = venv.step(np.zeros(3, dtype=int))  # plain actions work
        assert rewards.shape == (3,)
    finally:
        venv.close()
