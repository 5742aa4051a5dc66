"""The multi-step kernel's counter-based noise stream (:mod:`smdengine.nrq._multistep`, its module
docstring) as NumPy code, with no Triton: a Philox-4×32 written from the Random123 paper (Salmon et al.,
SC'11) and checked against its published known-answer vectors, the stream's normals from it, and the
stream in torch ops that bench/normal_source.py times on the CPU checked against them.
tests/engine/test_multistep.py checks the kernel against the same oracle."""
from __future__ import annotations

import numpy as np
import torch


def philox4x32(counter, key, rounds: int = 10) -> list[np.ndarray]:
    """Philox-4×32 (Random123): per round, (hi, lo) of M0·c0 and M1·c2; the key bumped by the Weyl constants."""
    c = [np.asarray(v, dtype=np.uint64) for v in counter]
    k0, k1 = (np.asarray(v, dtype=np.uint64) for v in key)
    low = np.uint64(0xFFFFFFFF)
    for _ in range(rounds):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & low, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & low]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & low, (k1 + np.uint64(0xBB67AE85)) & low
    return [v.astype(np.uint32) for v in c]


def oracle_radii_and_normals(seed: int, trials: np.ndarray, step: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(r, ε), each (len(trials), p), of the stream as the kernel's module docstring defines it: the float32
    uniforms and angles as the kernel rounds them, then log, √, cos and sin in float64; r is the radius that
    scales each ε."""
    q = 1 << (-(-p // 8) - 1).bit_length()   # ⌈p/8⌉ rounded up to a power of two
    i = np.arange(q, dtype=np.uint64)[None, :]
    t = np.asarray(trials, dtype=np.uint64)[:, None]
    zero = np.zeros_like(i * t)
    f32 = np.float32

    def radius(word: np.ndarray) -> np.ndarray:
        u = word.astype(f32) * f32(2.0**-32) + f32(2.0**-33)   # float32 arithmetic, as the kernel's
        return np.sqrt(-2.0 * np.log(u.astype(np.float64)))

    def angle(word: np.ndarray) -> np.ndarray:
        return (word.view(np.int32).astype(f32) * f32(2 * np.pi * 2.0**-32)).astype(np.float64)

    radii, blocks = [], []
    for half in (0, 1):   # blocks 4·half … 4·half + 3
        w = philox4x32((i + zero, t + zero, zero + step, zero + half), (seed & 0xFFFFFFFF, seed >> 32))
        r0, r2, t1, t3 = radius(w[0]), radius(w[2]), angle(w[1]), angle(w[3])
        radii += [r0, r0, r2, r2]
        blocks += [r0 * np.cos(t1), r0 * np.sin(t1), r2 * np.cos(t3), r2 * np.sin(t3)]
    return np.concatenate(radii, axis=1)[:, :p], np.concatenate(blocks, axis=1)[:, :p]


def test_the_oracle_gives_random123s_known_answers():
    vectors = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
               ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
               ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
                (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for counter, key, want in vectors:
        assert [int(w) for w in philox4x32(counter, key)] == list(want)


def test_the_cpu_counter_stream_of_the_bench_is_the_oracles(monkeypatch):
    """bench/normal_source.py times the stream in torch ops on the CPU: it must be this stream."""
    import importlib
    import pathlib
    import sys

    monkeypatch.setattr(sys, "path", [str(pathlib.Path(__file__).parents[2] / "bench"), *sys.path])   # restored
    bench = importlib.import_module("normal_source")
    del sys.modules["normal_source"]   # not left imported for other tests
    for seed, p in ((12345, 10), (2**63 + 5, 100), (7, 1000)):
        got = bench.counter_normals(seed, torch.arange(5, dtype=torch.int32), 77, p, torch.float64).numpy()
        _, want = oracle_radii_and_normals(seed, np.arange(5), 77, p)
        np.testing.assert_allclose(got, want, rtol=0, atol=7e-6)   # float32 functions (the draw test's bound)
