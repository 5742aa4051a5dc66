"""A ``seed`` axis sets each child's seed when the study has no ``seeds`` list (it was overwritten by
the base's seed), and the table's ``seed`` column shows it; a ``seeds`` list still repeats every point with
each seed; both at once are refused at ``seeds``."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from smdengine import ChildRecord, StudySpec, expand_study, group_by_point, study_table
from tests.conftest import small_spec


def test_a_seed_axis_sets_the_childs_seed():
    children = expand_study({"base": small_spec(), "grid": {"seed": [5, 6]}})
    assert [(c.seed, c.spec.seed) for c in children] == [(5, 5), (6, 6)]


def test_seeds_repeat_every_point_and_default_to_the_base_seed():
    children = expand_study({"base": small_spec(), "grid": {"params.lr": [0.1, 0.2]}, "seeds": [1, 2]})
    assert [(c.point, c.seed, c.spec.seed) for c in children] == [(0, 1, 1), (0, 2, 2), (1, 1, 1), (1, 2, 2)]
    assert [c.seed for c in expand_study({"base": small_spec(), "grid": {"params.lr": [0.1]}})] == [3]


@pytest.mark.parametrize("axes, where, seeds", [
    ({"grid": {"params.lr": [0.1, 0.2], "seed": [5, 6]}}, "the grid axis `seed`", [5, 6, 5, 6]),
    ({"zip": {"seed": [5, 6], "params.lr": [0.1, 0.2]}}, "the zip axis `seed`", [5, 6]),
    ({"points": [{"params.lr": 0.1}, {"params.lr": 0.2, "seed": 6}]}, "`seed` in point 1", [3, 6]),
])
def test_a_seed_axis_with_seeds_is_refused_at_seeds(axes, where, seeds):
    """Both would set the children's seeds: ``seeds`` used to win silently (the same run repeated per point)
    while the table's ``seed`` column showed the axis's values."""
    with pytest.raises(ValidationError) as info:
        StudySpec.model_validate({"base": small_spec(), **axes, "seeds": [1, 2]})
    [error] = info.value.errors()
    assert error["loc"] == ("seeds",) and error["type"] == "seeds_and_seed_axis"
    assert error["msg"] == ("give the seeds either as an axis on `seed` or as `seeds`, not both "
                            f"(this study has `seeds` and {where})")
    with pytest.raises(ValidationError, match="not both"):
        expand_study({"base": small_spec(), **axes, "seeds": [1]})
    assert [c.seed for c in expand_study({"base": small_spec(), **axes})] == seeds   # the axis alone is fine


def test_the_table_of_a_seed_axis_shows_each_childs_seed():
    """Without ``seeds`` the ``seed`` column of the table (and of the grouped table) is the seed each child ran."""
    children = expand_study({"base": small_spec(), "grid": {"params.lr": [0.1, 0.2], "seed": [5, 6, 7]}})
    records = [ChildRecord(c.index, c.point, c.values, c.seed, "succeeded", c.spec.model_dump(mode="json"),
                           {"risk": 0.1 * c.seed}) for c in children]
    rows = study_table(records)
    assert [r["seed"] for r in rows] == [5, 6, 7, 5, 6, 7]
    assert [r["seed"] for r in rows] == [c.spec.seed for c in children]
    assert [r["params.lr"] for r in rows] == [0.1] * 3 + [0.2] * 3
    grouped = group_by_point(rows, ["params.lr", "seed"])
    assert [(g["params.lr"], g["seed"], g["n"]) for g in grouped] == [(0.1, s, 1) for s in (5, 6, 7)] + [
        (0.2, s, 1) for s in (5, 6, 7)]
    assert [g["risk"] for g in grouped] == pytest.approx([0.5, 0.6, 0.7] * 2)
