"""MatrixContextBandit-v0 and its vector twin: API contracts, laws and bad input."""

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from scipy import stats

import lrbandit_gym
from lrbandit_gym import Decision, MatrixContextBanditEnv

# Gaussian contexts are unbounded by design (i.i.d. N(0, 1) entries), so Gymnasium's passive
# checker's advice to bound the Box does not apply; every other warning fails the test.
ALLOWED_WARNINGS = ("minimum value is -infinity", "maximum value is infinity")


def _check_without_unexpected_warnings(checker, env):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checker(env)
    unexpected = [
        str(w.message) for w in caught if not any(a in str(w.message) for a in ALLOWED_WARNINGS)
    ]
    assert not unexpected, unexpected


def make_vec(num_envs, **kwargs):
    return gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        **kwargs,
    )


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"context": "completion"}, {"flatten": True, "dtype": np.float32}, {"n_actions": 4}],
)
def test_gymnasium_env_checker(kwargs):
    env = gym.make("MatrixContextBandit-v0", d1=8, d2=6, rank=2, **kwargs)
    _check_without_unexpected_warnings(check_env, env.unwrapped)


def test_stable_baselines3_env_checker():
    sb3_checker = pytest.importorskip(
        "stable_baselines3.common.env_checker",
        reason=(
            "needs the sb3 extra (stable-baselines3 and torch): pip install -e '.[sb3]' "
            "(README.md says how to get the CPU build of torch)"
        ),
    )
    env = gym.make("MatrixContextBandit-v0", d1=8, d2=6, rank=2, flatten=True, dtype=np.float32)
    _check_without_unexpected_warnings(sb3_checker.check_env, env.unwrapped)


def test_registration_is_idempotent_and_string_form_works():
    lrbandit_gym.register()
    lrbandit_gym.register()
    assert "MatrixContextBandit-v0" in gym.registry
    assert gym.spec("MatrixContextBandit-v0").max_episode_steps is None  # a bandit has no episodes
    code = (
        "import gymnasium as gym; env = gym.make('lrbandit_gym:MatrixContextBandit-v0', d1=5, "
        "d2=5, rank=1); env.reset(seed=0); print(type(env.unwrapped).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "MatrixContextBanditEnv"


def test_spaces_and_info_contract():
    env = gym.make("MatrixContextBandit-v0", d1=7, d2=5, rank=2, n_actions=3)
    obs, info = env.reset(seed=1)
    assert info == {}
    assert env.observation_space.contains(obs)
    assert env.action_space == gym.spaces.Discrete(3)
    obs, reward, terminated, truncated, info = env.step(2)
    assert isinstance(reward, float) and terminated is False and truncated is False
    assert set(info) == {"expected_rewards", "optimal_action", "regret"}
    assert info["expected_rewards"].shape == (3,)
    assert info["regret"] == pytest.approx(
        info["expected_rewards"].max() - info["expected_rewards"][2]
    )
    assert info["optimal_action"] == int(np.argmax(info["expected_rewards"]))


def test_episode_truncates_at_max_episode_steps_and_never_terminates():
    env = gym.make("MatrixContextBandit-v0", d1=4, d2=4, rank=1, max_episode_steps=5)
    env.reset(seed=0)
    flags = [env.step(0)[2:4] for _ in range(5)]
    assert [t for t, _ in flags] == [False] * 5
    assert [tr for _, tr in flags] == [False] * 4 + [True]


def test_same_seed_same_trajectory_different_seed_different():
    def run(seed):
        env = gym.make("MatrixContextBandit-v0", d1=6, d2=6, rank=2)
        obs, _ = env.reset(seed=seed)
        traj = [obs.copy()]
        for t in range(20):
            obs, r, *_ = env.step(t % 2)
            traj.extend([obs.copy(), np.array([r])])
        return np.concatenate([x.ravel() for x in traj])

    np.testing.assert_array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))


