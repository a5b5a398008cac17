#!/bin/bash
# record's capture of PyTorch's own requests on the GPU machine (docs/compatibility.md, "Framework
# allocators"): each PyTorch workload of torch_work.py (WORKLOADS, default "train cnn") run as it is
# (caching allocator on, no memory history of its own) plain and under `bin/record`, 2 runs each
# alternating; the trace's torch.alloc / torch.free counts beside PyTorch's own memory_stats()
# (allocation.all.allocated / freed) of the recorded run; max_memory_reserved() with and without
# record; wall time; then `analyze --pytorch-conf` of the trace and a plain run under that setting
# (its max_memory_reserved() beside analyze's prediction). Writes under $1; needs bin/record,
# bin/analyze, python3 with torch and pyarrow.
set -u
D=${1:?usage: framework_check.sh OUTDIR}; mkdir -p "$D"; B=$PWD/bin; W=${WORKLOADS-train cnn}  # WORKLOADS="": none
count() { # count TRACE: torch.alloc / torch.free events per pid, as JSON
  python3 - "$1" <<'PY'
import collections, json, sys
import pyarrow as pa
t = pa.ipc.open_file(sys.argv[1]).read_all()
fn, pid = t.column("function").to_pylist(), t.column("pid").to_pylist()
c = collections.Counter((p, f) for p, f in zip(pid, fn) if f.startswith("torch."))
print(json.dumps({f"{p} {f}": n for (p, f), n in sorted(c.items())}))
PY
}
for w in $W; do
  for k in 1 2; do
    t0=$(date +%s%N); python3 bench/torch_work.py "$w" "$D/plain$k" --no-history > "$D/$w.plain$k.out" 2>&1
    t1=$(date +%s%N); "$B/record" -q -o "$D/$w.$k.arrow" --shim "$B/liballocscope.so" -- \
      python3 bench/torch_work.py "$w" "$D/rec$k" --no-history > "$D/$w.rec$k.out" 2>"$D/$w.rec$k.err"
    t2=$(date +%s%N)
    echo "$w $k wall_ms plain $(( (t1 - t0) / 1000000 )) record $(( (t2 - t1) / 1000000 ))"
    echo "$w $k plain stats $(tail -1 "$D/$w.plain$k.out")"
    echo "$w $k record stats $(tail -1 "$D/$w.rec$k.out")"
    echo "$w $k trace counts $(count "$D/$w.$k.arrow")"
  done
  conf=$("$B/analyze" --pytorch-conf "$D/$w.1.arrow" 2>"$D/$w.conf.err"); echo "$w pytorch-conf rc $? '$conf' $(cat "$D/$w.conf.err")"
  "$B/analyze" "$D/$w.1.arrow" > "$D/$w.analyze.txt" 2>&1
  "$B/analyze" --json "$D/$w.1.arrow" > "$D/$w.analyze.json" 2>&1
  PYTORCH_CUDA_ALLOC_CONF=$conf python3 bench/torch_work.py "$w" "$D/conf" --no-history > "$D/$w.conf.out" 2>&1
  echo "$w with the setting: $(tail -1 "$D/$w.conf.out")"
done
"$B/record" -q -o "$D/fc.arrow" --shim "$B/liballocscope.so" -- python3 bench/framework_capture.py > "$D/fc.out" 2>&1
echo "framework_capture: $(cat "$D/fc.out" | tr '\n' ' ') counts $(count "$D/fc.arrow")"
# PyTorch as users run it with several processes: torch.multiprocessing.spawn of two, and a DataLoader
# with 2 workers; each training process's memory_stats() beside the trace's events of its pid.
for m in spawn loader; do
  "$B/record" -q -o "$D/$m.arrow" --shim "$B/liballocscope.so" -- python3 bench/torch_procs.py "$m" "$D/$m" \
    > "$D/$m.out" 2>"$D/$m.err"
  echo "$m rc $? stats $(cat "$D/$m"/*.stats.json | tr '\n' ' ') trace counts $(count "$D/$m.arrow")"
done
# CuPy with its default pool: the trace's cupy.malloc / cupy.free beside the program's own hook counts.
"$B/record" -q -o "$D/cupy.arrow" --shim "$B/liballocscope.so" -- python3 bench/cupy_default.py 400 > "$D/cupy.out" 2>"$D/cupy.err"
python3 bench/cupy_default.py 400 > "$D/cupy.plain.out" 2>&1
cmp -s "$D/cupy.out" "$D/cupy.plain.out" && echo "cupy outputs identical" || echo "cupy OUTPUTS DIFFER"
echo "cupy $(tail -1 "$D/cupy.out") trace $(python3 - "$D/cupy.arrow" <<'PY'
import collections, sys
import pyarrow as pa
t = pa.ipc.open_file(sys.argv[1]).read_all()
print(dict(collections.Counter(f for f in t.column("function").to_pylist() if f.startswith("cupy."))))
PY
)"
# JAX as it runs by default (its allocator preallocates 75 % of the GPU): analyze's FRAMEWORK note.
"$B/record" -q -o "$D/jax.arrow" --shim "$B/liballocscope.so" -- python3 bench/jax_work.py 50 > "$D/jax.out" 2>&1
"$B/analyze" "$D/jax.arrow" > "$D/jax.analyze.txt" 2>&1; echo "jax rc $?"; sed -n '/^FRAMEWORK/,/^$/p' "$D/jax.analyze.txt"
grep -n "recommend\|RECOMMENDATION" -A4 "$D/jax.analyze.txt" | head -12
