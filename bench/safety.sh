#!/bin/bash
# record --pool's safety on the GPU machine: builds the six programs that try to catch a pool that
# hands out memory the GPU still uses or changes what CUDA answers (sync_race, graph_capture,
# reset_midrun, double_free, oom_retry, ipc_export in bench/), runs each under bin/record
# without the pool and with --pool of the pool.json analyze writes from the program's first recording
# (`analyze --arena fixed --emit-config`, as users make it; testdata/h200/a_static.pool.json when
# analyze cannot), 3 runs each for the racy ones, 1 for the others, `timeout 60` around every run,
# and prints a table: program, run, whether the
# pool run's stdout is identical to the plain run's, and both exit codes (0 = all the program's
# checks passed), then record's line on what the pool did in each program's first pool run. A program
# that fails to build is reported and skipped. Exits 0 only when every row is identical with both
# exit codes 0.
#
#   bash bench/safety.sh LOGDIR     (from the repository root; needs bin/record and
#                                           bin/analyze from bench/build_bin.sh, nvcc and a GPU)
# Binaries go to $OUT/safety_bin (or /tmp/safety_bin); every run's stdout and stderr to LOGDIR.
set -u
if [ $# -ne 1 ]; then echo "usage: bash bench/safety.sh LOGDIR" >&2; exit 2; fi
L=$1; mkdir -p "$L" || exit 2
L=$(cd "$L" && pwd)
D=${OUT:-/tmp}/safety_bin; mkdir -p "$D" || exit 2
R=$PWD/bin/record; A=$PWD/bin/analyze; P=$PWD/testdata/h200/a_static.pool.json
[ -x "$R" ] && [ -x "$A" ] || { echo "safety.sh: $R or $A missing: run bench/build_bin.sh first" >&2; exit 2; }
[ -f "$P" ] || { echo "safety.sh: $P missing: run it from the repository root" >&2; exit 2; }
"$R" shim -o "$D/shim.so" >"$L/shim.log" 2>&1 || { echo "safety.sh: record shim failed (see $L/shim.log)" >&2; exit 1; }

PROGS="sync_race graph_capture double_free reset_midrun oom_retry ipc_export"
runs_of() { case $1 in sync_race|graph_capture|double_free) echo 3 ;; *) echo 1 ;; esac; }

declare -A BUILT
for p in $PROGS; do
  if nvcc -O2 -o "$D/$p" "bench/$p.cu" -lcuda >"$L/$p.build.log" 2>&1; then BUILT[$p]=1
  else echo "safety.sh: $p did not build (see $L/$p.build.log)" >&2; fi
done

# run_one NAME MODE K [--pool FILE]: runs program NAME under record, its stdout to NAME.MODE.K.out,
# stderr to .err, and prints its exit code.
run_one() {
  local name=$1 mode=$2 k=$3; shift 3
  (cd "$L" && timeout 60 "$R" --shim "$D/shim.so" "$@" -o "$L/$name.$mode.$k.arrow" -- "$D/$name" \
    >"$L/$name.$mode.$k.out" 2>"$L/$name.$mode.$k.err")
  echo $?
}

TABLE=$L/table.txt
printf '%-14s %-4s %-10s %-9s %-8s\n' program run identical plain_rc pool_rc >"$TABLE"
for p in $PROGS; do
  if [ -z "${BUILT[$p]:-}" ]; then
    printf '%-14s %-4s %-10s %-9s %-8s\n' "$p" - "no-build" - - >>"$TABLE"; continue
  fi
  plan=$P
  for k in $(seq 1 "$(runs_of "$p")"); do
    plain=$(run_one "$p" plain "$k")
    # the pool of the program's own first recording, as users make it (analyze notes what it exports)
    if [ "$k" = 1 ] && "$A" --quiet --arena fixed --emit-config "$L/$p.pool.json" "$L/$p.plain.1.arrow" \
        >"$L/$p.analyze.log" 2>&1; then plan=$L/$p.pool.json; fi
    pool=$(run_one "$p" pool "$k" --pool "$plan")
    same=no
    cmp -s "$L/$p.plain.$k.out" "$L/$p.pool.$k.out" && same=yes
    printf '%-14s %-4s %-10s %-9s %-8s\n' "$p" "$k" "$same" "$plain" "$pool" >>"$TABLE"
    [ "$same" = yes ] || diff "$L/$p.plain.$k.out" "$L/$p.pool.$k.out" >"$L/$p.$k.diff"
  done
done
rm -f "$L"/*.arrow
cat "$TABLE"
echo "what the pool did (record's summary of each program's first pool run):"
for p in $PROGS; do
  [ -f "$L/$p.pool.1.err" ] && grep -h "allocscope: pool" "$L/$p.pool.1.err" | sed "s/^/  $p: /"
done
bad=$(awk 'NR > 1 && ($3 != "yes" || $4 != 0 || $5 != 0)' "$TABLE" | wc -l)
echo "rows with a difference, a failed check or no build: $bad"
[ "$bad" = 0 ]
