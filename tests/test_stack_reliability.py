"""Issue 26: stacks of wrappers around the inference wrappers.

Wrappers that change what an inference wrapper sees (observations, actions) are refused
below it; a completion context that is not exactly one-hot is refused before the inner step;
a round refused after the inner step changes no inference core, while the environment and
the Gymnasium wrappers below have stepped, as under any Gymnasium wrapper (issue 35).
"""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import vector as vector_wrappers

import lrbandit_gym  # noqa: F401
from inference import (
    ParameterInference,
    ValueInference,
    VectorParameterInference,
    VectorValueInference,
)
from lrbandit_gym import Decision, MatrixContextBanditEnv

pytestmark = [  # the short warm starts these tests use
    pytest.mark.filterwarnings("ignore::agents.warm_start.check.WarmStartWarning"),
    pytest.mark.filterwarnings("ignore:warm start. too few rounds"),
]

D = 4
UNIFORM = np.full(2, 0.5)


def make_env(**kw):
    return gym.make("MatrixContextBandit-v0", d1=D, d2=D, rank=1, **kw)


def make_vec(**kw):
    return gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=3,
        vectorization_mode="vector_entry_point",
        d1=D,
        d2=D,
        rank=1,
        **kw,
    )


def build(cls, env, **kw):
    if cls in (ParameterInference, VectorParameterInference):
        return cls(env, {"T": np.eye(D)}, rank=1, **kw)
    return cls(env, rank=1, **kw)


class _Doubled(gym.ObservationWrapper):
    """A user's own observation wrapper (a subclass of gym.ObservationWrapper)."""

    def observation(self, observation):
        return 2 * observation


class TransformObservation(gym.Wrapper):  # noqa: D101 - another library's, known by name
    def step(self, action):
        obs, *rest = self.env.step(action)
        return (2 * obs, *rest)


# ---------------------------------------------------------------- item 2: transforms below


SINGLE_TRANSFORMS = {
    "TransformObservation": lambda e: gym.wrappers.TransformObservation(e, lambda o: 2 * o, None),
    "TransformAction swaps": lambda e: gym.wrappers.TransformAction(e, lambda a: 1 - a, None),
    "FlattenObservation": gym.wrappers.FlattenObservation,
    "DtypeObservation": lambda e: gym.wrappers.DtypeObservation(e, np.float32),
    "gym.ObservationWrapper subclass": _Doubled,
    "by class name": TransformObservation,
}


@pytest.mark.parametrize("wrap", SINGLE_TRANSFORMS.values(), ids=SINGLE_TRANSFORMS.keys())
@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
def test_observation_and_action_transforms_below_are_refused(cls, wrap):
    """Issue 26 item 2: below an inference wrapper such a wrapper changed the data silently
    (a doubled context gave 0.033 for a truth of 0.069); the message names it and the fix."""
    transformed = wrap(make_env())
    name = type(transformed).__name__
    with pytest.raises(ValueError, match=f"above {name}") as err:
        build(cls, gym.wrappers.RecordEpisodeStatistics(transformed))
    assert "observations or actions" in str(err.value)
    assert "add it on top" in str(err.value) and "env.unwrapped" in str(err.value)
    # Above the inference wrappers the same wrapper is fine: they see the bandit itself.
    outer = wrap(build(cls, make_env()))
    outer.reset(seed=0)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda v: vector_wrappers.TransformAction(v, lambda a: 1 - a),
        lambda v: vector_wrappers.TransformObservation(v, lambda o: 2 * o),
        vector_wrappers.FlattenObservation,
    ],
    ids=["TransformAction", "TransformObservation", "FlattenObservation"],
)
@pytest.mark.parametrize("cls", [VectorParameterInference, VectorValueInference])
def test_vector_observation_and_action_transforms_below_are_refused(cls, wrap):
    transformed = wrap(make_vec(autoreset_mode="Disabled"))
    with pytest.raises(ValueError, match=f"above {type(transformed).__name__}"):
        build(cls, transformed)


def test_a_transform_between_two_inference_wrappers_is_refused():
    """The outer wrapper would see the transformed context while the inner one does not."""
    inner = build(ParameterInference, make_env())
    with pytest.raises(ValueError, match="above TransformObservation"):
        build(ValueInference, gym.wrappers.TransformObservation(inner, lambda o: 2 * o, None))


def test_flattened_observations_still_work():
    """flatten=True (stable-baselines3's MLP policies) is the env's own observation, not a
    wrapper: the inference wrappers read it as the matrix it is."""
    flat = build(ValueInference, build(ParameterInference, make_env(flatten=True), warm_start=8))
    mat = build(ValueInference, build(ParameterInference, make_env(), warm_start=8))
    for env in (flat, mat):
        env.reset(seed=1)
        for t in range(30):
            env.step(Decision(t % 2, UNIFORM))
    inner_flat, inner_mat = flat.env, mat.env
    assert inner_flat.core.n_obs == inner_mat.core.n_obs == 22
    np.testing.assert_allclose(
        inner_flat.interval(0, "T").estimate, inner_mat.interval(0, "T").estimate
    )
    np.testing.assert_allclose(flat.interval().estimate, mat.interval().estimate)


