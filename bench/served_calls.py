"""Where a recording's time inside its allocation calls went, call by call (docs/record-pool.md).

python3 bench/served_calls.py TRACE.arrow...

For each trace: per kind (alloc, free) and server (the pool: pool=1, CUDA: pool=0) the number of
calls, their total duration and its percentiles, and the calls over 2 us; the first calls; each
thread's share; and the median duration of a served call by the program's own time before it (the
gap since its previous call on the same thread), which tells warm caches from cold ones. Needs
pyarrow and numpy (both on the H200 machine).
"""
import bisect
import sys

import numpy as np
import pyarrow.ipc as ipc

GAPS = ((0, 2000), (2000, 20000), (20000, 200000), (200000, None))


def column(t, name, dtype=None):
    return np.array(t.column(name).to_pylist(), dtype=dtype)


def summary(x):
    x = np.sort(x)
    slow = x[x > 2000]
    return (f"n={len(x)} sum={x.sum() / 1e3:.1f}us p10={np.percentile(x, 10):.0f} p50={np.percentile(x, 50):.0f} "
            f"p90={np.percentile(x, 90):.0f} p99={np.percentile(x, 99):.0f} max={x.max()} "
            f"over 2us: n={len(slow)} sum={slow.sum() / 1e3:.1f}us")


def slow_calls(order, pool, dur, ts, tid, fn):
    """The served calls over 2 us: how many overlapped another thread's call (waiting for the pool's
    lock, or the other thread waiting for theirs), their time, and the ten slowest."""
    calls = [i for i in order if pool[i] == 1]
    slow = [i for i in calls if dur[i] > 2000]
    if not slow:
        return
    # A thread's calls follow one another: of its calls, only the last one that starts before a
    # call ends can overlap that call.
    starts, ends = {}, {}
    for i in calls:
        starts.setdefault(tid[i], []).append(ts[i])
        ends.setdefault(tid[i], []).append(ts[i] + dur[i])

    def overlapping(i):
        for th in starts:
            k = bisect.bisect_left(starts[th], ts[i] + dur[i]) - 1
            if th != tid[i] and k >= 0 and ends[th][k] > ts[i]:
                return True
        return False

    overlapped = [i for i in slow if overlapping(i)]
    print(f"  served calls over 2us: {len(slow)} ({dur[slow].sum() / 1e3:.1f}us), of them overlapping another "
          f"thread's call: {len(overlapped)} ({dur[overlapped].sum() / 1e3:.1f}us)")
    for i in sorted(slow, key=lambda i: -dur[i])[:10]:
        print(f"    {fn[i]} thread {tid[i]} {dur[i]} ns at {ts[i] - ts[order[0]]} ns")


def report(path):
    t = ipc.open_file(path).read_all()
    op, fn = column(t, "op").astype(str), column(t, "function").astype(str)
    dur, ts, tid = column(t, "duration_ns", np.int64), column(t, "time_ns", np.int64), column(t, "tid")
    pool = column(t, "pool", np.int64) if "pool" in t.column_names else np.zeros(len(dur), np.int64)
    print("==", path, "events", len(dur), "threads", len(set(tid.tolist())))
    for kind in ("alloc", "free"):
        for served in (1, 0):
            m = (op == kind) & (pool == served)
            if m.any():
                print(f"  {kind} {'pool' if served else 'cuda'}: {summary(dur[m])} functions={sorted(set(fn[m]))}")
    order = np.argsort(ts, kind="stable")
    print("  first calls:", [(fn[i], op[i], int(pool[i]), int(dur[i])) for i in order[:4]])
    for th in sorted(set(tid.tolist())):
        m = (tid == th) & (pool == 1)
        if m.any():
            print(f"  thread {th}: served {m.sum()} sum {dur[m].sum() / 1e3:.1f}us median {np.median(dur[m]):.0f}")
    slow_calls(order, pool, dur, ts, tid, fn)
    by_gap(order, pool, dur, ts, tid)


def by_gap(order, pool, dur, ts, tid):
    """The served calls' durations by the program's own time before each: the gap since the end of
    the thread's previous call."""
    gaps, last = [], {}
    for i in order:
        if pool[i] == 1 and tid[i] in last:
            gaps.append((ts[i] - last[tid[i]], dur[i]))
        last[tid[i]] = ts[i] + dur[i]
    if not gaps:
        return
    g = np.array(gaps)
    for lo, hi in GAPS:
        m = (g[:, 0] >= lo) & (g[:, 0] < (hi if hi is not None else np.iinfo(np.int64).max))
        if m.any():
            print(f"  gap {lo}-{hi or ''} ns: n={m.sum()} median {np.median(g[m, 1]):.0f} mean {g[m, 1].mean():.0f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: served_calls.py TRACE.arrow...")
    for p in sys.argv[1:]:
        report(p)