def test_truth_rank_singular_values_and_independence_from_reset():
    s = [3.0, 2.0, 0.5]
    env = MatrixContextBanditEnv(d1=12, d2=9, rank=3, n_actions=2, singular_values=s, truth_seed=7)
    truth = env.true_params.copy()
    for a in range(2):
        sv = np.linalg.svd(truth[a], compute_uv=False)
        np.testing.assert_allclose(sv[:3], s, rtol=1e-12)
        assert np.all(sv[3:] < 1e-12)
    env.reset(seed=1)
    env.step(0)
    env.reset(seed=2)
    np.testing.assert_array_equal(env.true_params, truth)
    same = MatrixContextBanditEnv(d1=12, d2=9, rank=3, singular_values=s, truth_seed=7)
    other = MatrixContextBanditEnv(d1=12, d2=9, rank=3, singular_values=s, truth_seed=8)
    np.testing.assert_array_equal(same.true_params, truth)
    assert not np.allclose(other.true_params, truth)
    with pytest.raises(ValueError):
        env.true_params[0, 0, 0] = 1.0  # read-only truth


def test_per_arm_singular_values_and_user_params():
    s = np.array([[15.0, 15.0], [1.0, 1.0]])
    env = MatrixContextBanditEnv(d1=6, d2=6, rank=2, singular_values=s)
    np.testing.assert_allclose(np.linalg.norm(env.true_params[0], 2), 15.0)
    np.testing.assert_allclose(np.linalg.norm(env.true_params[1], 2), 1.0)
    params = np.zeros((2, 4, 3))
    params[0, 0, 0] = 1.0
    params[1, 1, 2] = -2.0
    env = MatrixContextBanditEnv(d1=4, d2=3, rank=1, params=params)
    np.testing.assert_array_equal(env.true_params, params)
    np.testing.assert_allclose(env.linear_form(np.ones((4, 3))), [1.0, -2.0])


def test_completion_contexts_are_one_hot_and_uniform():
    d1, d2, n = 3, 4, 24000
    env = MatrixContextBanditEnv(d1=d1, d2=d2, rank=1, context="completion")
    obs, _ = env.reset(seed=5)
    counts = np.zeros(d1 * d2)
    for _ in range(n):
        assert obs.sum() == 1.0 and set(np.unique(obs)) <= {0.0, 1.0}
        counts[np.argmax(obs)] += 1
        obs, *_ = env.step(0)
    assert stats.chisquare(counts).pvalue > 0.01
    venv = make_vec(n, d1=d1, d2=d2, rank=1, context="completion")
    vobs, _ = venv.reset(seed=5)
    assert np.all(vobs.reshape(n, -1).sum(axis=1) == 1.0)
    assert (
        stats.chisquare(np.bincount(vobs.reshape(n, -1).argmax(axis=1), minlength=12)).pvalue > 0.01
    )


@pytest.mark.parametrize("context", ["gaussian", "completion"])
def test_expected_reward_is_the_linear_form_of_the_context(context):
    env = MatrixContextBanditEnv(
        d1=6, d2=5, rank=2, n_actions=3, context=context, noise_std=[0.1, 0.2, 0.3]
    )
    obs, _ = env.reset(seed=0)
    residuals = {a: [] for a in range(3)}
    for t in range(6000):
        a = t % 3
        truth = np.einsum("kij,ij->k", env.true_params, obs)
        nxt, reward, _, _, info = env.step(a)
        np.testing.assert_allclose(info["expected_rewards"], truth, atol=1e-12)
        residuals[a].append(reward - truth[a])
        obs = nxt
    for a, sd in enumerate([0.1, 0.2, 0.3]):
        r = np.asarray(residuals[a])
        assert abs(r.mean()) < 4 * sd / np.sqrt(len(r))
        assert r.std() == pytest.approx(sd, rel=0.06)


@pytest.mark.parametrize("noise", lrbandit_gym.NOISES)
def test_noise_laws_have_the_stated_scale(noise):
    env = MatrixContextBanditEnv(d1=2, d2=2, rank=1, noise=noise, noise_std=0.5)
    env.reset(seed=11)
    res = np.array(
        [r - i["expected_rewards"][0] for _, r, _, _, i in (env.step(0) for _ in range(40000))]
    )
    assert abs(res.mean()) < 0.02
    assert res.std() == pytest.approx(0.5, rel=0.05 if noise != "student_t" else 0.15)
    kurt = stats.kurtosis(res)
    if noise in ("laplace", "student_t"):
        assert kurt > 2.0  # heavy-tailed
    else:
        assert kurt < 0.5


def test_in_place_edit_of_observation_does_not_change_reward():
    env = MatrixContextBanditEnv(d1=4, d2=4, rank=1, noise_std=0.0)
    obs, _ = env.reset(seed=0)
    expected = np.einsum("kij,ij->k", env.true_params, obs)
    obs *= 100.0
    _, reward, _, _, _ = env.step(1)
    assert reward == pytest.approx(expected[1])


