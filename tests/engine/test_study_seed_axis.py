"""A ``seed`` axis sets each child's seed when the study has no ``seeds`` list (it was overwritten by
the base's seed); a ``seeds`` list still repeats every point with each seed."""
from __future__ import annotations

from smdengine import expand_study
from tests.conftest import small_spec


def test_a_seed_axis_sets_the_childs_seed():
    children = expand_study({"base": small_spec(), "grid": {"seed": [5, 6]}})
    assert [(c.seed, c.spec.seed) for c in children] == [(5, 5), (6, 6)]


def test_seeds_repeat_every_point_and_default_to_the_base_seed():
    children = expand_study({"base": small_spec(), "grid": {"params.lr": [0.1, 0.2]}, "seeds": [1, 2]})
    assert [(c.point, c.seed, c.spec.seed) for c in children] == [(0, 1, 1), (0, 2, 2), (1, 1, 1), (1, 2, 2)]
    assert [c.seed for c in expand_study({"base": small_spec(), "grid": {"params.lr": [0.1]}})] == [3]
