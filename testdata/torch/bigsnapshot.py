#!/usr/bin/env python3
"""Writes a large PyTorch memory snapshot for analyze's scale figures (docs/benchmarks.md).

    python3 testdata/torch/bigsnapshot.py K OUT.pickle

It repeats the device traces of testdata/torch/kvcache.caching.snapshot.pickle.gz K times, each copy
later in time and at addresses 2**36 apart, so that the copies never overlap, and writes the result
as an uncompressed pickle (protocol 4), as torch.cuda.memory._dump_snapshot does. The segments and
the allocator settings are the original's. K=30 gives about 333 MB and 2.1 M events; K=90 about 1 GB.
Needs only the Python standard library.
"""
import gzip
import os
import pickle
import sys


def repeat(trace, k):
    times = [e.get("time_us", 0) for e in trace]
    span = (max(times) - min(times) + 1000) if times else 0
    out = []
    for c in range(k):
        for e in trace:
            d = dict(e)
            if c:
                if "frames" in d:
                    d["frames"] = list(d["frames"])
                if "time_us" in d:
                    d["time_us"] += c * span
                if "addr" in d:
                    d["addr"] += c << 36
            out.append(d)
    return out


def main():
    if len(sys.argv) != 3 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: bigsnapshot.py K OUT.pickle (K >= 1 copies of the KV-cache snapshot)")
    k, path = int(sys.argv[1]), sys.argv[2]
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kvcache.caching.snapshot.pickle.gz")
    with gzip.open(src, "rb") as f:
        snap = pickle.load(f)
    snap["device_traces"] = [repeat(t, k) for t in snap["device_traces"]]
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    events = sum(len(t) for t in snap["device_traces"])
    print(f"{path}: {os.path.getsize(path)} bytes, {events} events")


if __name__ == "__main__":
    main()
