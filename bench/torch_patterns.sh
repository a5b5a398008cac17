#!/bin/bash
# Ground truth for analyze's PyTorch model on the patterns of torch_patterns.py (CUDA graphs, several
# streams with record_stream, empty_cache, bf16 autocast; docs/benchmarks.md, the pytorch-conf table).
# For each workload: plain runs under each setting of SETTINGS (PyTorch's own max_memory_reserved),
# runs with the memory history (defaults and expandable segments: the snapshots analyze predicts
# from), and a run under record with the defaults (its output must equal the plain run's). Runs JOBS
# processes at once (default 8; each workload needs under 4 GiB). Needs bin/record and
# bin/liballocscope.so (bench/build_bin.sh). Writes $OUT/torch_patterns/ and a summary on stdout.
: "${OUT:?set OUT to an output folder}"
O=$OUT/torch_patterns; mkdir -p "$O"; B=$PWD/bin
WORKLOADS=${WORKLOADS:-graphstep graphinfer compiled recordstream emptycache}
SETTINGS=${SETTINGS:-"defaults expandable_segments:True roundup_power2_divisions:16
roundup_power2_divisions:16,expandable_segments:True max_split_size_mb:64
max_split_size_mb:64,expandable_segments:True roundup_power2_divisions:4
roundup_power2_divisions:[256:4,512:8,>:8]"}
jobs=()
for w in $WORKLOADS; do
  i=0
  for s in $SETTINGS; do
    conf=$s; [ "$s" = defaults ] && conf=
    jobs+=("plain $w $i $conf"); i=$((i + 1))
  done
  jobs+=("snap $w d" "snap $w e expandable_segments:True" "record $w r")
done
run_one() {
  local kind=$1 w=$2 tag=$3 conf=${4:-}
  local dir=$O/$w.$kind.$tag t0=$(date +%s%N) rc
  mkdir -p "$dir"; echo "$conf" > "$dir/conf"
  case $kind in
  plain) PYTORCH_CUDA_ALLOC_CONF=$conf timeout 300 python3 bench/torch_patterns.py "$w" "$dir" > "$dir/out" 2> "$dir/err" ;;
  snap) PYTORCH_CUDA_ALLOC_CONF=$conf timeout 300 python3 bench/torch_patterns.py "$w" "$dir" --snapshot > "$dir/out" 2> "$dir/err" ;;
  record) PYTORCH_CUDA_ALLOC_CONF=$conf timeout 300 "$B/record" --shim "$B/liballocscope.so" -o "$dir/$w.arrow" -- \
      python3 bench/torch_patterns.py "$w" "$dir" > "$dir/out" 2> "$dir/err" ;;
  esac
  rc=$?
  echo "$kind $w $tag rc $rc wall_ms $(( ($(date +%s%N) - t0) / 1000000 )) conf '$conf'"
}
export -f run_one; export O B
printf '%s\n' "${jobs[@]}" | xargs -d '\n' -n 1 -P "${JOBS:-8}" bash -c 'set -f; run_one $0'
python3 - "$O" <<'PY'
import glob, json, os, sys
root = sys.argv[1]
for path in sorted(glob.glob(os.path.join(root, "*", "*.stats.json"))):
    s = json.load(open(path))
    d = os.path.dirname(path)
    plain = os.path.join(root, "%s.plain.0" % s["workload"], "out")
    same = open(os.path.join(d, "out")).read() == open(plain).read() if os.path.exists(plain) else None
    print("%-40s %-55s reserved %12d allocated %12d retries %d segments %d markers %d same_output %s" % (
        os.path.basename(d), repr(s["conf"]), s["max_memory_reserved"], s["max_memory_allocated"],
        s["num_alloc_retries"], s["segments"], len(s["markers"]), same))
PY
