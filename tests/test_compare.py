"""Agent comparisons: common random numbers, results independent of scheduling, tidy
results, inference that says why it is missing, and ``lrbandit compare``."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from helpers import assert_same_comparison, small_comparison

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy, Oracle, UniformRandom
from lrbandit_gym import Decision
from lrbandit_gym.experiments.cli import main
from lrbandit_gym.experiments.compare.run import (
    OurAgent,
    batched,
    compare,
    default_lineup,
    per_trial,
    sb3,
    sb3_available,
    trial_seeds,
)
from lrbandit_gym.experiments.compare.units import TrialBatchEnv, make_trial_env

pytestmark = pytest.mark.filterwarnings("ignore::inference.InsufficientDataWarning")

ENV = {"d1": 6, "d2": 5, "rank": 2}
HAS_SB3 = sb3_available()


class AlwaysArm:
    """A deterministic policy (no propensities needed beyond its one-hot pmf)."""

    def __init__(self, env, seed=None, arm=0):
        self.arm = arm
        self.k = env.unwrapped.n_actions
        self.b = getattr(env, "num_envs", None) if hasattr(env.unwrapped, "num_envs") else None

    def act(self, obs):
        p = np.zeros(self.k)
        p[self.arm] = 1.0
        if self.b is None:
            return Decision(self.arm, p)
        return Decision(np.full(self.b, self.arm), np.tile(p, (self.b, 1)))

    def update(self, obs, decision, reward):
        pass


def test_same_trial_seed_gives_the_same_contexts_and_noise_whatever_the_actions():
    """Trial i shows the same contexts and standardized noise to any action sequence, in a
    batch of trials, alone, and flattened (as stable-baselines3 sees it)."""
    seeds = trial_seeds(7, 3)
    assert seeds == trial_seeds(7, 3) and len(set(seeds)) == 3
    runs = []
    for policy in ("zeros", "random", "alternate"):
        env = TrialBatchEnv(ENV, seeds)
        obs, _ = env.reset()
        rng = np.random.default_rng(len(runs))
        contexts, noise = [obs], []
        for t in range(40):
            if policy == "zeros":
                a = np.zeros(3, dtype=int)
            elif policy == "random":
                a = rng.integers(0, 2, 3)
            else:
                a = np.full(3, t % 2)
            obs, reward, _, _, info = env.step(a)
            sigma = env.noise_std[a]
            noise.append((reward - info["expected_rewards"][np.arange(3), a]) / sigma)
            contexts.append(obs)
        runs.append((np.array(contexts), np.array(noise)))
    for contexts, noise in runs[1:]:
        np.testing.assert_array_equal(contexts, runs[0][0])
        np.testing.assert_allclose(noise, runs[0][1], rtol=0, atol=1e-12)
    # Trial 1 alone, flattened, with yet other actions: the same contexts.
    single = make_trial_env(ENV, flatten=True)
    obs, _ = single.reset(seed=seeds[1])
    alone = [obs]
    for t in range(40):
        obs, *_ = single.step(int(t % 3 == 0))
        alone.append(obs)
    np.testing.assert_array_equal(np.array(alone), runs[0][0][:, 1].reshape(41, -1))


def test_every_agent_sees_the_same_contexts_in_a_comparison():
    """Batched, one-trial and stable-baselines3 agents: the same context sums per trial, and
    a fixed policy has the same regret batched and alone."""
    agents = {
        "arm0 batched": batched(AlwaysArm),
        "arm0 alone": per_trial(AlwaysArm),
        "uniform": UniformRandom,
        "oracle": Oracle,
    }
    if HAS_SB3:
        agents["dqn"] = sb3("DQN", trials=2, gamma=0.0, learning_starts=20, buffer_size=200)
    res = compare(ENV, agents, trials=4, rounds=60, warm_start=20, batch_size=3, progress=False)
    sums = res.data["uniform"]["context_sum"]
    for name in res.agents:
        n = len(res.data[name]["trials"])
        np.testing.assert_allclose(res.data[name]["context_sum"], sums[:n], rtol=1e-12)
    np.testing.assert_allclose(
        res.data["arm0 batched"]["regret"], res.data["arm0 alone"]["regret"], rtol=1e-12
    )
    assert np.all(res.data["oracle"]["regret"] == 0)


def test_results_do_not_depend_on_jobs():
    names = ("eps", "alone", "uniform", "ppo")
    assert_same_comparison(small_comparison(1, names=names), small_comparison(2, names=names))


def test_an_agent_s_numbers_do_not_depend_on_the_line_up():
    alone = small_comparison(names=("eps",))
    together = small_comparison()
    np.testing.assert_array_equal(alone.data["eps"]["regret"], together.data["eps"]["regret"])


def test_tidy_results_summary_and_inference():
    res = compare(
        ENV,
        {
            "eps": lambda env, seed: EpsilonGreedy(env, rank=2, warm_start=40, seed=seed),
            "uniform": UniformRandom,
            "oracle": Oracle,
        },
        trials=6,
        rounds=150,
        warm_start=40,
        batch_size=3,
        progress=False,
    )
    arrays = res.regret(as_frame=False)
    assert arrays["eps"].shape == (6, 150)
    assert np.all(np.diff(arrays["uniform"], axis=1) >= 0)  # cumulative
    rows = {r["agent"]: r for r in res.summary(as_frame=False)}
    assert rows["oracle"]["final_regret_mean"] == 0
    assert rows["uniform"]["final_regret_mean"] > rows["eps"]["final_regret_mean"]
    assert np.isfinite(rows["eps"]["estimation_error"])
    assert np.isnan(rows["uniform"]["estimation_error"])  # no estimate
    assert rows["eps"]["ms_per_round"] > 0
    inference = res.inference(as_frame=False)
    labels = {r["quantity"] for r in inference}
    parameters = {"<M_0, T1>", "<M_1, T1>", "<M_0, T2>", "<M_1, T2>", "V*"}
    assert labels == parameters | {"V(arm 0)", "V(uniform)"}
    covered = []
    for r in inference:
        if r["agent"] in ("eps", "uniform"):
            assert r["trials"] == 6 and r["mean_width"] > 0
            # The wrappers' own 40-round warm start (uniform's) is too short, and says so.
            if r["agent"] == "eps":
                assert r["note"] == ""
            else:
                assert r["note"].startswith("WarmStartWarning in 2 of 2 unit(s)")
            assert np.isclose(r["coverage"] * 6, round(r["coverage"] * 6))  # k of 6 trials
            if r["quantity"] in parameters:
                covered.append(r["coverage"])
        else:  # the oracle gives arms probability 0: no crash, NaN and the reason
            assert r["trials"] == 0 and np.isnan(r["coverage"])
            assert "probability 0" in r["note"] or "π_t(a) = 0" in r["note"]
            if r["quantity"].startswith("V("):  # the policy-evaluation wrapper's own reason
                assert "policy evaluation (V(arm 0), V(uniform)) refused" in r["note"]
                assert "MIN_PROPENSITY" in r["note"]
    # 60 intervals at 95% (0.95 here): a biased estimator or a standard error far too small
    # covers well under 0.8
    assert len(covered) == 10 and np.mean(covered) >= 0.8, covered
    assert "π_t(a) = 0" in rows["oracle"]["notes"]
    assert "policy evaluation" in rows["oracle"]["notes"]
    assert np.isnan(rows["oracle"]["coverage_policy_uniform"])
    assert rows["eps"]["width_policy_arm_0"] > 0 and rows["eps"]["coverage_policy_uniform"] >= 0
    assert res.policy_values == {"arm 0": 0.0, "uniform": 0.0}  # Gaussian contexts
    # The target policies were refused before the step: the round went on through the
    # parameter and V* wrappers, which refused (if at all) only on a later round.
    oracle = res.data["oracle"]
    assert not oracle["policy_valid"].any() and oracle["policy_refusals"]
    first = min(r for r, _ in oracle["policy_refusals"])
    assert all(r >= first for r, _ in oracle["refusals"])
    curves = res.curves()
    assert curves["eps"]["regret"].shape == res.checkpoints.shape
    assert np.isfinite(curves["eps"]["widths"]["V*"][-1])
    assert np.isfinite(curves["eps"]["widths"]["V(uniform)"][-1])
    text = res.to_markdown()
    assert "| oracle |" in text and "n/a" in text and "Notes:" in text
    assert "| V* | V(arm 0) | V(uniform) |" in text
    if importlib.util.find_spec("pandas") is not None:
        frame = res.regret()
        assert list(frame.columns) == ["agent", "trial", "round", "cumulative_regret"]
        assert len(frame) == 3 * 6 * 150
        assert list(res.summary()["agent"]) == ["eps", "uniform", "oracle"]


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="flatten"):
        compare({**ENV, "flatten": True}, {"u": UniformRandom}, progress=False)
    with pytest.raises(ValueError, match="trials"):
        compare(ENV, {"u": UniformRandom}, trials=0, progress=False)
    with pytest.raises(ValueError, match="backend"):
        compare(ENV, {"u": UniformRandom}, backend="dask", progress=False)
    with pytest.raises(ValueError, match="at least one"):
        compare(ENV, {}, progress=False)
    with pytest.raises(ValueError, match="kind"):
        from lrbandit_gym.experiments.compare.run import AgentSpec

        AgentSpec(UniformRandom, kind="other")


def test_default_lineup_names_every_agent_of_the_issue():
    lineup = default_lineup()
    assert list(lineup) == [
        "eps-greedy",
        "softmax",
        "ensemble",
        "linear",
        "ppo",
        "dqn",
        "uniform",
        "oracle",
    ]
    assert lineup["ppo"].kind == lineup["dqn"].kind == "sb3" and lineup["ppo"].trials == 20
    assert lineup["eps-greedy"].factory.kwargs["warm_start"] == 400


def test_cli_compare_writes_tables_and_files(tmp_path, capsys):
    args = ["compare", "--agents", "eps-greedy", "linear", "uniform", "oracle"]
    args += ["--trials", "4", "--rounds", "120", "--d", "5", "--warm-start", "40"]
    args += ["--jobs", "1", "--batch-size", "2", "--out", str(tmp_path)]
    if importlib.util.find_spec("matplotlib") is None:
        args.append("--no-figures")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| eps-greedy |" in out and "| oracle | 4 | 0.0 ± 0.0" in out
    for name in ("compare.csv", "compare_inference.csv", "compare_regret.csv", "compare.md"):
        assert (tmp_path / name).is_file()
    meta = json.loads((tmp_path / "compare.json").read_text())
    assert meta["trials"] == 4 and meta["rounds"] == 120
    assert "| V* | V(arm 0) | V(uniform) |" in out
    assert {"V(arm 0)", "V(uniform)"} <= {r["quantity"] for r in meta["inference"]}
    assert "coverage_policy_arm_0" in meta["summary"][0] and meta["policy_values"]
    assert "V(uniform)" in (tmp_path / "compare_inference.csv").read_text()
    assert "width_policy_uniform" in (tmp_path / "compare.csv").read_text()
    assert [r["agent"] for r in meta["summary"]] == ["eps-greedy", "linear", "uniform", "oracle"]
    if importlib.util.find_spec("matplotlib") is not None:
        assert sorted(p.rsplit("/", 1)[-1] for p in meta["files"]["figures"]) == [
            "compare_estimation_error.png",
            "compare_interval_width.png",
            "compare_regret.png",
        ]
    with pytest.raises(SystemExit):
        main(["compare", "--agents", "nobody", "--out", str(tmp_path)])


def _drop_inverse_propensity(predictions, action, reward, propensities, targets):
    """The AIPW terms without their 1/π weight (tools/mutants.py's policy_value_no_ipw)."""
    trials = np.arange(predictions.shape[0])
    res = reward - predictions[trials, action]
    weight = targets[trials, :, action]
    return np.einsum("bjk,bk->bj", targets, predictions) + weight * res[:, None]


@pytest.mark.filterwarnings("ignore:warm start. too few rounds:RuntimeWarning")
def test_policy_value_rows_cover_under_epsilon_greedy(monkeypatch):
    """300 trials of ε-greedy (ε = 0.2) on a small completion problem, where the values of
    the target policies are not zero: V(arm 0) and V(uniform) cover within 5 Monte Carlo
    s.e. of 0.95; the same intervals without the 1/π weight miss the band (the outcome
    model's error is no longer corrected where the agent rarely plays)."""
    from inference.cores.policy_value import PolicyValueInference

    env = {"d1": 5, "d2": 5, "rank": 1, "context": "completion", "noise_std": 0.1}
    agent = OurAgent("EpsilonGreedy", {"rank": 1, "warm_start": 40, "epsilon": 0.2})
    run = dict(trials=300, rounds=200, warm_start=40, batch_size=300, checkpoints=1)
    low = 0.95 - 5 * np.sqrt(0.95 * 0.05 / 300)  # 0.887

    def coverage():
        res = compare(env, {"eps": agent}, **run, seed=1, progress=False)
        rows = {r["quantity"]: r for r in res.inference(as_frame=False)}
        for label, truth in (("V(arm 0)", res.policy_values["arm 0"]), ("V(uniform)", None)):
            assert rows[label]["trials"] == 300 and rows[label]["note"] == ""
            assert truth is None or rows[label]["truth"] == truth != 0
        return [rows["V(arm 0)"]["coverage"], rows["V(uniform)"]["coverage"]]

    right = coverage()
    assert all(low <= c <= 1.0 for c in right), right
    monkeypatch.setattr(PolicyValueInference, "terms", staticmethod(_drop_inverse_propensity))
    wrong = coverage()
    assert all(c < low for c in wrong), wrong


def test_notes_name_the_warnings_each_agent_raised():
    """A warning of the package raised in an agent's units (here the wrappers' own warm
    start, too short for the linear agent's ε-greedy rounds) is noted for that agent with the
    number of units that raised it, and shown once by ``compare``; an agent whose units
    raised none has no note."""
    agents = {
        "eps": OurAgent("EpsilonGreedy", {"rank": 2, "warm_start": 30}),
        "linear": OurAgent("LinearEpsilonGreedy"),
    }
    with pytest.warns(Warning) as shown:
        res = compare(
            ENV, agents, trials=4, rounds=80, seed=3, warm_start=30, batch_size=2, progress=False
        )
    raised = [w for w in shown if w.category.__name__ == "WarmStartWarning"]
    assert len(raised) == 1 and "[2 unit(s)]" in str(raised[0].message)
    assert res.notes("eps") == []
    (note,) = res.notes("linear")
    assert note.startswith("WarmStartWarning in 2 of 2 unit(s) of trials: ")
    assert "Pass warm_start=" in note
    assert "- linear: WarmStartWarning in 2 of 2" in res.to_markdown()
    rows = res.inference(as_frame=False)
    assert all(r["note"] == "" for r in rows if r["agent"] == "eps" and r["trials"])
    assert all(note in r["note"] for r in rows if r["agent"] == "linear")
