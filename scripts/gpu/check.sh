#!/usr/bin/env bash
# Issues 19 and 35 on the lent GPU machine, in one call of the device tool (it runs in the repository
# root there, with .whl carried: scripts/gpu/wheels.sh makes it here). Phases, each under its own limit
# so that the whole stays inside one 10-minute call:
#     bash scripts/gpu/check.sh [env] [invariance] [tests] [serve] [bench] [sde] [study]
#     # default: env tests serve bench sde study
#   env    the GPU, torch, the copy bandwidth and the wheels installed into /tmp/site
#   invariance  bench/batch_invariance.py: which reductions depend on the batch's row count   (≤ 30 s)
#   tests  tests/engine (or the node ids in CHECK_TESTS) with --device cuda (every engine run on the GPU), CHECK_WORKERS processes
#          (15), distributed by CHECK_DIST (load), interrupted after CHECK_TEST_SECONDS (250; killed
#          15 s later if it does not stop)
#   serve  `smd serve` (embedded SQLite and broker) runs a device: cuda and a device: auto job end to
#          end; their provenance names the GPU                                                (≤ 60 s)
#   bench  bench/nrq_gpu.py (--seconds CHECK_BENCH_SECONDS, 0.1; --dtypes CHECK_DTYPES, float32),
#          bench/fused_sweep.py --device cuda --theory-ab 10 --parts --profile 30, bench/train_overhead.py --device cuda
#          and bench/norm_stats.py --device cuda
#          (left out when CHECK_TRAIN=0)                                                       (≤ 200 s)
#   sde    bench/sde_vs_torchsde.py --device cuda --quick --throughput-only (torchsde from .whl) (≤ 60 s)
#   study  `smd serve` with a GPU worker (SMD_WORKER_QUEUES=gpu,cpu) runs a 64-point nrq study
#          submitted over HTTP, device cuda, then the same study with device cpu; wall times  (≤ 150 s)
# Logs go to $OUT (the device tool brings them back); the last lines printed are a short summary.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PHASES=("$@")
[ ${#PHASES[@]} -eq 0 ] && PHASES=(env tests serve bench sde study)
SUMMARY=()
note() { SUMMARY+=("$1"); echo "== $1"; }
# `smd serve` (embedded SQLite and broker, auth off) in its own process group on port $1, state in $2, log $3;
# back once /healthz answers (≤ 40 s). serve_stop ends the group.
serve_start() {
  export SMD_PORT=$1 SMD_STATE_DIR=$2 SMD_AUTH=off
  rm -rf "$SMD_STATE_DIR"
  setsid python3 -m smdcli.main serve > "$3" 2>&1 &
  server=$!
  python3 - <<'PY'
import os, time, httpx
for _ in range(200):
    try:
        if httpx.get(f"http://127.0.0.1:{os.environ['SMD_PORT']}/healthz", timeout=5).status_code == 200:
            break
    except httpx.TransportError:
        pass
    time.sleep(0.2)
PY
}
serve_stop() {
  kill -- -"$server" 2>/dev/null
  for _ in $(seq 20); do kill -0 "$server" 2>/dev/null || break; sleep 0.5; done
  kill -9 -- -"$server" 2>/dev/null
}

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "wheels: install from .whl failed (run scripts/gpu/wheels.sh here and carry .whl)"; exit 1; }
else
  echo "no .whl here: using the packages python3 has"
fi
export PYTHONPATH=/tmp/site:$PWD
# the serve phase's jobs: their spec's device field (CHECK_DEVICES="cpu auto" tries the phase on a CPU)
export CHECK_DEVICES=${CHECK_DEVICES:-cuda auto}

for phase in "${PHASES[@]}"; do
  case $phase in
  env)
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/env.txt"
    python3 - <<'PY' 2>&1 | tee -a "$OUT/env.txt"
import time, torch, smdengine
d = torch.device("cuda")
p = torch.cuda.get_device_properties(d)
print(f"torch {torch.__version__}, {p.name}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB; "
      f"auto resolves to {smdengine.resolve_device('auto')}; "
      f"triton {smdengine.provenance({'kind': 'nrq', 'device': 'cuda'}).get('triton')}")
src = torch.rand(2**28, device=d); dst = torch.empty_like(src); dst.copy_(src); torch.cuda.synchronize()
ts = []
for _ in range(10):
    t0 = time.perf_counter(); dst.copy_(src); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
print(f"copy bandwidth {2 * src.numel() * 4 / sorted(ts)[5] / 1e9:.0f} GB/s (read + write)")
PY
    note "env: $(tail -1 "$OUT/env.txt")"
    ;;
  invariance)
    timeout 30 python3 bench/batch_invariance.py 2>&1 | tee "$OUT/batch_invariance.txt"
    note "invariance: the Triton update is the same in $(grep -c 'triton update (sq): same' "$OUT/batch_invariance.txt") of $(grep -c p= "$OUT/batch_invariance.txt") rows"
    ;;
  tests)
    # SIGINT first: pytest then still prints its failures and summary; no globbing of CHECK_TESTS' [ids]
    set -f
    OMP_NUM_THREADS=1 timeout -s INT -k 15 "${CHECK_TEST_SECONDS:-250}" python3 -m pytest -q -p no:cacheprovider \
        -n "${CHECK_WORKERS:-15}" --dist "${CHECK_DIST:-load}" --durations=30 \
        ${CHECK_TESTS:-tests/engine} --device cuda \
        --junitxml="$OUT/engine-cuda.xml" -rfE > "$OUT/tests.log" 2>&1
    rc=$?
    tail -40 "$OUT/tests.log"
    note "tests (rc $rc): $(tail -1 "$OUT/tests.log")"
    ;;
  serve)
    # device: cuda jobs go to the gpu queue (worker/queue.py); the embedded worker listens to cpu alone by default
    export SMD_WORKER_QUEUES=cpu,gpu
    serve_start 8765 /tmp/smd-gpu "$OUT/serve.log"
    timeout 50 python3 - <<'PY' 2>&1 | tee "$OUT/serve.txt"
