"""Experiments built on the environment, the agents and the inference: the paper's studies
(:mod:`~lrbandit_gym.experiments.reproduce.run`), their figures, the speed benchmarks, the demo
and the ``lrbandit`` command line.

This is the top layer: it imports :mod:`lrbandit_gym`'s core, :mod:`agents` and
:mod:`inference`, and none of them imports it (``lint-imports`` checks the direction).
"""

from lrbandit_gym.package_check import check_companion, companion_error

for _name, _attribute in (("agents", "LowRankSGD"), ("inference", "LinearFormInference")):
    try:  # both must be lrbandit-gym's packages (see lrbandit_gym.package_check)
        _module = __import__(_name)
    except ImportError as _exc:
        if _exc.msg.startswith("the top-level package"):
            raise  # already explained by inference's own check
        raise companion_error(_name, f"importing it failed: {_exc!r}") from _exc
    except Exception as _exc:
        raise companion_error(_name, f"importing it failed: {_exc!r}") from _exc
    check_companion(_module, _name, _attribute)
