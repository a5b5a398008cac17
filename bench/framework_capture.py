"""A check on a GPU machine of record's framework capture with the real PyTorch and CuPy
(docs/compatibility.md, "Framework allocators"): run it as
    bin/record -o fw.arrow --shim bin/liballocscope.so -- python3 bench/framework_capture.py
It allocates and frees tensors in this process and in a spawned child, and CuPy arrays here; the
trace then holds torch.alloc/torch.free and cupy.malloc/cupy.free events of both pids beside the
driver's calls."""

import multiprocessing


def child():
    import torch

    x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    del x
    print("child done", flush=True)


def main():
    import torch

    a = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    b = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    del a
    torch.cuda.synchronize()
    p = multiprocessing.get_context("spawn").Process(target=child)
    p.start()
    p.join()
    try:
        import cupy

        c = cupy.empty(1000, dtype=cupy.uint8)
        d = cupy.empty(1 << 20, dtype=cupy.uint8)
        del c
        print("cupy live", d.nbytes, flush=True)
    except ImportError:
        print("no cupy", flush=True)
    print("torch live", b.numel(), torch.__version__, flush=True)


if __name__ == "__main__":
    main()
