"""A step that resets the environment is never a round (issue 34, defect 2): the recorders
skip it, and the inference wrappers refuse, up front, the stacks that would take it as one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers import EditStep

import lrbandit_gym  # noqa: F401
from inference import ParameterInference, ValueInference
from lrbandit_gym import Decision
from lrbandit_gym.logs import RecordRounds, VectorRecordRounds, validate_log

D = 3
STEPS = 12  # with episodes of 5 steps: the 6th and the 12th steps are resets
PMF = np.array([0.2, 0.5, 0.3])


def _single(**kw):
    return gym.make("MatrixContextBandit-v0", d1=D, d2=D, rank=1, n_actions=3, **kw)


def _vector(**kw):
    return gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        d1=D,
        d2=D,
        rank=1,
        n_actions=3,
        **kw,
    )


def _run(env, vector):
    """Step ``env`` and keep, by Gymnasium's convention (the step after an episode ends is
    its reset), what each real round saw: the context acted on, the action, the reward and
    the regret."""
    obs, _ = env.reset(seed=4)
    ended = False
    kept = {"context": [], "action": [], "reward": [], "regret": []}
    for t in range(STEPS):
        action = np.array([t % 3, (t + 1) % 3]) if vector else t % 3
        pmf = np.tile(PMF, (2, 1)) if vector else PMF
        nxt, reward, term, trunc, info = env.step(Decision(action, pmf))
        if not np.any(ended):
            for key, value in zip(kept, (obs, action, reward, info["regret"]), strict=True):
                kept[key].append(np.array(value, copy=True))
        ended = np.logical_or(term, trunc)
        obs = nxt
    return {key: np.stack(value) for key, value in kept.items()}


@pytest.mark.parametrize("oracle", [True, False])
def test_single_recorder_skips_the_reset_step_of_an_autoreset_below(oracle):
    rec = RecordRounds(gym.wrappers.Autoreset(_single(max_episode_steps=5)), oracle=oracle)
    kept = _run(rec, vector=False)
    assert len(kept["action"]) == 10
    log = rec.to_log()
    assert rec.n_rounds == 10
    np.testing.assert_array_equal(log["context"], kept["context"])
    np.testing.assert_array_equal(log["action"], kept["action"])
    np.testing.assert_array_equal(log["reward"], kept["reward"])
    np.testing.assert_array_equal(log["pmf"], np.tile(PMF, (10, 1)))
    if oracle:
        np.testing.assert_array_equal(log["oracle_regret"], kept["regret"])
    validate_log(log)


def test_vector_recorder_skips_the_next_step_reset():
    rec = VectorRecordRounds(_vector(max_episode_steps=5, autoreset_mode="NextStep"))
    kept = _run(rec, vector=True)
    assert len(kept["action"]) == 10 and rec.n_rounds == 10
    for trial in (0, 1):
        log = rec.to_log(trial)
        np.testing.assert_array_equal(log["context"], kept["context"][:, trial])
        np.testing.assert_array_equal(log["action"], kept["action"][:, trial])
        np.testing.assert_array_equal(log["reward"], kept["reward"][:, trial])
        np.testing.assert_array_equal(log["oracle_regret"], kept["regret"][:, trial])
        assert np.all(log["reward"] != 0.0)
        validate_log(log)


def test_vector_recorder_records_every_step_of_a_same_step_autoreset():
    rec = VectorRecordRounds(_vector(max_episode_steps=5))
    obs, _ = rec.reset(seed=0)
    for t in range(STEPS):
        rec.step(Decision(np.array([t % 3, 0]), np.tile(PMF, (2, 1))))
    assert rec.n_rounds == STEPS


def test_a_step_without_the_bandits_info_is_refused_without_suggesting_oracle_false():
    rec = RecordRounds(EditStep(_single(), 3, lambda o, r, te, tr, i: (o, r, te, tr, {})))
    rec.reset(seed=0)
    rec.step(Decision(0, PMF))
    rec.step(Decision(1, PMF))
    with pytest.raises(ValueError, match="above the recorder") as err:
        rec.step(Decision(2, PMF))
    assert "oracle=False" not in str(err.value)
    assert rec.n_rounds == 2


@pytest.mark.parametrize("cls", [ParameterInference, ValueInference])
def test_inference_refuses_an_autoreset_below_that_can_end_episodes(cls):
    args = ({"T": np.eye(D)},) if cls is ParameterInference else ()
    below = gym.wrappers.Autoreset(_single(max_episode_steps=5))
    with pytest.raises(ValueError, match="Autoreset above") as err:
        cls(below, *args, rank=1)
    assert "max_episode_steps=None" in str(err.value)
    with pytest.raises(ValueError, match="Autoreset above"):
        cls(RecordRounds(gym.wrappers.Autoreset(_single(max_episode_steps=5))), *args, rank=1)
    cls(gym.wrappers.Autoreset(_single()), *args, rank=1)  # never ends: nothing to skip


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a short own warm start warns
def test_an_autoreset_above_the_inference_absorbs_only_real_rounds():
    params = ParameterInference(
        _single(max_episode_steps=5), {"T": np.eye(D)}, rank=1, warm_start=4
    )
    rec = RecordRounds(params)
    kept = _run(gym.wrappers.Autoreset(rec), vector=False)
    assert params.rounds_seen == len(kept["action"]) == rec.n_rounds == 10
