"""The grid of settings outside the paper's that ``lrbandit validate --grid NAME`` runs
(docs/reproduction.md, "Validity outside the paper"): unequal dimensions and noise, other
policies and noise laws, completion contexts, high rank, low signal-to-noise, settings
whose warm start is known to be too short, and contexts of other laws (correlated, scaled,
non-uniform completion, real images), each with the law known and estimated.
"""

from __future__ import annotations

from lrbandit_gym.experiments.validate.setting import ValidationSetting

__all__ = ["GRID", "OTHER_LAWS"]

#: Settings outside the paper's (docs/reproduction.md, "Validity outside the paper"): each
#: with the problem-sized default warm start unless it says otherwise, 95% intervals for
#: every arm, every difference of arms and ``V*``.  ``lrbandit validate --grid NAME``.
GRID: dict[str, ValidationSetting] = {
    "unequal": ValidationSetting(
        env={"d1": 30, "d2": 12, "rank": 2, "noise_std": (0.1, 0.3)},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(500, 1500),
        description="unequal dimensions (30 x 12), rank 2, unequal noise across arms "
        "(σ = 0.1, 0.3), ε-greedy",
    ),
    "softmax3": ValidationSetting(
        env={"d1": 15, "d2": 15, "rank": 1, "n_actions": 3},
        policy="softmax",
        policy_kwargs={"temperature": 1.0},
        n=(500, 1500),
        description="3 arms, rank 1, softmax (τ = 1)",
    ),
    "completion": ValidationSetting(
        env={"d1": 10, "d2": 10, "rank": 1, "context": "completion", "noise_std": 0.02},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1, "step_gain": 0.003},
        warm_start=4000,
        n=(1000, 3000),
        description="completion contexts (10 x 10), rank 1, σ = 0.02, ε-greedy, with the "
        "warm start the check asks for (4000 rounds) and a gentler step (gain 0.003)",
    ),
    "completion-default": ValidationSetting(
        env={"d1": 10, "d2": 10, "rank": 1, "context": "completion", "noise_std": 0.02},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(1000, 3000),
        description="completion with every default (the noise-level warm start of 3200 "
        "rounds, gain 0.03)",
    ),
    "completion-hard": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 1, "context": "completion"},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(1000, 3000),
        description="completion contexts (20 x 20), rank 1, σ = 0.1 (entries about 0.05), "
        "ε-greedy: far from enough data",
    ),
    "student-t": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 2, "n_actions": 4, "noise": "student_t", "noise_std": 0.2},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.2},
        n=(500, 1500),
        description="4 arms, rank 2, Student-t noise (3 d.o.f., σ = 0.2), ε-greedy (ε = 0.2)",
    ),
    "rank5": ValidationSetting(
        env={"d1": 25, "d2": 25, "rank": 5},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(1000, 2000),
        description="high rank for the size (d = 25, r = 5), ε-greedy",
    ),
    "rank7": ValidationSetting(
        env={"d1": 50, "d2": 50, "rank": 7},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        n=(1000, 3000),
        description="the paper's Table 2 at rank 7 (d = 50), with the problem-sized warm start "
        "(4600 rounds) and the default step",
    ),
    "low-snr": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 2, "noise_std": 1.0},
        policy="epsilon-greedy",
        n=(1000, 3000),
        description="low signal-to-noise: 2 arms, rank 2, σ = 1 (10 times the paper's), "
        "ε-greedy with every default: the greedy rules' regret is large and V* warns",
    ),
    "five-arms": ValidationSetting(
        env={"d1": 12, "d2": 12, "rank": 1, "n_actions": 5, "noise": "uniform", "noise_std": 0.3},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.3},
        n=(1000, 2000),
        description="5 arms, rank 1, uniform noise (σ = 0.3), ε-greedy (ε = 0.3)",
    ),
    "rectangular": ValidationSetting(
        env={"d1": 6, "d2": 60, "rank": 3},
        policy="epsilon-greedy",
        n=(1000, 2000),
        description="very rectangular (6 x 60), rank 3, ε-greedy with every default",
    ),
    "laplace": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 4, "noise": "laplace"},
        policy="softmax",
        policy_kwargs={"temperature": 0.5},
        n=(1000, 2000),
        description="Laplace noise, rank 4 (20 x 20), softmax (τ = 0.5)",
    ),
    "correlated-0.5": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 2, "context_corr": 0.5},
        policy="epsilon-greedy",
        n=(1000, 3000),
        description="Gaussian contexts with AR(1) correlation 0.5 between neighbouring rows "
        "and columns, rank 2, ε-greedy with every default (the env's Kronecker law)",
    ),
    "correlated-0.9": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 2, "context_corr": 0.9},
        policy="epsilon-greedy",
        n=(1000, 3000),
        description="AR(1) correlation 0.9 (condition number about 360 per factor), rank 2, "
        "ε-greedy with every default (the env's Kronecker law)",
    ),
    "scaled": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 2, "context_std": 0.5, "n_actions": 3},
        policy="epsilon-greedy",
        n=(1000, 3000),
        description="entries of standard deviation 0.5, 3 arms, rank 2, ε-greedy with every "
        "default (the env's law)",
    ),
    "completion-zipf": ValidationSetting(
        env={
            "d1": 10,
            "d2": 10,
            "rank": 1,
            "context": "completion",
            "noise_std": 0.02,
            "entry_probs": "zipf:0.5",
        },  # fmt: skip
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1, "step_gain": 0.003},
        warm_start=4000,
        n=(1000, 3000),
        description="completion whose entries are revealed with Zipf frequencies "
        "∝ (j k)^-0.5 (the first entry 19 times as often as the last), otherwise "
        "'completion' (the env's entry law)",
    ),
    "digits": ValidationSetting(
        env={"d1": 8, "d2": 8, "rank": 2, "contexts": "digits", "noise_std": 0.1},
        policy="epsilon-greedy",
        targets="center-smooth",
        n=(1000, 3000),
        description="scikit-learn's handwritten digits (8 x 8, standardised with one global "
        "mean and s.d.) as contexts, a synthetic rank-2 truth, ε-greedy with every default "
        "(the data set's exact second moment, on which the default read-out is the debiased "
        "mean: the centre pixel is identified, the smooth bump warns)",
    ),
    "completion-60": ValidationSetting(
        env={"d1": 60, "d2": 60, "rank": 2, "context": "completion", "observation": "index"},
        policy="epsilon-greedy",
        targets="paper",
        n=(1000, 3000),
        description="completion at 60 x 60, rank 2, ε-greedy with every default (index "
        "observations: O((d1 + d2) r) a round)",
    ),
    "eight-arms": ValidationSetting(
        env={"d1": 20, "d2": 20, "rank": 2, "n_actions": 8},
        policy="epsilon-greedy",
        n=(1000, 3000),
        description="8 arms, rank 2, Gaussian contexts, ε-greedy with every default",
    ),
    "rank5-short": ValidationSetting(
        env={"d1": 25, "d2": 25, "rank": 5},
        policy="epsilon-greedy",
        policy_kwargs={"epsilon": 0.1},
        warm_start=600,
        n=(1000, 2000),
        description="rank5 with a 600-round warm start (default 1600): the warm-start check warns",
    ),
}

#: The settings whose contexts follow another law than the paper's: ``lrbandit validate
#: --grid NAME --context-law estimated`` runs each with the law estimated from the contexts.
OTHER_LAWS = ("correlated-0.5", "correlated-0.9", "scaled", "completion-zipf", "digits")
