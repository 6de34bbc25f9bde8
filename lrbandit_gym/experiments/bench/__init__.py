"""``lrbandit bench``: the speed benchmarks.

:mod:`.run` times the environment, the agents and the inference; :mod:`.estimator`,
:mod:`.laws`, :mod:`.logs`, :mod:`.warm_start` and :mod:`.completion` one subject each.
"""

from lrbandit_gym.experiments.bench.completion import (
    bench_completion,
    completion_coverage,
    completion_step_scale,
)
from lrbandit_gym.experiments.bench.estimator import bench_estimator, naive_sgd_step
from lrbandit_gym.experiments.bench.laws import bench_laws
from lrbandit_gym.experiments.bench.logs import bench_logs
from lrbandit_gym.experiments.bench.run import (
    bench_agents,
    bench_env,
    bench_inference,
    bench_study_round,
    best_times,
)
from lrbandit_gym.experiments.bench.warm_start import bench_warm_start, warm_start_run

__all__ = [
    "bench_agents",
    "bench_completion",
    "bench_env",
    "bench_estimator",
    "bench_inference",
    "bench_laws",
    "bench_logs",
    "bench_study_round",
    "bench_warm_start",
    "best_times",
    "completion_coverage",
    "completion_step_scale",
    "naive_sgd_step",
    "warm_start_run",
]
