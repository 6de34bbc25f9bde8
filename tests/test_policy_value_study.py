"""The policy-value study on the Monte Carlo engine: exact rule values, results that do
not depend on how chunks are scheduled, and its command line's outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lrbandit_gym.experiments.montecarlo import chunk_map
from lrbandit_gym.experiments.policy_value_study import (
    ESTIMATORS,
    OUTPUT_FILES,
    TARGETS,
    PolicyValueSetting,
    coverage_rows,
    main,
    rule_value,
    run_policy_value_trials,
)

# A few rounds: some trials have one AIPW term for a target, whose variance is NaN.
pytestmark = pytest.mark.filterwarnings("ignore::inference.InsufficientDataWarning")

TINY = PolicyValueSetting(d1=4, d2=4, rank=2, noise_std=0.1, rounds=20)


def test_rule_value_matches_monte_carlo():
    rng = np.random.default_rng(0)
    params = rng.standard_normal((2, 3, 2))
    W = rng.standard_normal((3, 2))
    X = rng.standard_normal((200_000, 3, 2))
    arm = (np.tensordot(X, W, axes=([-2, -1], [0, 1])) > 0).astype(int)
    values = np.tensordot(X, params, axes=([-2, -1], [1, 2]))  # (N, 2)
    mc = values[np.arange(len(X)), arm].mean()
    assert rule_value(params, W) == pytest.approx(mc, abs=0.01)
    batched = rule_value(params, np.stack([W, -W]))
    assert batched[0] == pytest.approx(-batched[1])


def test_one_job_and_two_jobs_give_identical_arrays():
    one = run_policy_value_trials(TINY, 5, seed=3, batch_size=2)
    two = run_policy_value_trials(TINY, 5, seed=3, batch_size=2, map_fn=chunk_map(2))
    assert set(one) == set(two)
    for key in one:
        assert one[key].shape == (5,)
        np.testing.assert_array_equal(one[key], two[key], err_msg=key)
    keys = {f"{t}:{e}:{q}" for t in TARGETS for e in ESTIMATORS for q in ("estimate", "se")}
    assert keys | {f"{t}:truth" for t in TARGETS} | {"final greedy truth"} == set(one)
    rows = coverage_rows(one)
    assert [(r["target"], r["estimator"]) for r in rows] == [
        (t, e) for t in TARGETS for e in ESTIMATORS
    ]


def test_cli_writes_stamped_outputs_and_refuses_to_overwrite(tmp_path, capsys):
    argv = ["--d", "4", "--n", "20", "--trials", "3", "--batch-size", "2", "--seed", "5"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    assert "| random rule | IPW |" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(OUTPUT_FILES)
    stamp = json.loads(str(np.load(tmp_path / "policy_values.npz")["metadata"]))
    assert stamp["seed"] == 5 and stamp["settings"]["trials"] == 3 and not stamp["partial"]
    assert (tmp_path / "policy_values.csv").read_text().startswith("# written by")
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path), "--overwrite"]) == 0
