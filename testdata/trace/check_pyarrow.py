#!/usr/bin/env python3
"""Check that an allocscope trace opens unchanged in pyarrow, pandas and (if installed) DuckDB.

Usage: check_pyarrow.py TRACE.arrow [EXPECTED_ROWS EXPECTED_SIZE_SUM]

Prints the row count and the sum of the "size" column as each library sees them, the pandas
dtype of the dictionary-encoded columns, and the trace metadata. With the two expected numbers
it exits 1 unless every library agrees with them.
"""
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc


def main():
    path = sys.argv[1]
    expected = tuple(int(x) for x in sys.argv[2:4]) if len(sys.argv) >= 4 else None
    results = {}

    with pa.ipc.open_file(path) as reader:
        table = reader.read_all()
        batches = reader.num_record_batches
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    results["pyarrow"] = (table.num_rows, pc.sum(table["size"]).as_py() or 0)
    print(f"pyarrow {pa.__version__}: rows={results['pyarrow'][0]} size_sum={results['pyarrow'][1]} batches={batches}")
    print("schema:", ", ".join(f"{f.name}:{f.type}" for f in table.schema))
    print("units:", {f.name: f.metadata[b"unit"].decode() for f in table.schema if f.metadata and b"unit" in f.metadata})
    print("metadata:", meta)

    import pandas as pd
    df = pd.read_feather(path)
    results["pandas"] = (len(df), int(df["size"].sum()))
    print(f"pandas {pd.__version__}: rows={results['pandas'][0]} size_sum={results['pandas'][1]}"
          f" dtypes op={df['op'].dtype} function={df['function'].dtype}")
    print("op counts:", df["op"].value_counts().to_dict())

    try:
        import duckdb
    except ImportError:
        print("duckdb: not installed, skipped")
    else:
        rows, size_sum = duckdb.sql("SELECT count(*), sum(size) FROM table").fetchone()
        results["duckdb"] = (int(rows), int(size_sum or 0))
        print(f"duckdb {duckdb.__version__}: rows={rows} size_sum={size_sum}")

    if expected is not None:
        bad = {k: v for k, v in results.items() if v != expected}
        if bad:
            print(f"MISMATCH: expected rows,size_sum={expected}, got {bad}")
            sys.exit(1)
        print(f"OK: all of {sorted(results)} agree: rows={expected[0]} size_sum={expected[1]}")


if __name__ == "__main__":
    main()
