"""Experiments built on the environment, the agents and the inference: the paper's studies
(:mod:`~lrbandit_gym.experiments.reproduce`), their figures, the speed benchmarks, the demo
and the ``lrbandit`` command line.

This is the top layer: it imports :mod:`lrbandit_gym`'s core, :mod:`agents` and
:mod:`inference`, and none of them imports it (``lint-imports`` checks the direction).
"""
