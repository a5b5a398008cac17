"""PyTorch workloads recorded on the GPU machine for allocscope's compatibility and analysis tables.

usage: python3 torch_work.py WORKLOAD OUTDIR [--snapshot] [--no-history]

WORKLOAD:
  train     a small MLP trained for 30 steps with fixed shapes (the bundled trace)
  cnn       a CNN trained for 40 steps on batches of varying image size (variable shapes)
  kvcache   autoregressive generation of 256 tokens with a KV cache grown by torch.cat each step
  seqs      a transformer encoder trained for 60 steps on batches of variable sequence length

Writes OUTDIR/WORKLOAD.stats.json (PyTorch's own peak allocated / reserved figures, the number of
allocations in its memory history) and, with --snapshot, OUTDIR/WORKLOAD.snapshot.pickle.
--no-history records no memory history (backend:cudaMallocAsync has none).
"""
import json
import os
import pickle
import sys

import torch


def train(dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(30):
        x = torch.randn(256, 512, device=dev)
        y = torch.randint(0, 10, (256,), device=dev)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def cnn(dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for _ in range(40):
        side = int(torch.randint(64, 257, (1,), generator=g)) // 8 * 8
        batch = int(torch.randint(16, 65, (1,), generator=g))
        x = torch.randn(batch, 3, side, side, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def kvcache(dev):
    torch.manual_seed(0)
    layers, heads, dim, vocab = 8, 16, 64, 32000
    hidden = heads * dim
    emb = torch.nn.Embedding(vocab, hidden).to(dev).half()
    qkv = [torch.nn.Linear(hidden, 3 * hidden).to(dev).half() for _ in range(layers)]
    out = [torch.nn.Linear(hidden, hidden).to(dev).half() for _ in range(layers)]
    head = torch.nn.Linear(hidden, vocab).to(dev).half()
    batch = 8
    tok = torch.randint(0, vocab, (batch, 1), device=dev)
    cache_k = [None] * layers
    cache_v = [None] * layers
    with torch.no_grad():
        for _ in range(256):
            h = emb(tok[:, -1:])
            for i in range(layers):
                q, k, v = qkv[i](h).view(batch, 1, 3, heads, dim).unbind(2)
                cache_k[i] = k if cache_k[i] is None else torch.cat([cache_k[i], k], 1)
                cache_v[i] = v if cache_v[i] is None else torch.cat([cache_v[i], v], 1)
                att = torch.einsum("bqhd,bkhd->bhqk", q, cache_k[i]).softmax(-1)
                h = h + out[i](torch.einsum("bhqk,bkhd->bqhd", att, cache_v[i]).reshape(batch, 1, hidden))
            nxt = head(h).argmax(-1)
            tok = torch.cat([tok, nxt], 1)
    torch.cuda.synchronize()


def seqs(dev):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(8000, 256), torch.nn.TransformerEncoder(layer, 4),
                                torch.nn.Linear(256, 8000)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(2)
    for _ in range(60):
        length = int(torch.randint(16, 513, (1,), generator=g))
        batch = max(1, 16384 // length)
        x = torch.randint(0, 8000, (batch, length), device=dev)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def main():
    work, outdir = sys.argv[1], sys.argv[2]
    snap = "--snapshot" in sys.argv
    os.makedirs(outdir, exist_ok=True)
    dev = torch.device("cuda")
    history = "--no-history" not in sys.argv
    torch.cuda.init()
    if history:
        torch.cuda.memory._record_memory_history(max_entries=1000000)
    {"train": train, "cnn": cnn, "kvcache": kvcache, "seqs": seqs}[work](dev)
    s, actions = None, {}
    if history:
        s = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        for dt in s["device_traces"]:
            for e in dt:
                actions[e["action"]] = actions.get(e["action"], 0) + 1
    st = torch.cuda.memory_stats()
    stats = {
        "workload": work,
        "torch": torch.__version__,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", ""),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "segment_alloc_count": st.get("segment.all.allocated", 0),
        "allocation_count": st.get("allocation.all.allocated", 0),
        "free_count": st.get("allocation.all.freed", 0),
        "num_alloc_retries": st.get("num_alloc_retries", 0),
        "history_actions": actions,
    }
    with open(os.path.join(outdir, work + ".stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    if snap and s is not None:
        with open(os.path.join(outdir, work + ".snapshot.pickle"), "wb") as f:
            pickle.dump(s, f)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
