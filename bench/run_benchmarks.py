#!/usr/bin/env python3
"""Runs the Go benchmarks behind the figures of docs/benchmarks.md that have a target, and prints
each one's result lines beside the figure and its target. CPU only (no GPU); not part of CI, which
fails only on correctness. The rows come from docs/figures/*.tsv: a row whose target is not "—" and
whose command is a `go test ... -bench ...` line. Run it from the repository root:

    python3 bench/run_benchmarks.py            # every such figure
    python3 bench/run_benchmarks.py ManyThreads   # only the rows whose command names a pattern

Compare the printed numbers with the row's target and value; docs/benchmarks.md says how each was
measured (machine, load) and what the figures mean.
"""
import pathlib
import re
import subprocess
import sys


def rows():
    """Yields (table, what, target, command) for each row with a target and a go benchmark."""
    for tsv in sorted(pathlib.Path("docs/figures").glob("*.tsv")):
        lines = [l for l in tsv.read_text().splitlines() if l and not l.startswith("#")]
        head = lines[0].split("\t")
        if "target" not in head or "command" not in head:
            continue
        it, ic = head.index("target"), head.index("command")
        for line in lines[1:]:
            cells = line.split("\t")
            if len(cells) <= max(it, ic):
                continue
            target, command = cells[it].strip(), cells[ic].strip().strip("`")
            if target in ("", "—") or not re.match(r"go test .*-bench", command):
                continue
            yield tsv.stem, cells[0], target, command


def main(patterns):
    failed = 0
    for table, what, target, command in rows():
        if patterns and not any(p in command for p in patterns):
            continue
        print(f"== {table}: {what}\n   target {target}\n   $ {command}", flush=True)
        run = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=1800)
        results = [l for l in run.stdout.splitlines() if l.startswith("Benchmark")]
        for line in results or ["(no benchmark result)"]:
            print("   " + line)
        if run.returncode != 0:
            failed += 1
            print(f"   exit {run.returncode}: {(run.stdout + run.stderr).strip().splitlines()[-1:]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
