"""max_points downsampling of the result document (issue 20): downsample=minmax keeps each bucket's
extremes of every series on one common set of steps, so a transient after a schedule change survives."""
from __future__ import annotations

from tests.api.test_studies import run_all
from tests.conftest import small_spec


def test_minmax_downsampling_keeps_a_transient_that_even_spacing_steps_over():
    from api.results import downsample_indices, minmax_indices

    n, spike = 10_000, 4_321
    risk = [1.0] * n
    risk[spike] = 50.0            # a transient one point wide, off the even grid
    norm = [float(i % 7) for i in range(n)]
    assert spike not in downsample_indices(n, 100)
    keep = minmax_indices([risk, norm, [[1, 2]] * n, [None] * n], n, 100)   # lists and nulls are skipped
    assert spike in keep and len(keep) <= 100 and keep[0] == 0 and keep[-1] == n - 1 and keep == sorted(set(keep))
    assert minmax_indices([risk], 50, 100) == list(range(50))


def test_results_downsample_minmax_is_aligned_and_validated(env):
    client, settings = env
    r = client.post("/v1/experiments", json=small_spec(trials=8, steps=2000, record_every=10,
                                                       lr_schedule=[{"step": 1234, "lr_factor": 20.0}]))
    run_all(settings)
    experiment_id = r.json()["id"]
    full = client.get(f"/v1/experiments/{experiment_id}/results").json()
    doc = client.get(f"/v1/experiments/{experiment_id}/results",
                     params={"max_points": 40, "downsample": "minmax"}).json()
    steps = doc["series"]["step"]
    assert len(steps) <= 40 and steps[0] == 0 and steps[-1] == full["series"]["step"][-1]
    assert all(len(v) == len(steps) for v in doc["series"].values())
    assert all(len(v) == len(steps) for v in doc["theory"].values() if isinstance(v, list))
    index = {s: i for i, s in enumerate(full["series"]["step"])}
    for name, values in doc["series"].items():    # every kept point is the stored point at that step
        assert values == [full["series"][name][index[s]] for s in steps], name
    assert max(doc["series"]["eff_lr"]) == max(full["series"]["eff_lr"])   # the peak after the lr jump
    bad = client.get(f"/v1/experiments/{experiment_id}/results", params={"max_points": 40, "downsample": "max"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "downsample"]
