#!/usr/bin/env python3
"""Write the small hand-made fixtures of the trace package's importer tests.

Run from the repository root: python3 testdata/trace/make_fixtures.py
It needs only the standard library (no torch): the snapshots are dicts shaped like the ones
torch.cuda.memory._snapshot() returns (PyTorch 2.11), pickled the way _dump_snapshot does.
The expected numbers in trace/import_test.go follow from the values below.
"""
import gzip
import lzma
import os
import pickle

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_796_228_603_210_850  # time_us of the first entry (epoch microseconds)


def frame(name):
    return {"filename": "train.py", "line": 12, "name": name}


def entry(action, addr, size, stream, dt_us, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream,
         "time_us": T0 + dt_us, "compile_context": "N/A", "user_metadata": "",
         "frames": [frame("forward")]}
    e.update(extra)
    return e


def small_snapshot():
    seg0 = 0x7F0000000000
    dev0 = [
        entry("segment_alloc", seg0, 20971520, 0, 0),
        entry("alloc", seg0, 1000, 0, 1),
        entry("alloc", seg0 + 1024, 512, 0, 2),
        entry("free_requested", seg0, 1000, 0, 5),
        entry("free_completed", seg0, 1000, 0, 5),
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": T0 + 6, "frames": []},
        entry("annotate", seg0 + 1024, 0, 0, 7),
        entry("segment_map", 0x200000000, 2097152, 7, 8),
        entry("segment_unmap", 0x200000000, 2097152, 7, 9),
        {"action": "oom", "device_free": 123456, "size": 1 << 40, "stream": 0, "time_us": T0 + 10,
         "frames": []},
        entry("segment_free", seg0, 20971520, 0, 11),
    ]
    seg1 = 0x7E0000000000
    dev1 = [
        entry("segment_alloc", seg1, 2097152, 3, 1),  # same time as dev0's first alloc
        entry("alloc", seg1, 4096, 3, 3),
        entry("free_requested", seg1, 4096, 3, 4),
        entry("free_completed", seg1, 4096, 3, 12),
    ]
    segments = [
        {"device": 0, "address": seg0, "total_size": 20971520, "allocated_size": 512,
         "active_size": 512, "requested_size": 512, "stream": 0, "segment_type": "large",
         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
         "blocks": [{"address": seg0, "size": 1024, "requested_size": 0, "state": "inactive", "frames": []},
                    {"address": seg0 + 1024, "size": 512, "requested_size": 512,
                     "state": "active_allocated", "frames": []}]},
        {"device": 0, "address": 0x200000000, "total_size": 2097152, "allocated_size": 0,
         "active_size": 0, "requested_size": 0, "stream": 7, "segment_type": "small",
         "segment_pool_id": (0, 0), "is_expandable": True, "frames": [], "blocks": []},
        {"device": 1, "address": seg1, "total_size": 2097152, "allocated_size": 0,
         "active_size": 0, "requested_size": 0, "stream": 3, "segment_type": "small",
         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": []},
    ]
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256,roundup_power2_divisions:[256:1,>:4]",
        "max_split_size": 268435456,
        "garbage_collection_threshold": 0.6,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "graph_capture_record_stream_reuse": False,
        "roundup_power2_divisions": {str(1 << i): (4 if i > 8 else 1 if i >= 1 else 0) for i in range(16)},
    }
    return {"segments": segments, "device_traces": [dev0, dev1], "allocator_settings": settings,
            "external_annotations": []}


def old_snapshot():
    """A PyTorch 2.0-style snapshot: no time_us, no allocator_settings."""
    trace = [{"action": a, "addr": 0x1000 * (i + 1), "size": 256 * (i + 1), "stream": 0, "frames": []}
             for i, a in enumerate(["segment_alloc", "alloc", "free_requested", "free_completed"])]
    return {"segments": [], "device_traces": [trace]}


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    snap = pickle.dumps(small_snapshot(), protocol=4)
    write("snapshot_small.pickle", snap)
    write("snapshot_small.pickle.gz", gzip.compress(snap, mtime=0))
    write("snapshot_small.pickle.xz", lzma.compress(snap))
    write("snapshot_old_proto2.pickle", pickle.dumps(old_snapshot(), protocol=2))
    write("not_a_snapshot.pickle", pickle.dumps([1, 2, 3], protocol=4))
    write("rmm_timeofday.csv", (
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "140573312345856,23:59:59.999000,allocate,0x7f8a40000000,1024,0x0\n"
        "140573312345856,23:59:59.999500,allocate,0x7f8a40000400,2048,0x7f8a38001020\n"
        "12345,00:00:00.000250,free,0x7f8a40000000,1024,0x0\n"
        "12345,00:00:00.001000,allocate failure,0x0,68719476736,0x0\n"
        "140573312345856,00:00:01.5,free,0x7f8a40000400,2048,0x7f8a38001020\n").encode())
    write("rmm_epoch.csv", (
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "4242,1634567890.123456,allocate,7f8a40000000,1024,7f8a38001020\n"
        "4242,1634567890.234567,allocate,7f8a40000400,2048,0\n"
        "4243,1634567890.345678,deallocate,7f8a40000000,1024,7f8a38001020\n").encode())
    write("rmm_bad_row.csv", (
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "1,00:00:01.000000,allocate,0x1000,64,0x0\n"
        "1,00:00:01.000001,allocate,0x2000,sixty-four,0x0\n"
        "1,00:00:01.000002,free,0x1000,64,0x0\n").encode())


if __name__ == "__main__":
    main()
