"""Shared test configuration."""

import os

import numpy as np
import pytest


def pytest_collection_modifyitems(config, items):
    """The modules that hold a long statistical study (a ``slow`` test) run first, the rest
    in file order: with the two workers of ``--dist loadscope`` (and
    ``--no-loadscope-reorder``), the longest modules start while the short ones are still
    queued to fill in around them, instead of arriving last and leaving one worker idle."""
    long_modules = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in long_modules)


@pytest.fixture(autouse=True, scope="session")
def one_blas_thread():
    """One BLAS thread, in this process and in the interpreters the tests start, as in the
    library's study workers (``single_threaded_blas``): the tests' products are small, and on
    a busy machine a second BLAS thread only spins waiting for a core.  A thread count the
    caller set in ``OPENBLAS_NUM_THREADS`` is kept for the subprocesses."""
    from threadpoolctl import threadpool_limits

    mp = pytest.MonkeyPatch()
    mp.setenv("OPENBLAS_NUM_THREADS", os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    with threadpool_limits(1, user_api="blas"):
        yield
    mp.undo()


@pytest.fixture(autouse=True, scope="session")
def sb3_logs_in_a_temporary_folder(tmp_path_factory):
    """stable-baselines3 gives every model without a logger a folder of its own under the
    system's temporary folder (``SB3-<date>``); the tests' models log under pytest's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3")))
    yield
    mp.undo()


@pytest.fixture
def awkward_factor_pairs():
    """``make(N)``: N factor pairs (9 x 3, 7 x 3) with uneven column scales, where pair 0 has
    a rank-deficient U, pair 1 a rank-deficient V and pair 2 tiny (1e-9) but full-rank U:
    the cases the balancing must route to its eigendecomposition path or must not."""

    def make(N: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(11)
        d1, d2, r = 9, 7, 3
        U = rng.standard_normal((N, d1, r)) * rng.uniform(0.1, 10, (N, 1, r))
        V = rng.standard_normal((N, d2, r))
        U[0, :, 2] = 0.0  # rank-deficient U
        V[1, :, 0] = V[1, :, 1]  # rank-deficient V
        U[2] *= 1e-9  # tiny but full rank
        return U, V

    return make


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray cluster for a module's tests of the Ray backend (its start is most of
    their time; the backend joins a running cluster and leaves it running), shut down after
    the module: an idle cluster's processes keep using a few percent of a core, taken from
    the worker's later modules."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
