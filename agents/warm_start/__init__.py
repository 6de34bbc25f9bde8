"""The warm start of the low-rank SGD: ``M_init`` from a first phase of rounds, by eq. (10).

Algorithm 1 starts from an estimate within the noise level of the truth (docs/method.md
§3).  The warm start fits it, for every arm ``a``, by nuclear-norm penalised weighted least
squares on the phase's rounds,

    M_init,a = argmin_M  (1 / (2 W_a)) Σ_{t: a_t = a} w_t (y_t − <M, X_t>)²  +  λ_a ‖M‖_*    (10)

:class:`WarmStart` (:mod:`~agents.warm_start.phase`) runs the phase for the low-rank
policies and for the inference wrappers' own estimator alike: its sizing, the memory its
rounds are kept in, the fit, the held-out check, the rollback of a failed fit and its
saved state.  The modules of the package, in the order a round meets them:

* :mod:`~agents.warm_start.rules`: how many rounds (:func:`default_warm_start_rounds`),
  and how an arm with too few of them starts;
* the stores of the rounds: :mod:`~agents.warm_start.store` (what every store shares),
  :mod:`~agents.warm_start.dense` (:class:`WarmStartBuffer`, the contexts),
  :mod:`~agents.warm_start.completion` (:class:`CompletionWarmStartBuffer`, completion
  contexts as indices), :mod:`~agents.warm_start.streaming` (:class:`StreamingWarmStart`,
  one pass with memory independent of the length) and
  :mod:`~agents.warm_start.memory_pool` (successive buffers sharing their storage);
* the fit: :mod:`~agents.warm_start.fit` (:func:`nuclear_norm_fit`,
  :func:`initial_estimate`) on the data :mod:`~agents.warm_start.inputs` checks, by
  :mod:`~agents.warm_start.factored` (rank-r factored form, on dense contexts, or
  :mod:`~agents.warm_start.factored_completion` on indices; both built on
  :mod:`~agents.warm_start.alternating`) or :mod:`~agents.warm_start.proximal` (FISTA and
  singular value thresholding);
* :mod:`~agents.warm_start.check`: whether ``M_init`` is close enough to the truth for the
  theory, from held-out rounds;
* :mod:`~agents.warm_start.extension`: when the default length is too short for the signal
  (the error against the differences between arms), and the rule that extends it.
"""

from agents.warm_start.check import WarmStartCheck, WarmStartWarning, check_warm_start
from agents.warm_start.completion import CompletionWarmStartBuffer, completion_buffer_bytes
from agents.warm_start.dense import WarmStartBuffer, warm_start_buffer_bytes
from agents.warm_start.fit import DEFAULT_PENALTY_SCALE, initial_estimate, nuclear_norm_fit
from agents.warm_start.memory_pool import reuse_buffer_memory
from agents.warm_start.phase import DEFAULT_MAX_MEMORY_BYTES, WarmStart
from agents.warm_start.proximal import NuclearNormFit
from agents.warm_start.rules import (
    COMPLETION_MAX_FACTOR,
    ROUNDS_PER_DOF,
    START_SCALE,
    default_warm_start_rounds,
    min_warm_start_pulls,
    recovery_rounds,
)
from agents.warm_start.streaming import (
    WARM_START_FITS,
    StreamingWarmStart,
    choose_warm_start_fit,
    default_streaming_rounds,
    streaming_warm_start_bytes,
)

__all__ = [
    "COMPLETION_MAX_FACTOR",
    "DEFAULT_MAX_MEMORY_BYTES",
    "DEFAULT_PENALTY_SCALE",
    "ROUNDS_PER_DOF",
    "START_SCALE",
    "WARM_START_FITS",
    "CompletionWarmStartBuffer",
    "NuclearNormFit",
    "StreamingWarmStart",
    "WarmStart",
    "WarmStartBuffer",
    "WarmStartCheck",
    "WarmStartWarning",
    "check_warm_start",
    "choose_warm_start_fit",
    "completion_buffer_bytes",
    "default_streaming_rounds",
    "default_warm_start_rounds",
    "initial_estimate",
    "min_warm_start_pulls",
    "nuclear_norm_fit",
    "recovery_rounds",
    "reuse_buffer_memory",
    "streaming_warm_start_bytes",
    "warm_start_buffer_bytes",
]
