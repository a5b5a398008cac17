#!/bin/bash
# Where the shim's time goes on the real driver: the async bench (alloc_loop bench) under variants of
# the shim, each with one part removed by sed: the cuCtxGetDevice call, the clock reads, the record
# writes. 7 rounds, interleaved; prints the median and every run per variant. Needs cc and nvcc.
T=/tmp/x; mkdir -p $T; S=internal/intercept/shim
grep -o -w 'constant_tsc\|nonstop_tsc' /proc/cpuinfo | sort | uniq -c
nvcc -O2 -o $T/al bench/alloc_loop.cu || exit 1
for v in full nodev noclock nolog; do mkdir -p $T/$v; cp $S/* $T/$v/; done
sed -i 's/(r_ == 0 \&\& (IS_DEVICE)) ? current_device() : -1/-1/' $T/nodev/hooks.h
sed -i 's/^static inline uint64_t clock_read(int tsc) {.*/static inline uint64_t clock_read(int tsc) { (void)tsc; return 0; }/' $T/noclock/clock.h
sed -i 's/^	struct record \*r = log_slot(d);/	struct record *r = NULL; (void)log_slot;/' $T/nolog/hooks.h
grep -c "current_device() : -1" $T/nodev/hooks.h; grep -c "return 0; }" $T/noclock/clock.h; grep -c "(void)log_slot" $T/nolog/hooks.h
for v in full nodev noclock nolog; do cc -shared -fPIC -O2 -o $T/$v.so $T/$v/shim.c -ldl -lpthread || exit 1; done
for i in 1 2 3 4 5 6 7; do
  echo "plain $($T/al bench 200000 4096)"
  for v in full nodev noclock nolog; do
    rm -rf $T/logs; mkdir $T/logs; head -c 4096 /dev/zero > $T/logs/control
    echo "$v $(ALLOCSCOPE_LOG_DIR=$T/logs LD_PRELOAD=$T/$v.so $T/al bench 200000 4096)"
  done
done > $OUT/attrib.txt 2>&1
python3 - $OUT/attrib.txt <<'PY'
import sys, re, collections, statistics
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) bench: .*median_ns=(\d+)", line)
    if m: d[m.group(1)].append(int(m.group(2)))
for k, v in d.items(): print(k, "median of", len(v), statistics.median(v), sorted(v))
PY
