"""Print an allocscope trace's event counts by function and op (read with pyarrow), as JSON.

usage: python3 count_events.py TRACE.arrow [TRACE.arrow ...]
"""
import collections
import json
import sys

import pyarrow.ipc


def counts(path):
    with pyarrow.ipc.open_file(path) as r:
        t = r.read_all()
    fn = [str(x) for x in t["function"].to_pylist()]
    op = [str(x) for x in t["op"].to_pylist()]
    res = [int(x) for x in t["result"].to_pylist()]
    mem = [str(x) for x in t["memory"].to_pylist()]
    c = collections.Counter(f"{f}:{o}" + ("" if r == 0 else f":err{r}") for f, o, r in zip(fn, op, res))
    seqs = t["seq"].to_pylist()
    return {"trace": path, "events": t.num_rows, "pids": len(set(t["pid"].to_pylist())),
            "duplicate_seq": len(seqs) - len(set(seqs)),
            "by_memory": dict(collections.Counter(mem)), "by_function_op": dict(sorted(c.items()))}


for p in sys.argv[1:]:
    print(json.dumps(counts(p)))