def test_optimal_value_closed_forms_against_monte_carlo():
    rng = np.random.default_rng(12345)
    for kwargs in [{"n_actions": 2}, {"n_actions": 3}, {"n_actions": 5}]:
        env = MatrixContextBanditEnv(d1=6, d2=5, rank=2, truth_seed=3, **kwargs)
        flat = env.true_params.reshape(env.n_actions, -1)
        z = rng.standard_normal((400_000, flat.shape[1])) @ flat.T
        m = z.max(axis=1)
        assert abs(env.optimal_value - m.mean()) < 4 * m.std() / np.sqrt(len(m))
    env = MatrixContextBanditEnv(d1=6, d2=5, rank=2, context="completion")
    assert env.optimal_value == pytest.approx(env.true_params.max(axis=0).mean(), rel=1e-15)


def test_optimal_value_k2_closed_form_and_duplicate_arms():
    env = MatrixContextBanditEnv(d1=6, d2=5, rank=2)
    diff = env.true_params[1] - env.true_params[0]
    assert env.optimal_value == pytest.approx(np.linalg.norm(diff) / np.sqrt(2 * np.pi), rel=1e-14)
    params = np.stack([env.true_params[0], env.true_params[1], env.true_params[1]])
    env3 = MatrixContextBanditEnv(d1=6, d2=5, rank=2, n_actions=3, params=params)
    assert env3.optimal_value == pytest.approx(env.optimal_value, rel=1e-12)


def test_decision_objects_are_accepted_by_bare_and_wrapped_env():
    env = gym.make("MatrixContextBandit-v0", d1=4, d2=4, rank=1, noise_std=0.0)
    env.reset(seed=0)
    _, r, *_ = env.step(Decision(1, np.array([0.3, 0.7])))
    _, _, _, _, info = env.step(Decision(np.int64(0), np.array([0.5, 0.5])))
    assert np.isfinite(r) and info["regret"] >= 0


def test_vector_env_shapes_seeding_and_infos():
    venv = make_vec(5, d1=4, d2=3, rank=1, n_actions=3)
    assert isinstance(venv, lrbandit_gym.MatrixContextBanditVectorEnv)
    obs, _ = venv.reset(seed=2)
    assert obs.shape == (5, 4, 3) and venv.observation_space.contains(obs)
    obs2, rewards, term, trunc, infos = venv.step(np.array([0, 1, 2, 0, 1]))
    assert rewards.shape == (5,) and infos["expected_rewards"].shape == (5, 3)
    assert not term.any() and not trunc.any()
    again = make_vec(5, d1=4, d2=3, rank=1, n_actions=3)
    np.testing.assert_array_equal(again.reset(seed=2)[0], obs)
    np.testing.assert_array_equal(again.step(np.array([0, 1, 2, 0, 1]))[1], rewards)
    assert not np.array_equal(make_vec(5, d1=4, d2=3, rank=1, n_actions=3).reset(seed=3)[0], obs)
    np.testing.assert_array_equal(
        venv.true_params, MatrixContextBanditEnv(d1=4, d2=3, rank=1, n_actions=3).true_params
    )
    # a batched Decision is accepted
    venv.step(Decision(np.zeros(5, dtype=int), np.full((5, 3), 1 / 3)))


def test_vector_env_never_ends_by_default_and_resets_within_the_step():
    venv = make_vec(2, d1=3, d2=3, rank=1)
    assert venv.max_episode_steps is None and venv.metadata["autoreset_mode"].value == "SameStep"
    venv.reset(seed=0)
    for _ in range(5):
        _, rewards, term, trunc, _ = venv.step(np.array([0, 1]))
        assert not term.any() and not trunc.any() and np.all(rewards != 0)


def test_vector_env_next_step_autoreset():
    venv = make_vec(3, d1=3, d2=3, rank=1, max_episode_steps=2, autoreset_mode="NextStep")
    venv.reset(seed=0)
    acts = np.array([0, 1, 1])
    r1 = venv.step(acts)
    r2 = venv.step(acts)
    r3 = venv.step(acts)
    r4 = venv.step(acts)
    assert not r1[3].any() and r2[3].all() and not r3[3].any()
    np.testing.assert_array_equal(r3[1], 0.0)  # the reset step yields no reward
    assert np.all(r4[1] != 0.0)