import os, time, httpx
c = httpx.Client(base_url="http://127.0.0.1:8765", timeout=10)
params = {"dim": 100, "trials": int(os.environ.get("CHECK_TRIALS", 10000)), "steps": 2000, "record_every": 50, "lr": 0.1, "weight_decay": 0.01,
          "noise_std": 1.0, "dtype": "float32"}
ids = {dev: c.post("/v1/experiments", json={"kind": "nrq", "seed": 0, "device": dev, "params": params}).json()["id"]
       for dev in os.environ["CHECK_DEVICES"].split()}
deadline = time.monotonic() + 38
for dev, i in ids.items():
    while (status := c.get(f"/v1/experiments/{i}").json()["status"]) not in ("succeeded", "failed", "cancelled"):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    doc = c.get(f"/v1/experiments/{i}/results").json()
    prov = ((doc.get("provenance") or {}).get("attempts") or [{}])[-1]
    s = doc.get("summary") or {}
    print(f"device {dev}: {status}; ran on {prov.get('device')} ({prov.get('device_name')}); "
          f"au_rms {s.get('au_rms')} vs au_equilibrium {s.get('au_equilibrium')}", flush=True)
PY
    serve_stop
    note "serve: $(tr '\n' ' ' < "$OUT/serve.txt" | cut -c1-400)"
    ;;
  bench)
    timeout 40 python3 bench/fused_sweep.py --device cuda --repeat 3 --theory-ab 10 --parts --profile 30 > "$OUT/fused_sweep.txt" 2>&1
    rc2=$?
    sed -n '/^device /,/^load /p' "$OUT/fused_sweep.txt"   # the summary; the host profiles follow it in the file
    timeout 130 python3 bench/nrq_gpu.py --seconds "${CHECK_BENCH_SECONDS:-0.1}" --dtypes "${CHECK_DTYPES:-float32}" \
        > "$OUT/nrq_gpu.txt" 2>&1; rc1=$?
    cat "$OUT/nrq_gpu.txt"
    rc3=skipped
    if [ "${CHECK_TRAIN:-1}" != 0 ]; then
      timeout 40 python3 bench/train_overhead.py --device cuda --pairs 3 --rows mlp,cnn > "$OUT/train_overhead.txt" 2>&1; rc3=$?
      tail -6 "$OUT/train_overhead.txt"
      # which norm statistics the train kind should take on the GPU (it keeps torch.var_mean there)
      timeout 30 python3 bench/norm_stats.py --device cuda --repeat 5 > "$OUT/norm_stats.txt" 2>&1
      cat "$OUT/norm_stats.txt"
    fi
    note "bench: nrq_gpu rc $rc1, fused_sweep rc $rc2, train_overhead rc $rc3 (124: ran out of its time)"
    ;;
  sde)
    timeout 60 python3 bench/sde_vs_torchsde.py --device cuda --quick --throughput-only --dims 100 --dtypes float32 \
        > "$OUT/sde_vs_torchsde.txt" 2>&1
    rc=$?
    tail -8 "$OUT/sde_vs_torchsde.txt"
    note "sde (rc $rc): $(grep -m1 '^ *100 *float32' "$OUT/sde_vs_torchsde.txt" | tr -s ' ')"
    ;;
  study)
    export SMD_WORKER_QUEUES=gpu,cpu
    serve_start 8766 /tmp/smd-study "$OUT/study-serve.log"
    timeout 140 python3 - <<'PY' 2>&1 | tee "$OUT/study.txt"
import os, time, httpx
c = httpx.Client(base_url="http://127.0.0.1:8766", timeout=30)
lrs = [0.01 * 2 ** (i / 2) for i in range(8)]
wds = [1e-3 * 2 ** (i / 2) for i in range(8)]
for device in os.environ.get("CHECK_STUDY_DEVICES", "cuda cpu").split():
    limit = 50 if device == "cuda" else 70
    base = {"kind": "nrq", "seed": 0, "device": device,
            "params": {"dim": 10, "trials": 1000, "steps": 2000, "record_every": 100, "dtype": "float32"}}
    t0 = time.monotonic()
    r = c.post("/v1/studies", json={"base": base, "grid": {"params.lr": lrs, "params.weight_decay": wds}})
    if r.status_code >= 300:
        print(f"study {device}: {r.status_code} {r.text[:300]}", flush=True)
        continue
    sid = r.json()["id"]
    while (doc := c.get(f"/v1/studies/{sid}").json())["status"] in ("queued", "running"):
        if time.monotonic() - t0 > limit:
            break
        time.sleep(0.25)
    wall = time.monotonic() - t0
    print(f"study device {device}: {doc['status']} in {wall:.1f} s (64 points × 1000 trials × 2000 steps, p = 10); "
          f"counts {doc.get('counts')}", flush=True)
PY
    serve_stop
    note "study: $(tr '\n' ' ' < "$OUT/study.txt" | cut -c1-500)"
    ;;
  *) echo "unknown phase $phase (env, invariance, tests, serve, bench, sde, study)"; exit 2 ;;
  esac
done
printf '%s\n' "${SUMMARY[@]}"
