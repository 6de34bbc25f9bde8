"""Negative controls of the validity studies: the parameter core with one part of the
method removed, whose intervals are invalid by design (docs/method.md §4).

A study that cannot tell them from the method has no power to certify it.  They switch
off one of the core's public flags (:attr:`~inference.LinearFormInference.ipw` or
:attr:`~inference.LinearFormInference.debias`) and never serve for inference.
"""

from __future__ import annotations

from inference import LinearFormInference

__all__ = ["CONTROLS", "NoDebias", "NoIPW"]


class NoIPW(LinearFormInference):
    """The parameter core with weight 1 in place of ``1/π_t(a_t)``: blind to the bias
    that adaptive sampling causes."""

    ipw = False


class NoDebias(LinearFormInference):
    """The parameter core without the correction term: blind to the bias of the low-rank
    estimate itself."""

    debias = False


#: The negative controls by the name a study's ``variants`` gives them.
CONTROLS: dict[str, type[LinearFormInference]] = {"no_ipw": NoIPW, "no_debias": NoDebias}
