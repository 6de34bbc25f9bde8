"""The ensemble-sampling study: optimal-value inference with estimated propensities.

The paper's Appendix B.3 ("Optimal Policy Value Inference with Approximate Thompson
Sampling", Algorithm 6; docs/method.md §2, §5 and §6) runs ensemble sampling on
``d1 = d2 = 20``, ``r = 1`` with ``K_ens = 10`` models, ``sigma_u = sigma_v = sigma = 0.1``
and reward perturbations ``sigma~ = 0.05``, infers ``V*`` with the estimated exploration
probabilities of Appendix A (eqs. A.2-A.4), and reports that over 500 trials the z-scores
``sqrt(n) (V_hat_n - V*) / S_hat_V`` at ``n = 300`` and ``n = 700`` are close to ``N(0, 1)``.

Per round, as in Algorithm 6:

* ``eta_{a,t} = (1/K_ens) sum_m <U_a^(m) V_a^(m)T, X_t>`` (the ensemble-mean prediction) plays
  the role of ``<M_hat_{a,t-1}, X_t>``, and ``a_hat(X_t) = argmax_a eta_{a,t}``;
* ``e_hat_t`` is the fraction of models that prefer another arm to ``a_hat(X_t)``;
* ``V_hat_n`` is eq. (A.2) (the doubly robust estimator with ``1 - e_hat_t``) and
  ``S_hat_V^2`` eq. (A.3) with the plain-mean noise estimate of eq. (A.4).

The policy draws a model uniformly and plays its greedy arm, so its reported pmf
(:meth:`agents.EnsembleSampling.action_probs`) is exactly the fraction of models whose greedy
arm is each arm, and ``1 - e_hat_t`` is that pmf at ``a_hat(X_t)`` (for two arms; the only
difference is an exact tie between two arms' predictions, a null event under Gaussian
contexts).  The study therefore hands the policy's :class:`~lrbandit_gym.Decision` to
:class:`inference.VectorValueInference` in its ``propensities="estimated"`` mode, with the
ensemble means as the estimator's predictions (:class:`EnsembleMeanPredictor`).

Warm start.  The paper's study uses "the setting of Section 5", whose estimates start from
``M_init`` fitted on pre-collected offline data (eq. 10); it does not say how much.  Here each
trial's ensemble first absorbs ``warm_start`` rounds of uniformly random actions (its models
are then the perturbed MAP fits of eq. (MAP obj) on that offline data, the ensemble analogue
of ``M_init``), and inference starts after them, as in the other studies.  The warm start
matters: ``V_hat_n`` is centred on the value of the estimated greedy policy ``a_hat``, so
its bias is the average regret of ``a_hat`` over the rounds, and models started from the
prior (``warm_start=0``) play almost at random for the first ~150 rounds (the ALS iterates
leave the neighbourhood of zero slowly): 40 seeded trials gave z-score means of -2.2 at
n = 300 and -1.5 at n = 700 without a warm start.  With 300 uniform rounds (the default)
the ensemble-mean error ``||M_hat_a - M_a||_F`` is about 0.06 when inference starts
(recorded per trial as ``initial_error``).  Trials run in chunks seeded by the children of one
``SeedSequence``, each with one BLAS thread, so results do not depend on how chunks are
scheduled (``--jobs``, ``--backend``), exactly as in :func:`.studies.run_study`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lrbandit_gym.experiments.montecarlo import merge_trials, run_trials

__all__ = [
    "EnsembleMeanPredictor",
    "EnsembleStudyConfig",
    "merge_ensemble_chunks",
    "run_ensemble_chunk",
    "run_ensemble_study",
]

#: Per-trial arrays whose last axis is the trial axis (concatenated across chunks), in the
#: order of the merged result.
_PER_TRIAL = (
    "value_estimate",
    "value_se",
    "plug_in:value_estimate",
    "plug_in:value_se",
    "exploration",
    "estimation_error",
    "pulls",
    "regret",
    "initial_error",
)


def _positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def _positive_float(value, name: str, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number; got {value!r}") from None
    if isinstance(value, bool) or not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}; got {value!r}")
    return v


@dataclass(frozen=True)
class EnsembleStudyConfig:
    """One ensemble-sampling setting (defaults: the paper's Appendix B.3, docs/method.md §6).

    Parameters
    ----------
    d1, d2 : int, default 20
        Context shape.
    rank : int, default 1
        Rank of the truth and of every model.
    n_actions : int, default 2
        Arms (the paper's ``e_hat_t`` is defined for two).
    noise_std : float, default 0.1
        Reward noise ``sigma`` of the environment, also the likelihood's ``sigma_1 = sigma_0``
        in eq. (MAP obj), as in the paper.
    singular_values : float, default 1.0
        Top singular value(s) of the drawn truth (the paper's setting: 1).
    truth_seed : int, default 0
        Seed of the truth, shared by all trials.
    n_models : int, default 10
        ``K`` of Algorithm 6.
    prior_std_u, prior_std_v : float, default 0.1
        ``sigma_u``, ``sigma_v``.
    perturbation_std : float, default 0.05
        ``sigma~``.
    als_sweeps : int, default 1
        ALS sweeps per round (see :class:`agents.EnsembleSampling`).
    warm_start : int, default 300
        Rounds of uniformly random actions the ensemble learns from before inference starts
        (see the module notes); 0 starts inference from the prior draws.
    checkpoints : tuple of int, default (300, 700)
        Rounds ``n`` at which the interval is read.
    """

    d1: int = 20
    d2: int = 20
    rank: int = 1
    n_actions: int = 2
    noise_std: float = 0.1
    singular_values: float = 1.0
    truth_seed: int = 0
    n_models: int = 10
    prior_std_u: float = 0.1
    prior_std_v: float = 0.1
    perturbation_std: float = 0.05
    als_sweeps: int = 1
    warm_start: int = 300
    checkpoints: tuple[int, ...] = (300, 700)

    def __post_init__(self) -> None:
        for name in ("d1", "d2", "rank", "n_models", "als_sweeps"):
            _positive_int(getattr(self, name), name)
        _positive_int(self.n_actions, "n_actions", minimum=2)
        _positive_int(self.truth_seed, "truth_seed", minimum=0)
        _positive_int(self.warm_start, "warm_start", minimum=0)
        if self.rank > min(self.d1, self.d2):
            raise ValueError(
                f"rank must be <= min(d1, d2) = {min(self.d1, self.d2)}; got {self.rank}"
            )
        for name in ("noise_std", "singular_values", "prior_std_u", "prior_std_v"):
            _positive_float(getattr(self, name), name)
        _positive_float(self.perturbation_std, "perturbation_std", allow_zero=True)
        try:
            checkpoints = tuple(self.checkpoints)
        except TypeError:
            raise ValueError(
                f"checkpoints must be a sequence of positive integers; got {self.checkpoints!r}"
            ) from None
        if not checkpoints:
            raise ValueError("checkpoints must hold at least one round n; got ()")
        for n in checkpoints:
            _positive_int(n, "checkpoints")
        if len(set(checkpoints)) != len(checkpoints):
            raise ValueError(f"checkpoints must be distinct; got {checkpoints!r}")
        object.__setattr__(self, "checkpoints", tuple(sorted(int(n) for n in checkpoints)))

    @property
    def rounds(self) -> int:
        """Rounds a trial plays: the warm start, then the largest checkpoint."""
        return self.warm_start + max(self.checkpoints)

    def replace(self, **changes) -> EnsembleStudyConfig:
        return dataclasses.replace(self, **changes)


class EnsembleMeanPredictor:
    """An :class:`agents.EnsembleSampling` policy seen as the value wrapper's estimator.

    :class:`inference.VectorValueInference` reads ``predict(X_t)`` before each round's
    update; here that is ``eta_{a,t}``, the ensemble-mean prediction of Algorithm 6, so
    ``a_hat(X_t) = argmax_a eta_{a,t}`` and ``q_t = max_a eta_{a,t}`` in eq. (A.2).  The
    policy itself learns (in ``policy.update``); this view never changes it.

    Parameters
    ----------
    policy : agents.EnsembleSampling
    warm_start : int, default 0
        Rounds the policy learns from before the view reports itself ``initialized``; the
        wrapper skips the rounds before (as it does for a shared estimator's warm start).
    """

    def __init__(self, policy, warm_start: int = 0) -> None:
        from agents import EnsembleSampling

        if not isinstance(policy, EnsembleSampling):
            raise ValueError(f"policy must be an EnsembleSampling; got {type(policy).__name__}")
        self.policy = policy
        self.warm_start = _positive_int(warm_start, "warm_start", minimum=0)
        self.d1, self.d2 = policy.d1, policy.d2
        self.n_actions = policy.n_actions
        self.n_trials = policy.n_trials
        self.rank = policy.rank

    @property
    def initialized(self) -> bool:
        """Whether the policy has learned from its ``warm_start`` rounds."""
        return self.policy.t >= self.warm_start

    def predict(self, x) -> np.ndarray:
        """``eta_{a,t}`` for every arm: ``(K,)`` or ``(B, K)``."""
        return self.policy.ensemble_mean_predictions(x)


def run_ensemble_chunk(config: EnsembleStudyConfig, n_trials: int, seed) -> dict[str, np.ndarray]:
    """Run ``n_trials`` trials of Algorithm 6 in one batch; intervals at every checkpoint.

    Returns
    -------
    dict of str to ndarray
        ``value_estimate``, ``value_se`` ``(C, B)``: ``V_hat_n`` (eq. A.2) and
        ``S_hat_V / sqrt(n)`` (eq. A.3-A.4); ``plug_in:value_estimate``/``plug_in:value_se``
        ``(C, B)``: the plug-in ``(1/n) sum_t q_t`` (eq. A.2 without its correction term)
        with the same standard error, a control; ``exploration`` ``(C, B)``: the mean of
        ``e_hat_t`` over rounds ``1..n``; ``estimation_error`` ``(C, K, B)``: the Frobenius
        error of the ensemble-mean estimate of each ``M_a``; ``pulls`` ``(C, K, B)``: online
        pulls; ``regret`` ``(B,)`` over the online rounds; ``initial_error`` ``(K, B)``: the
        estimation error when inference starts; ``optimal_value`` (``V*``, exact) and
        ``checkpoints`` ``(C,)``.
    """
    from threadpoolctl import threadpool_limits

    # One BLAS thread: the same seed gives the same numbers on one process, many, or Ray.
    with threadpool_limits(1):
        return _run_chunk(config, n_trials, seed)


def _run_chunk(config: EnsembleStudyConfig, n_trials: int, seed) -> dict[str, np.ndarray]:
    from agents import EnsembleSampling
    from inference import build_stack
    from lrbandit_gym import Decision
    from lrbandit_gym.experiments.studies import make_study_env

    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    env_seed, agent_seed, warm_seed = ss.spawn(3)
    venv = make_study_env(config, n_trials)
    agent = EnsembleSampling(
        venv,
        rank=config.rank,
        n_models=config.n_models,
        prior_std_u=config.prior_std_u,
        prior_std_v=config.prior_std_v,
        noise_std=config.noise_std,
        perturbation_std=config.perturbation_std,
        als_sweeps=config.als_sweeps,
        seed=agent_seed,
    )
    view = EnsembleMeanPredictor(agent, warm_start=config.warm_start)
    env = build_stack(venv, estimator=view, propensities="estimated")
    base = venv.unwrapped
    checkpoints = list(config.checkpoints)
    C, K, B = len(checkpoints), config.n_actions, n_trials
    out = {
        key: np.full((C, B), np.nan)
        for key in (
            "value_estimate",
            "value_se",
            "plug_in:value_estimate",
            "plug_in:value_se",
            "exploration",
        )
    }
    out["estimation_error"] = np.full((C, K, B), np.nan)
    out["initial_error"] = np.full((K, B), np.nan)
    out["pulls"] = np.zeros((C, K, B), dtype=np.int64)
    out["regret"] = np.zeros(B)
    rows = np.arange(B)
    warm_rng = np.random.default_rng(warm_seed)
    uniform = np.full((B, K), 1.0 / K)
    sum_q = np.zeros(B)  # sum_t q_t: the plug-in (direct) term of eq. (A.2)
    sum_e = np.zeros(B)  # sum_t e_hat_t

    def error():
        diff = agent.estimates - base.true_params[None]  # (B, K, d1, d2)
        return np.linalg.norm(diff, axis=(-2, -1)).T

    obs, _ = env.reset(seed=int(env_seed.generate_state(1)[0]))
    online = 0
    counts0 = np.zeros((B, K), dtype=np.int64)
    while online < checkpoints[-1]:
        if view.initialized:
            if online == 0:
                out["initial_error"] = error()
                counts0 = agent.counts
            eta = agent.ensemble_mean_predictions(obs)  # (B, K), before this round's update
            decision = agent.act(obs)
            sum_q += eta.max(axis=1)
            sum_e += 1.0 - decision.propensities[rows, eta.argmax(axis=1)]
        else:  # warm start: uniformly random actions, learned from but not inferred on
            decision = Decision(warm_rng.integers(0, K, size=B), uniform)
        was_online = view.initialized
        next_obs, reward, _, _, info = env.step(decision)
        agent.update(obs, decision, reward)
        obs = next_obs
        if not was_online:
            continue
        online += 1
        out["regret"] += info["regret"]
        if online not in checkpoints:
            continue
        c = checkpoints.index(online)
        ci = env.interval()
        out["value_estimate"][c] = ci.estimate
        out["value_se"][c] = ci.standard_error
        out["plug_in:value_estimate"][c] = sum_q / online
        out["plug_in:value_se"][c] = ci.standard_error
        out["exploration"][c] = sum_e / online
        out["estimation_error"][c] = error()
        out["pulls"][c] = (agent.counts - counts0).T
    out["optimal_value"] = np.array(base.optimal_value)
    out["checkpoints"] = np.asarray(checkpoints)
    return out


def run_ensemble_study(
    config: EnsembleStudyConfig,
    n_trials: int,
    seed: int = 0,
    batch_size: int = 125,
    map_fn: Callable | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, np.ndarray]:
    """Run ``n_trials`` trials in chunks of ``batch_size`` (the last may be smaller).

    Chunk ``i`` is seeded by the ``i``-th child of ``SeedSequence(seed)`` whatever runs it,
    as in :func:`.studies.run_study` (the engine of :mod:`~lrbandit_gym.experiments.montecarlo`):
    ``map_fn(fn, list_of_args)`` (a process pool's or Ray's map) may schedule chunks
    anywhere and the merged result is the same.
    Memory: about 2.6 MB per trial of a chunk at the paper's sizes (the ensemble's
    sufficient statistics, see :func:`agents.ensemble.ensemble_memory_bytes`).

    Returns
    -------
    dict of str to ndarray
        The arrays of :func:`run_ensemble_chunk`, trials concatenated along the last axis.

    Raises
    ------
    RunInterrupted
        On Ctrl-C after a chunk finished: ``result`` merges the chunks that finished
        (:class:`~.parallel.RunInterrupted`); before, the ``KeyboardInterrupt`` itself.
    """
    if not isinstance(config, EnsembleStudyConfig):
        raise ValueError(f"config must be an EnsembleStudyConfig; got {type(config).__name__}")
    n_trials = _positive_int(n_trials, "n_trials")
    batch_size = _positive_int(batch_size, "batch_size")
    return run_trials(
        run_ensemble_chunk,
        config,
        n_trials,
        seed,
        batch_size,
        merge_ensemble_chunks,
        map_fn=map_fn,
        progress=progress,
    )


def merge_ensemble_chunks(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The chunks' results as one: ``optimal_value`` and ``checkpoints`` kept once, the
    per-trial arrays concatenated along their last axis."""
    merged = merge_trials(chunks, shared=("optimal_value", "checkpoints"))
    return {key: merged[key] for key in ("optimal_value", "checkpoints", *_PER_TRIAL)}