# ------------------------------------------------- item 3: one-hot checked before the step


class _ScaledCompletion(MatrixContextBanditEnv):
    """A completion bandit whose contexts come out scaled (as an observation wrapper would
    scale them): 2 e_j e_kᵀ passes a finiteness check but is not a completion context."""

    def reset(self, **kw):
        obs, info = super().reset(**kw)
        return 2.0 * obs, info

    def step(self, action):
        obs, *rest = super().step(action)
        return (2.0 * obs, *rest)


@pytest.mark.parametrize("shared", [False, True], ids=["own estimator", "shared estimator"])
@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
def test_a_context_that_is_not_one_hot_is_refused_before_the_inner_step(cls, shared):
    """Issue 26 item 3: the check ran while the warm-start buffer committed, after the base
    env had stepped (its generator moved, the wrapper's stored context went stale)."""
    env = _ScaledCompletion(d1=D, d2=D, rank=1, context="completion")
    kw = {"warm_start": 5}
    if shared:
        kw = {"estimator": build(ParameterInference, env, warm_start=5).estimator}
    wrapper = build(cls, env, **kw)
    obs, _ = wrapper.reset(seed=0)
    generator = env.np_random.bit_generator.state
    with pytest.raises(ValueError, match="one-hot") as err:
        wrapper.step(Decision(0, UNIFORM))
    assert "2.0" in str(err.value)  # the offending value
    assert env.np_random.bit_generator.state == generator  # the base env did not step
    assert wrapper.rounds_seen == 0 and wrapper.rounds_skipped == 0


def test_a_vector_context_that_is_not_one_hot_names_the_trial():
    venv = make_vec(context="completion")
    params = build(VectorParameterInference, venv, warm_start=5)
    params.reset(seed=0)
    base = params.unwrapped
    step = base.step

    def spread(actions):  # trial 1's next context gets a second non-zero entry
        obs, *rest = step(actions)
        obs = obs.copy()
        obs[1, 0, 0] += 0.5
        obs[1, 1, 1] += 0.5
        return (obs, *rest)

    for t in range(3):
        params.step(Decision(np.full(3, t % 2), np.full((3, 2), 0.5)))
    base.step = spread
    params.step(Decision(np.zeros(3, dtype=int), np.full((3, 2), 0.5)))
    generator = base.np_random.bit_generator.state
    with pytest.raises(ValueError, match=r"\(trial 1\) is not a one-hot"):
        params.step(Decision(np.zeros(3, dtype=int), np.full((3, 2), 0.5)))
    assert base.np_random.bit_generator.state == generator and params.rounds_seen == 4


# ------------------------------------- a round refused after the step (issue 35's decision)


def _raiser(error):
    def fail(*args, **kwargs):
        raise error

    return fail


def test_a_round_refused_after_the_step_changes_no_tracker_while_the_wrappers_below_count_it(
    monkeypatch,
):
    """With RecordEpisodeStatistics and TimeLimit between the inference wrappers and the
    bandit, a round refused after the inner step enters no tracker and raises naming the
    round; the wrappers below have stepped and counted it, as under any Gymnasium wrapper,
    and the next step goes on from the context the environment returned."""
    stats = gym.wrappers.RecordEpisodeStatistics(gym.wrappers.TimeLimit(make_env(), 12))
    params = build(ParameterInference, stats, warm_start=5)
    value = ValueInference(gym.wrappers.TimeLimit(params, 1000), rank=1)
    assert value.host is params
    value.reset(seed=0)
    for t in range(8):
        value.step(Decision(t % 2, UNIFORM))
    before = (params.rounds_seen, params.core.n_obs, value.rounds_seen, value.core.n_obs)
    monkeypatch.setattr(params.estimator, "propose_step", _raiser(FloatingPointError("x")))
    with pytest.raises(FloatingPointError) as err:
        value.step(Decision(0, UNIFORM))
    assert any("round 9" in note and "ParameterInference" in note for note in err.value.__notes__)
    assert (params.rounds_seen, params.core.n_obs, value.rounds_seen, value.core.n_obs) == before
    assert stats.episode_lengths == 9  # the wrappers below counted the step
    monkeypatch.undo()
    for t in range(3):
        *_, truncated, info = value.step(Decision(t % 2, UNIFORM))
    assert truncated and info["episode"]["l"] == 12  # TimeLimit ends after 12 env steps
    assert params.rounds_seen == value.rounds_seen == 11


def test_a_stacked_wrapper_stepped_alone_still_feeds_every_tracker():
    """Stepping the host directly feeds the trackers stacked on it too: there is one
    stream of rounds, whichever wrapper of the stack the loop steps."""
    params = build(ParameterInference, make_env(), warm_start=5)
    value = ValueInference(params, rank=1)
    value.reset(seed=0)
    for t in range(8):
        value.step(Decision(t % 2, UNIFORM))
    params.step(Decision(0, UNIFORM))
    assert params.rounds_seen == value.rounds_seen == 9
    assert params.core.n_obs == value.core.n_obs == 4
