"""PyTorch programs as users run them, for record's framework capture (framework_check.sh): the
caching allocator on, no memory history of the program's own.

usage: python3 torch_procs.py spawn OUTDIR   two processes on the GPU (torch.multiprocessing.spawn),
                                             each training an MLP for 20 steps
       python3 torch_procs.py loader OUTDIR  a CNN fed by a DataLoader with 2 workers (pinned memory)
Each training process writes OUTDIR/<mode>.<rank>.stats.json: its pid, PyTorch's own
memory_stats() counts (allocation.all.allocated / freed) and max_memory_reserved(), once the
training function has returned and every tensor it made is freed (so that the counts cover every
request the process made).
"""
import gc
import json
import os
import sys

import torch
import torch.multiprocessing as mp


def write_stats(outdir, name):
    st = torch.cuda.memory_stats()
    s = {"pid": os.getpid(), "allocation_count": st.get("allocation.all.allocated", 0),
         "free_count": st.get("allocation.all.freed", 0), "max_memory_reserved": torch.cuda.max_memory_reserved()}
    with open(os.path.join(outdir, name + ".stats.json"), "w") as f:
        json.dump(s, f)
    print(name, json.dumps(s), flush=True)


def mlp(rank, outdir):
    train_mlp(rank)
    gc.collect()
    torch.cuda.synchronize()
    write_stats(outdir, f"spawn.{rank}")


def train_mlp(rank):
    torch.manual_seed(rank)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(20):
        x = torch.randn(256 + 64 * rank, 1024, device=dev)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


class Images(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 64, 64, generator=g), i % 10


def loader(outdir):
    train_cnn()
    gc.collect()
    torch.cuda.synchronize()
    write_stats(outdir, "loader.0")


def train_cnn():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(16, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.DataLoader(Images(), batch_size=8, num_workers=2, pin_memory=True)
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    mode, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    if mode == "spawn":
        mp.spawn(mlp, args=(outdir,), nprocs=2)
    else:
        loader(outdir)
