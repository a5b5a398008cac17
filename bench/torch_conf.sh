#!/bin/bash
# Proof of analyze's PYTORCH_CUDA_ALLOC_CONF search on the GPU (docs/benchmarks.md): each workload
# of torch_work.py (cnn, kvcache, seqs; not the bundled one) runs with PyTorch's defaults and a
# memory snapshot; analyze reads the snapshot and names the best setting; the workload runs again
# with it. Prints, per workload, the predicted and the real torch.cuda.max_memory_reserved() for
# the defaults and for the setting. Needs bin/analyze. Writes $OUT/torch_conf/.
: "${OUT:?set OUT to an output folder}"
O=$OUT/torch_conf; mkdir -p "$O"
for w in ${WORKLOADS:-cnn kvcache seqs}; do
  env -u PYTORCH_CUDA_ALLOC_CONF python3 bench/torch_work.py "$w" "$O/defaults" --snapshot > /dev/null || exit 1
  t0=$(date +%s%N)
  bin/analyze --json "$O/defaults/$w.snapshot.pickle" > "$O/$w.report.json" || exit 1
  echo "$w analyze_ms $(( ($(date +%s%N) - t0) / 1000000 ))"
  conf=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["combined"]["pytorch_search"]["best"][0]["conf"])' "$O/$w.report.json")
  hist=(); [[ "$conf" == *cudaMallocAsync* ]] && hist=(--no-history)
  PYTORCH_CUDA_ALLOC_CONF="$conf" python3 bench/torch_work.py "$w" "$O/best" "${hist[@]}" > /dev/null || exit 1
  python3 - "$O/$w.report.json" "$O/defaults/$w.stats.json" "$O/best/$w.stats.json" "$w" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))["combined"]
s = rep["pytorch_search"]
d, b = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
pd, pb = s["defaults"]["peak_reserved_bytes"], s["best"][0]["peak_reserved_bytes"]
rd, rb = d["max_memory_reserved"], b["max_memory_reserved"]
print(sys.argv[4], "events", rep["events"], "simulated", s["simulated"], "best", repr(s["best"][0]["conf"]))
print("  defaults: predicted %d real %d (%+.2f%%), retries %d" % (pd, rd, 100.0 * (pd - rd) / rd, d.get("num_alloc_retries", 0)))
print("  best:     predicted %d real %d (%+.2f%%), retries %d" % (pb, rb, 100.0 * (pb - rb) / rb, b.get("num_alloc_retries", 0)))
print("  saved: predicted %d real %d" % (pd - pb, rd - rb))
PY
done
rm -f "$O"/*/*.pickle
