"""The one builder of inference stacks (inference.build_stack) builds the stack one would
write by hand, for a single and a vector env, and refuses an empty one."""

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy, play
from inference import (
    GREEDY,
    ParameterInference,
    PolicyEvaluation,
    ValueInference,
    VectorParameterInference,
    VectorPolicyEvaluation,
    VectorValueInference,
    build_stack,
    stack_layers,
)

D = 5


def _targets():
    T = np.zeros((D, D))
    T[0, 0] = 1.0
    return {"T": T}


def _env(vector: bool):
    kw = dict(d1=D, d2=D, rank=2, n_actions=2, max_episode_steps=None)
    if vector:
        return gym.make_vec(
            "MatrixContextBandit-v0", num_envs=3, vectorization_mode="vector_entry_point", **kw
        )
    return gym.make("MatrixContextBandit-v0", **kw)


@pytest.mark.parametrize("vector", [False, True])
def test_the_builder_gives_the_hand_built_stack(vector):
    kinds = (
        (VectorParameterInference, VectorValueInference, VectorPolicyEvaluation)
        if vector
        else (ParameterInference, ValueInference, PolicyEvaluation)
    )
    results = []
    for built in (True, False):
        env = _env(vector)
        agent = EpsilonGreedy(env, rank=2, warm_start=100, seed=1)
        policies = {"greedy": GREEDY}
        if built:
            top = build_stack(env, _targets(), policies=policies, estimator=agent.estimator)
            layers = stack_layers(top)
            assert list(layers) == ["parameters", "value", "policies"]
            assert tuple(type(w) for w in layers.values()) == kinds
            assert top is layers["policies"]
            assert all(w.estimator is agent.estimator for w in layers.values())
        else:
            params = kinds[0](env, _targets(), estimator=agent.estimator)
            value = kinds[1](params, estimator=agent.estimator)
            top = kinds[2](value, policies, estimator=agent.estimator)
        play(top, agent, 200, seed=2)
        results.append([np.asarray(ci.estimate) for _, ci in top.host.results()])
        results[-1] += [np.asarray(top.interval("greedy").estimate)]
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_own_estimator_is_built_once_by_the_innermost_preset():
    env = build_stack(_env(False), _targets(), rank=2, warm_start=40)
    layers = stack_layers(env)
    assert layers["parameters"].owns_estimator and not layers["value"].owns_estimator
    assert layers["value"].estimator is layers["parameters"].estimator
    assert layers["parameters"].warm_start_rounds == 40


def test_a_stack_of_nothing_is_refused():
    with pytest.raises(ValueError, match="needs something to infer"):
        build_stack(_env(False), value=False)
