#!/bin/bash
# record's capture of PyTorch programs of several processes on the GPU machine (docs/compatibility.md,
# "Framework allocators"): torch_procs.py spawn (two processes on the GPU) and loader (a DataLoader
# with 2 workers), each run plain and under `bin/record` 2 times alternating (wall time, each
# training process's memory_stats() counts and max_memory_reserved()), the trace's torch events per
# pid, `analyze --json` and `analyze --pytorch-conf` of the first trace, and a plain run under that
# setting. Then torch_oom.py under record (an out-of-memory at a request larger than the device).
# Writes under $1; needs bin/record, bin/analyze, python3 with torch and pyarrow.
set -u
D=${1:?usage: framework_procs.sh OUTDIR}; mkdir -p "$D"; B=$PWD/bin
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
for m in spawn loader; do
  for k in 1 2; do
    t0=$(date +%s%N); python3 bench/torch_procs.py "$m" "$D/$m.plain$k" > "$D/$m.plain$k.out" 2>&1
    t1=$(date +%s%N); "$B/record" -q -o "$D/$m.$k.arrow" --shim "$B/liballocscope.so" -- \
      python3 bench/torch_procs.py "$m" "$D/$m.rec$k" > "$D/$m.rec$k.out" 2>"$D/$m.rec$k.err"
    t2=$(date +%s%N)
    echo "$m $k wall_ms plain $(( (t1 - t0) / 1000000 )) record $(( (t2 - t1) / 1000000 ))"
    echo "$m $k plain stats $(cat "$D/$m.plain$k"/*.stats.json | tr '\n' ' ')"
    echo "$m $k record stats $(cat "$D/$m.rec$k"/*.stats.json | tr '\n' ' ')"
    echo "$m $k trace counts $(count "$D/$m.$k.arrow")"
  done
  conf=$("$B/analyze" --pytorch-conf "$D/$m.1.arrow" 2>"$D/$m.conf.err"); echo "$m pytorch-conf rc $? '$conf' $(cat "$D/$m.conf.err")"
  "$B/analyze" "$D/$m.1.arrow" > "$D/$m.analyze.txt" 2>&1
  "$B/analyze" --json "$D/$m.1.arrow" > "$D/$m.analyze.json" 2>&1
  PYTORCH_CUDA_ALLOC_CONF=$conf python3 bench/torch_procs.py "$m" "$D/$m.conf" > "$D/$m.conf.out" 2>&1
  echo "$m with the setting: $(cat "$D/$m.conf"/*.stats.json | tr '\n' ' ')"
done
"$B/record" -q -o "$D/oom.arrow" --shim "$B/liballocscope.so" -- python3 bench/torch_oom.py > "$D/oom.out" 2>"$D/oom.err"
echo "oom rc $? $(cat "$D/oom.out" | tr '\n' ' ') trace counts $(count "$D/oom.arrow")"
"$B/analyze" "$D/oom.arrow" > "$D/oom.analyze.txt" 2>&1; echo "oom analyze rc $?"
