"""agents.SB3Agent reports the exact pmf of the actions stable-baselines3 plays, outside and
inside ``model.learn()``; inference.InferenceCallback logs the wrappers' intervals."""

from __future__ import annotations

import csv

import gymnasium as gym
import numpy as np
import pytest
from scipy import stats

SKIP_REASON = (
    "needs the sb3 extra (stable-baselines3 and torch): pip install -e '.[sb3]' "
    "(README.md says how to get the CPU build of torch)"
)
pytest.importorskip("stable_baselines3", reason=SKIP_REASON)
torch = pytest.importorskip("torch", reason=SKIP_REASON)

from stable_baselines3 import A2C, DQN, PPO  # noqa: E402

import lrbandit_gym  # noqa: E402, F401
from agents import SB3Agent  # noqa: E402
from inference import ParameterInference, ValueInference  # noqa: E402

D = 4


@pytest.fixture(autouse=True, scope="module")
def torch_on_one_thread():
    """Torch's thread pool on one thread for these small networks (on a shared 2-core
    machine, more threads only compete with the other processes); restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _env(flatten=True, **kw):
    return gym.make(
        "MatrixContextBandit-v0",
        d1=D,
        d2=D,
        rank=1,
        flatten=flatten,
        max_episode_steps=None,
        **kw,
    )


def binned_chi_square(actions, p1, bins: int = 8) -> float:
    """p-value of "each action a_t ~ Bernoulli(p1_t)", pooled in bins of p1_t.

    Per bin, the count of arm 1 has mean Σ p and variance Σ p(1 − p); the statistic sums the
    squared standardized deviations (χ² with ``bins`` degrees of freedom).  A bin with zero
    variance and a deviation (an action reported with probability 0) gives p-value 0.
    """
    actions = np.asarray(actions)
    p1 = np.asarray(p1, dtype=float)
    edges = np.unique(np.quantile(p1, np.linspace(0, 1, bins + 1)))
    which = np.clip(np.searchsorted(edges, p1, side="right") - 1, 0, max(len(edges) - 2, 0))
    stat, dof = 0.0, 0
    for b in np.unique(which):
        m = which == b
        observed = float(np.sum(actions[m] == 1))
        expected = float(p1[m].sum())
        var = float(np.sum(p1[m] * (1 - p1[m])))
        if var == 0:
            if abs(observed - expected) > 1e-9:
                return 0.0
            continue
        stat += (observed - expected) ** 2 / var
        dof += 1
    return float(stats.chi2.sf(stat, max(dof, 1)))


def _bias_policy(model, bias=(1.2, -1.2)):
    """Make a fresh categorical policy far from uniform (so a wrong pmf is detectable)."""
    with torch.no_grad():
        model.policy.action_net.bias.copy_(torch.tensor(bias))
        model.policy.action_net.weight.mul_(4.0)


@pytest.mark.parametrize("algo", [PPO, A2C])
def test_categorical_propensities_match_the_actions_played(algo):
    env = _env()
    model = algo("MlpPolicy", env, seed=0, device="cpu")
    _bias_policy(model)
    agent = SB3Agent(model)
    assert agent.kind == "categorical"
    rng = np.random.default_rng(0)
    actions, p1 = [], []
    for _ in range(3000):
        obs = rng.standard_normal(D * D)
        decision = agent.act(obs)
        actions.append(decision.action)
        p1.append(decision.propensities[1])
        assert decision.propensities.sum() == pytest.approx(1.0)
    p1 = np.array(p1)
    assert 0.05 < p1.mean() < 0.5  # far from uniform: a uniform claim must fail
    assert binned_chi_square(actions, p1) > 1e-3
    assert binned_chi_square(actions, np.full_like(p1, 0.5)) < 1e-6


def test_dqn_propensities_are_the_epsilon_mixture():
    env = _env()
    model = DQN("MlpPolicy", env, seed=0, device="cpu", learning_starts=10)
    agent = SB3Agent(model)
    assert agent.kind == "q_network" and agent.in_warm_up
    obs = np.random.default_rng(1).standard_normal(D * D)
    np.testing.assert_allclose(agent.action_probs(obs), [0.5, 0.5])  # before learning_starts
    model.num_timesteps = 100
    model.exploration_rate = 0.3
    probs = agent.action_probs(obs)
    greedy = int(np.argmax(probs))
    np.testing.assert_allclose(sorted(probs), [0.15, 0.85])
    actions = [agent.act(obs).action for _ in range(4000)]
    p1 = np.full(len(actions), probs[1])
    assert binned_chi_square(actions, p1) > 1e-3
    wrong = np.full(len(actions), float(greedy == 1))  # the greedy arm with probability 1
    assert binned_chi_square(actions, wrong) < 1e-6


class _Record(gym.Wrapper):
    """Records each action SB3 takes with the agent's pmf at that step (what an inference
    wrapper's propensity_fn sees)."""

    def __init__(self, env, agent_ref):
        super().__init__(env)
        self.agent_ref = agent_ref
        self.rows = []

    def reset(self, **kw):
        self.obs, info = self.env.reset(**kw)
        return self.obs, info

    def step(self, action):
        agent = self.agent_ref[0]
        probs = agent.action_probs(self.obs)
        greedy = None
        if agent.kind == "q_network" and not agent.in_warm_up:
            with torch.no_grad():
                obs_t, _ = agent.model.policy.obs_to_tensor(np.asarray(self.obs))
                greedy = int(agent.model.policy.q_net(obs_t).argmax(dim=1)[0])
        self.rows.append((int(action), probs, greedy))
        self.obs, *rest = self.env.step(action)
        return (self.obs, *rest)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_propensities_inside_learn_match_the_actions(algo):
    """Inside model.learn() the pmf read at env.step is the one the action came from; a DQN
    reported as greedy with probability 1 fails the same test."""
    ref = [None]
    env = _Record(_env(), ref)
    if algo == "dqn":
        model = DQN(
            "MlpPolicy",
            env,
            seed=0,
            device="cpu",
            gamma=0.0,
            learning_starts=50,
            exploration_fraction=0.5,
            exploration_final_eps=0.2,
            buffer_size=2000,
        )
    else:
        model = PPO("MlpPolicy", env, seed=0, device="cpu", gamma=0.0, n_steps=64, batch_size=32)
        _bias_policy(model)
    ref[0] = SB3Agent(model)
    model.learn(total_timesteps=1200 if algo == "dqn" else 1536)
    actions = np.array([r[0] for r in env.rows])
    p1 = np.array([r[1][1] for r in env.rows])
    assert binned_chi_square(actions, p1) > 1e-3
    if algo == "dqn":
        assert np.allclose(p1[:50], 0.5)  # uniform before learning_starts
        wrong = np.array(
            [p if g is None else float(g == 1) for (_, _, g), p in zip(env.rows, p1, strict=True)]
        )
        assert binned_chi_square(actions, wrong) < 1e-6
    else:
        assert binned_chi_square(actions, np.full_like(p1, 0.5)) < 1e-6


