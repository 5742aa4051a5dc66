"""max_points downsampling of the result document (issue 20): downsample=minmax keeps each bucket's
extremes of every series on one common set of steps, so a transient after a schedule change survives."""
from __future__ import annotations

from tests.api.test_studies import run_all
from tests.conftest import small_spec


def test_minmax_downsampling_keeps_a_transient_that_even_spacing_steps_over():
    from smdrender.downsample import downsample_indices, minmax_indices

    n, spike = 10_000, 4_321
    risk = [1.0] * n
    risk[spike] = 50.0            # a transient one point wide, off the even grid
    norm = [float(i % 7) for i in range(n)]
    assert spike not in downsample_indices(n, 100)
    keep = minmax_indices([risk, norm, [[1, 2]] * n, [None] * n], n, 100)   # lists and nulls are skipped
    assert spike in keep and len(keep) <= 100 and keep[0] == 0 and keep[-1] == n - 1 and keep == sorted(set(keep))
    assert minmax_indices([risk], 50, 100) == list(range(50))


def reference_extremes(columns, n, buckets):
    """Each column's first minimum and maximum in each of ``buckets`` equal buckets, NaN skipped: plain Python."""
    keep = {0, n - 1}
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        for column in columns:
            window = [(v, i) for i, v in enumerate(column[lo:hi], lo) if v == v]
            if window:
                keep.add(min(window, key=lambda p: (p[0], p[1]))[1])
                keep.add(max(window, key=lambda p: (p[0], -p[1]))[1])
    return sorted(keep)


def test_minmax_matches_a_plain_bucket_scan_and_uses_the_room_it_has():
    import random

    from smdrender.downsample import _bucket_extremes, minmax_indices

    rng = random.Random(7)
    n = 5_003
    walks = []
    for _ in range(3):
        x, walk = 0.0, []
        for _ in range(n):
            x += rng.gauss(0, 1)
            walk.append(x if rng.random() > 0.01 else float("nan"))
        walks.append(walk)
    import numpy as np

    for buckets in (1, 7, 64, 999):
        assert _bucket_extremes(np.array(walks), buckets) == reference_extremes(walks, n, buckets), buckets
    keep = minmax_indices(walks, n, 200)
    assert len(keep) <= 200 and keep == sorted(set(keep))
    # buckets tried: (200 − 2) // 2 = 99, halved to 49, then the floor (200 − 2) // (2 × 3) = 33, which fits
    tried = [reference_extremes(walks, n, b) for b in (99, 49, 33)]
    first_fit = next(t for t in tried if len(t) <= 200)
    assert keep == first_fit
    # Related series (one a scaled copy of another) share their extremes, so they cost no room: with
    # twice the columns the buckets are those of the three alone (99, 49, 24, then the floor 16).
    scaled = [[2 * v for v in walk] for walk in walks]
    tried = [reference_extremes(walks, n, b) for b in (99, 49, 24, 16)]
    assert minmax_indices(walks + scaled, n, 200) == next(t for t in tried if len(t) <= 200)
    same = [walks[0]] * 10
    assert minmax_indices(same, n, 200) == reference_extremes(same[:1], n, 99)   # (200 − 2) // 2 buckets


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
