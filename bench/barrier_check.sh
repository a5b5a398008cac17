#!/bin/bash
# record --pool's barriers on the GPU machine (docs/record-pool.md): whether an event recorded on the
# legacy stream, and the join barrier over non-blocking streams, order the device's work as the pool
# relies on (legacy_barrier.cu), what they cost,
# and the time per request of a served cudaMalloc/cudaFree with warm and cold caches (served_cost.cu,
# recorded without and with the pool). Needs bin/record, bin/liballocscope.so, bin/analyze
# (bench/build_bin.sh). Writes everything under OUT (default /tmp/barrier_check).
set -u
OUT=${OUT:-/tmp/barrier_check}; mkdir -p "$OUT"; B=$PWD/bin
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores, clock source" \
  "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource), flags:" \
  $(grep -m1 -o -w -E 'constant_tsc|nonstop_tsc|tsc_known_freq|hypervisor' /proc/cpuinfo)
nvcc -O2 -o "$OUT/legacy_barrier" bench/legacy_barrier.cu -lcuda && "$OUT/legacy_barrier"
nvcc -O2 -o "$OUT/served_cost" bench/served_cost.cu -lcuda || exit 1
SERVED_COST_PROBE=1 "$OUT/served_cost" 2000 8000000 >/dev/null
for thrash in 0 8000000; do
  n=cost$thrash
  "$B/record" -q --shim "$B/liballocscope.so" -o "$OUT/$n.plan.arrow" -- "$OUT/served_cost" 20000 $thrash >/dev/null
  "$B/analyze" --quiet --arena fixed --emit-config "$OUT/$n.pool.json" "$OUT/$n.plan.arrow"
  "$B/record" -q --shim "$B/liballocscope.so" -o "$OUT/$n.plain.arrow" -- "$OUT/served_cost" 20000 $thrash >/dev/null
  "$B/record" -q --shim "$B/liballocscope.so" --pool "$OUT/$n.pool.json" -o "$OUT/$n.pool.arrow" -- \
    "$OUT/served_cost" 20000 $thrash >/dev/null
  echo "== served_cost 20000 $thrash"
  "$B/analyze" --compare "$OUT/$n.plain.arrow" "$OUT/$n.pool.arrow" | grep -E "inside the requests|per request|wall"
done