def test_observation_layout_is_handled():
    model = PPO("MlpPolicy", _env(), seed=0, device="cpu")
    agent = SB3Agent(model)
    x = np.random.default_rng(2).standard_normal((D, D))
    np.testing.assert_allclose(agent.action_probs(x), agent.action_probs(x.ravel()))
    batch = np.random.default_rng(3).standard_normal((5, D, D))
    probs = agent.action_probs(batch)
    assert probs.shape == (5, 2)
    np.testing.assert_allclose(probs[2], agent.action_probs(batch[2]))
    decision = agent.act(batch)
    assert decision.action.shape == (5,) and decision.propensities.shape == (5, 2)
    # A model trained on matrix observations takes flat ones too.
    matrix_model = PPO("MlpPolicy", _env(flatten=False), seed=0, device="cpu")
    SB3Agent(matrix_model).action_probs(x.ravel())
    with pytest.raises(ValueError, match="does not fit"):
        agent.action_probs(np.zeros(7))


def test_refuses_models_without_a_discrete_pmf():
    class Fake:
        policy = object()

    with pytest.raises(ValueError, match="discrete"):
        SB3Agent(Fake())


def test_propensity_fn_needs_no_workaround_and_callback_logs_intervals(tmp_path):
    """The wrappers take agent.action_probs directly (model.set_env), and the callback puts
    every interval into SB3's logger (here its CSV output)."""
    from stable_baselines3.common.logger import configure

    from inference import InferenceCallback

    env = _env()
    model = PPO("MlpPolicy", env, seed=0, device="cpu", gamma=0.0, n_steps=100, batch_size=50)
    agent = SB3Agent(model)
    T = np.eye(D)
    params = ParameterInference(
        env, {"T": T}, rank=1, warm_start=150, propensity_fn=agent.action_probs
    )
    watched = ValueInference(params, propensity_fn=agent.action_probs)
    model.set_env(watched)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    callback = InferenceCallback()
    model.learn(total_timesteps=500, callback=callback)
    keys = set(callback.last_values)
    for name in ("T/arm0", "T/arm1", "V_star"):
        for field in ("estimate", "low", "high", "se"):
            assert f"inference/{name}/{field}" in keys
    with open(tmp_path / "progress.csv") as fh:
        header = next(csv.reader(fh))
    assert "inference/T/arm1/estimate" in header and "train/value_loss" in header
    ci = params.interval(1, "T")
    assert callback.last_values["inference/T/arm1/estimate"] == pytest.approx(
        float(ci.estimate), rel=0.5
    )
    assert np.isfinite(watched.interval().standard_error)