def test_vector_env_same_step_autoreset():
    venv = make_vec(2, d1=3, d2=3, rank=1, max_episode_steps=2, autoreset_mode="SameStep")
    venv.reset(seed=0)
    venv.step(np.array([0, 1]))
    obs, _, _, trunc, infos = venv.step(np.array([0, 1]))
    assert trunc.all() and infos["_final_obs"].all()
    assert not np.array_equal(infos["final_obs"], obs)
    _, rewards, _, trunc, _ = venv.step(np.array([0, 1]))
    assert not trunc.any() and np.all(rewards != 0)


@pytest.mark.parametrize("context", ["gaussian", "completion"])
def test_vector_env_agrees_statistically_with_single_envs(context):
    kwargs = dict(d1=5, d2=4, rank=2, n_actions=3, context=context, noise_std=0.3)
    n_trials, n_steps = 400, 10
    venv = make_vec(n_trials, **kwargs)
    venv.reset(seed=0)
    vec_rewards, vec_regret = [], []
    for t in range(n_steps):
        _, r, _, _, info = venv.step(np.full(n_trials, t % 3))
        vec_rewards.append(r)
        vec_regret.append(info["regret"])
    single_rewards, single_regret = [], []
    for trial in range(n_trials):
        env = MatrixContextBanditEnv(**kwargs)
        env.reset(seed=10_000 + trial)
        rs, gs = [], []
        for t in range(n_steps):
            _, r, _, _, info = env.step(t % 3)
            rs.append(r)
            gs.append(info["regret"])
        single_rewards.append(rs)
        single_regret.append(gs)
    v = np.asarray(vec_rewards).T
    s = np.asarray(single_rewards)
    for arm in range(3):
        cols = [t for t in range(n_steps) if t % 3 == arm]
        assert stats.ks_2samp(v[:, cols].ravel(), s[:, cols].ravel()).pvalue > 0.001
    assert stats.ks_2samp(np.ravel(vec_regret), np.ravel(single_regret)).pvalue > 0.001


BAD_ARGUMENTS = [
    ({"rank": 6}, "rank"),
    ({"rank": 0}, "rank"),
    ({"d1": 0}, "d1"),
    ({"d2": -3}, "d2"),
    ({"d1": 2.5}, "d1"),
    ({"n_actions": 1}, "n_actions"),
    ({"noise_std": -0.1}, "noise_std"),
    ({"noise_std": float("nan")}, "noise_std"),
    ({"noise_std": float("inf")}, "noise_std"),
    ({"noise_std": [0.1, 0.1, 0.1]}, "noise_std"),
    ({"context": "sparse"}, "context"),
    ({"noise": "cauchy"}, "noise"),
    ({"singular_values": [1.0, 2.0]}, "singular_values"),
    ({"singular_values": -1.0}, "singular_values"),
    ({"singular_values": np.ones((3, 3))}, "singular_values"),
    ({"params": np.zeros((2, 5, 4))}, "params"),
    ({"params": np.full((2, 5, 5), np.nan)}, "params"),
    ({"params": np.stack([np.eye(5), np.eye(5)])}, "params"),
    ({"dtype": np.int32}, "dtype"),
]


@pytest.mark.parametrize("kwargs,name", BAD_ARGUMENTS)
def test_bad_arguments_raise_value_error_naming_them(kwargs, name):
    kwargs = {"d1": 5, "d2": 5, "rank": 3, **kwargs}
    with pytest.raises(ValueError, match=name):
        MatrixContextBanditEnv(**kwargs)
    with pytest.raises(ValueError, match=name):
        make_vec(2, **kwargs)


@pytest.mark.parametrize("action", [2, -1, 1.0, "1", None, True])
def test_action_outside_the_space_raises(action):
    env = MatrixContextBanditEnv(d1=3, d2=3, rank=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(action)


def test_vector_env_bad_actions_and_seeds():
    venv = make_vec(3, d1=3, d2=3, rank=1)
    venv.reset(seed=0)
    for bad in [np.array([0, 1, 2]), np.array([0, 1]), np.array([0.0, 1.0, 1.0])]:
        with pytest.raises(ValueError, match="actions"):
            venv.step(bad)
    with pytest.raises(ValueError, match="seed"):
        venv.reset(seed=[1, 2])
    venv.reset(seed=[1, 2, 3])


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        MatrixContextBanditEnv(d1=3, d2=3, rank=1).step(0)
