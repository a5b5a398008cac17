"""A PyTorch program that runs out of memory as users meet it, for record's explanation of an OOM
at the failing request (docs/compatibility.md): the caching allocator on, ten 2 GiB tensors made, the
odd ones freed (10 GiB cached in their segments), then one request larger than the device. Prints
PyTorch's own error message and memory_reserved() / memory_allocated() after it.

usage: python3 torch_oom.py
"""
import torch

dev = torch.device("cuda")
blocks = [torch.empty(2 << 30, dtype=torch.uint8, device=dev) for _ in range(10)]
for i in range(1, 10, 2):
    blocks[i] = None
print("before", torch.cuda.memory_reserved(), torch.cuda.memory_allocated(), flush=True)
try:
    torch.empty(200 << 30, dtype=torch.uint8, device=dev)
except torch.OutOfMemoryError as e:
    print("oom", str(e).replace("\n", " "), flush=True)
print("after", torch.cuda.memory_reserved(), torch.cuda.memory_allocated(), flush=True)
