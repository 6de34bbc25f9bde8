"""MatrixClassification-v0 (lrbandit_gym.digits) and the digits study."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import lrbandit_gym  # noqa: F401
from lrbandit_gym.digits import MatrixClassificationBandit, digits_arrays, digits_bandit

pytest.importorskip("sklearn", reason="the digits data set needs the data extra")


def _toy(n=30, K=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3, 2)), rng.integers(0, K, n)


def test_registered_and_passes_gymnasiums_checker():
    x, y = _toy()
    env = gym.make("MatrixClassification-v0", contexts=x, labels=y)
    check_env(env.unwrapped, skip_render_check=True)
    assert (env.unwrapped.d1, env.unwrapped.d2, env.unwrapped.n_actions) == (3, 2, 4)
    assert env.unwrapped.context == "gaussian"  # the agents' name for dense contexts


def test_rewards_are_the_labels_and_info_the_oracle():
    x, y = _toy()
    env = MatrixClassificationBandit(x, y)
    obs, info = env.reset(seed=1)
    rng = np.random.default_rng(2)
    for _ in range(50):
        i = info["sample"]
        np.testing.assert_array_equal(obs, x[i])
        a = int(rng.integers(4))
        obs, reward, _, _, info_step = env.step(a)
        assert reward == float(a == y[i])
        np.testing.assert_array_equal(info_step["expected_rewards"], np.eye(4)[y[i]])
        assert info_step["optimal_action"] == y[i]
        assert info_step["regret"] == 1.0 - float(a == y[i])
        assert info_step["sample"] == i
        info = {"sample": env.current_sample}


def test_reward_table_and_noise():
    x, _ = _toy()
    table = np.random.default_rng(3).random((30, 3))
    env = MatrixClassificationBandit(x, rewards=table, noise_std=0.5)
    env.reset(seed=0)
    gaps = []
    for _ in range(4000):
        i = env.current_sample
        _, reward, _, _, info = env.step(1)
        np.testing.assert_array_equal(info["expected_rewards"], table[i])
        gaps.append(reward - table[i, 1])
    gaps = np.array(gaps)
    assert abs(gaps.mean()) < 4 * 0.5 / np.sqrt(4000)  # fixed seed: mean-zero noise
    assert abs(gaps.std() - 0.5) < 0.03


def test_sampling_is_seeded_and_a_pass_shows_every_sample_once():
    x, y = _toy(n=25)

    def indices(env, seed, rounds):
        _, info = env.reset(seed=seed)
        out = [info["sample"]]
        for _ in range(rounds - 1):
            env.step(0)
            out.append(env.current_sample)
        return out

    a = indices(MatrixClassificationBandit(x, y), 7, 60)
    b = indices(MatrixClassificationBandit(x, y), 7, 60)
    assert a == b
    c = indices(MatrixClassificationBandit(x, y), 8, 60)
    assert a != c
    passes = indices(MatrixClassificationBandit(x, y, sampling="pass"), 7, 50)
    assert sorted(passes[:25]) == list(range(25)) == sorted(passes[25:])
    assert passes[:25] != passes[25:]  # reshuffled


def test_a_seed_replays_the_same_rounds():
    x, y = _toy()
    for sampling in ("replacement", "pass"):
        runs = []
        for _ in range(2):
            env = MatrixClassificationBandit(x, y, sampling=sampling, noise_std=0.1)
            env.reset(seed=0)
            runs.append([env.step(2)[1:] for _ in range(60)])
        assert repr(runs[0]) == repr(runs[1])


def test_policy_value_train_and_test():
    x, y = _toy(n=40)
    xt, yt = _toy(n=20, seed=5)
    env = MatrixClassificationBandit(x, y, test_contexts=xt, test_labels=yt, n_actions=4)
    assert env.policy_value(lambda X: yt, "test", batched=True) == 1.0
    assert env.policy_value(lambda xi: 2, "train") == np.mean(y == 2)
    uniform = env.policy_value(lambda xi: np.full(4, 0.25), "test")
    assert uniform == pytest.approx(0.25)
    rule = lambda X: (X[:, 0, 0] > 0).astype(int)  # noqa: E731
    one_by_one = env.policy_value(lambda xi: int(xi[0, 0] > 0), "test")
    assert env.policy_value(rule, "test", batched=True) == one_by_one
    assert one_by_one == np.mean((xt[:, 0, 0] > 0).astype(int) == yt)
    with pytest.raises(ValueError, match=r"actions must be integers in \[0, 4\)"):
        env.policy_value(lambda xi: 4, "test")
    with pytest.raises(ValueError, match="pmfs must sum to 1"):
        env.policy_value(lambda xi: np.full(4, 0.3), "test")
    with pytest.raises(ValueError, match="split must be one of"):
        env.policy_value(lambda xi: 0, "valid")
    with pytest.raises(ValueError, match='split="test" needs held-out samples'):
        MatrixClassificationBandit(x, y).policy_value(lambda xi: 0, "test")


def test_refuses_bad_arguments():
    x, y = _toy()
    with pytest.raises(ValueError, match=r"contexts must be a real array of matrices"):
        MatrixClassificationBandit(x[:, 0], y)
    with pytest.raises(ValueError, match="exactly one of labels"):
        MatrixClassificationBandit(x, y, rewards=np.zeros((30, 4)))
    with pytest.raises(ValueError, match=r"labels must be < n_actions=3; sample \d+ has label 3"):
        MatrixClassificationBandit(x, y, n_actions=3)
    bad = x.copy()
    bad[4, 1, 1] = np.inf
    with pytest.raises(ValueError, match="contexts must be finite.*sample 4"):
        MatrixClassificationBandit(bad, y)
    with pytest.raises(ValueError, match="sampling must be one of"):
        MatrixClassificationBandit(x, y, sampling="sequential")
    with pytest.raises(ValueError, match="noise_std"):
        MatrixClassificationBandit(x, y, noise_std=-1.0)
    with pytest.raises(ValueError, match="test_contexts must be matrices of shape"):
        MatrixClassificationBandit(x, y, test_contexts=np.zeros((3, 2, 3)), test_labels=y[:3])
    with pytest.raises(ValueError, match="test_size must be a fraction"):
        digits_arrays(test_size=1.0)
    with pytest.raises(ValueError, match="scale must be one of"):
        digits_arrays(scale="minmax")


def test_digits_arrays_split_and_scale():
    a = digits_arrays(split_seed=3)
    assert a["contexts"].shape == (1258, 8, 8) and a["test_contexts"].shape == (539, 8, 8)
    assert a["contexts"].min() == 0.0 and a["contexts"].max() == 1.0  # "unit": pixels / 16
    counts = np.bincount(np.concatenate([a["labels"], a["test_labels"]]))
    from sklearn.datasets import load_digits

    np.testing.assert_array_equal(counts, np.bincount(load_digits().target))
    s = digits_arrays(split_seed=3, scale="standardize")
    np.testing.assert_allclose(s["contexts"].mean(axis=0), 0.0, atol=1e-12)  # train stats
    assert digits_arrays(split_seed=4)["labels"].tolist() != a["labels"].tolist()


def test_agents_and_policy_evaluation_run_on_digits():
    from agents import EpsilonGreedy
    from inference import PolicyEvaluation

    env = digits_bandit(split_seed=0)
    agent = EpsilonGreedy(env, rank=2, seed=0, warm_start=1000)  # the rule's length, fixed
    pe = PolicyEvaluation(env, {"greedy": "greedy"}, estimator=agent.estimator)
    obs, _ = pe.reset(seed=0)
    for _ in range(1300):
        decision = agent.act(obs)
        next_obs, reward, *_ = pe.step(decision)
        agent.update(obs, decision, reward)
        obs = next_obs
    ci = pe.interval("greedy")
    assert ci.n_obs == 300 and 0 < ci.standard_error < 0.1
    M = np.asarray(agent.estimates)
    acc = env.policy_value(lambda X: np.einsum("nij,aij->na", X, M).argmax(1), batched=True)
    assert acc > 0.5  # ten classes: far above chance (0.1) after 1300 rounds


def test_digits_study_small(tmp_path, capsys):
    from lrbandit_gym.experiments import digits_study as study

    data = study.digits_study(3, n=150, seed=1, jobs=1)
    assert {len(v) for v in data.values()} == {3}
    two = study.digits_study(3, n=150, seed=1, jobs=2)  # the engine's map: same numbers
    assert all(np.array_equal(data[k], two[k], equal_nan=True) for k in data)
    assert ((data["exact"] > 0.3) & (data["exact"] <= 1)).all()
    z = (data["estimate"] - data["exact"]) / data["se"]
    assert (np.abs(z) < 4).all()  # fixed seeds: each interval near its estimand
    rows = study.summarize(data)
    assert [r["truth"].split(":")[0] for r in rows][0] == "exact"
    for r in rows:
        assert r["coverage_low"] <= r["coverage"] <= r["coverage_high"]
    figure = tmp_path / "digits.png"
    study.main(["--trials", "2", "--n", "100", "--jobs", "1", "--figure", str(figure)])
    assert figure.stat().st_size > 10_000
    assert "| exact: training-image value" in capsys.readouterr().out
    trace = study.run_trial(5, n=100, trace_every=10)["trace"]
    assert trace.shape == (10, 7) and (trace[:, 2] <= trace[:, 1]).all()
    assert (trace[:, 1] <= trace[:, 3]).all()
