"""The Ray backend gives the local backend's numbers, for ``lrbandit reproduce`` and for
comparisons of agents.  Both tests share one local Ray cluster (``ray_session``, started
once for this module: its start is most of their time)."""

import pytest
from helpers import assert_same_comparison, small_comparison

from lrbandit_gym.experiments.reproduce.run import reproduce

pytestmark = pytest.mark.filterwarnings("ignore::inference.InsufficientDataWarning")


def test_reproduce_on_ray_gives_the_local_numbers(tmp_path, ray_session):
    local = reproduce("value", trials=4, n=(40,), seed=1, out=tmp_path / "a", jobs=2, batch_size=2)
    ray = reproduce(
        "value", trials=4, n=(40,), seed=1, out=tmp_path / "b", jobs=2, batch_size=2, backend="ray"
    )
    assert local["rows"] == ray["rows"]


def test_a_comparison_on_ray_gives_the_local_numbers(ray_session):
    assert_same_comparison(small_comparison(1), small_comparison(2, backend="ray"))
