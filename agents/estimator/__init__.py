"""The online low-rank SGD estimator, Algorithm 1 (:class:`LowRankSGD`).

:mod:`agents.estimator.sgd` holds the class and the paper's step in plain numpy
(:func:`sgd_step_reference`); beside it: the factors and a round's context products
(:mod:`~agents.estimator.factors`, :mod:`~agents.estimator.products`), saving and restoring
(:mod:`~agents.estimator.persistence`), the balancing of Lemma 2.1
(:mod:`~agents.estimator.balancing`), the step size (:mod:`~agents.estimator.step_size`),
the divergence guard (:mod:`~agents.estimator.divergence`) and the numba kernels
(:mod:`~agents.estimator.kernels`).
"""

from agents.estimator.sgd import (
    DIVERGENCE_FACTOR,
    LowRankSGD,
    ProposedStep,
    PulledArms,
    sgd_step_reference,
)

__all__ = ["DIVERGENCE_FACTOR", "LowRankSGD", "ProposedStep", "PulledArms", "sgd_step_reference"]
