"""PyTorch programs for analyze's PYTORCH_CUDA_ALLOC_CONF model where PyTorch's caching allocator does
more than cudaMalloc and split blocks (docs/benchmarks.md, the pytorch-conf table): CUDA graphs and
their private memory pools, several streams with record_stream, empty_cache, bf16 autocast.

usage: python3 torch_patterns.py WORKLOAD OUTDIR [--snapshot]

WORKLOAD:
  graphstep     a transformer's whole training step (forward, backward, a capturable AdamW step)
                warmed up on a side stream, captured with torch.cuda.graph, replayed 20 times on new
                data; then eager inference (no_grad) on growing batches
  graphinfer    inference graphs of one model captured for batch sizes 64, 32, ..., 1 sharing one
                pool (torch.cuda.graph_pool_handle()), largest first, each replayed; the graphs of
                the odd sizes deleted half way; then eager steps
  compiled      torch.compile(mode="reduce-overhead") of the same model: inference on 3 batch shapes,
                each run 4 times (cudagraph trees)
  recordstream  a two-stream pipeline: batches made on a side stream, consumed on the current one,
                handed over with record_stream, sizes varying per step
  emptycache    a conv net under bf16 autocast with gradient accumulation (4 micro-batches), image
                size changing every step, torch.cuda.empty_cache() half way and at three quarters

Writes OUTDIR/WORKLOAD.stats.json: max_memory_reserved, max_memory_allocated, num_alloc_retries,
the setting (PYTORCH_CUDA_ALLOC_CONF), and the markers of the calls that change what the allocator
does beyond malloc and free (capture begin and end with the graph's pool id, graph reset and
deletion, empty_cache, record_stream), each with time_us on the clock of the memory history's
time_us (the Unix epoch); with --snapshot, the memory history (torch.cuda.memory._snapshot()) as
OUTDIR/WORKLOAD.snapshot.pickle. Prints one line per step (a loss in float.hex or a digest), so
that two runs can be compared byte for byte.
"""
import hashlib
import json
import os
import pickle
import sys
import time
import weakref

import torch

MARKERS = []


def mark(event, **fields):
    """Appends a marker with the time on the history's clock."""
    fields.update(event=event, time_us=time.time_ns() // 1000)
    MARKERS.append(fields)


def install_markers():
    """Wraps the calls whose effect on the allocator the model must know."""
    graph_cls = torch.cuda.CUDAGraph
    begin, end, reset = graph_cls.capture_begin, graph_cls.capture_end, graph_cls.reset

    def capture_begin(self, *args, **kwargs):
        pool = kwargs.get("pool", args[0] if args else None)
        mark("capture_begin_call", pool=list(pool) if pool else None, graph=id(self),
             stream=torch.cuda.current_stream().cuda_stream)
        out = begin(self, *args, **kwargs)
        mark("capture_begin", graph=id(self), stream=torch.cuda.current_stream().cuda_stream)
        return out

    def capture_end(self, *args, **kwargs):
        mark("capture_end_call", graph=id(self))
        out = end(self, *args, **kwargs)
        pool = list(self.pool())  # known once a capture has ended
        mark("capture_end", pool=pool, graph=id(self))
        weakref.finalize(self, mark, "graph_deleted", pool=pool, graph=id(self))
        return out

    def graph_reset(self, *args, **kwargs):
        mark("graph_reset", graph=id(self))
        return reset(self, *args, **kwargs)

    graph_cls.capture_begin, graph_cls.capture_end, graph_cls.reset = capture_begin, capture_end, graph_reset
    real_empty = torch.cuda.empty_cache

    def empty_cache():
        mark("empty_cache_call")
        real_empty()
        mark("empty_cache")

    torch.cuda.empty_cache = torch.cuda.memory.empty_cache = empty_cache


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Net(torch.nn.Module):
    def __init__(self, vocab=4096, d=512, heads=8, layers=4, ctx=256):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(ctx, d)
        self.blocks = torch.nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def digest(t):
    return hashlib.sha256(t.detach().float().cpu().numpy().tobytes()).hexdigest()[:16]


def loss_of(model, idx, tgt):
    out = model(idx)
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), tgt.reshape(-1))


def graphstep(dev):
    model = Net().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, capturable=True)
    g = torch.Generator(device=dev).manual_seed(1)
    static_idx = torch.randint(0, 4096, (16, 129), device=dev, generator=g)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_of(model, static_idx[:, :-1], static_idx[:, 1:]).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = loss_of(model, static_idx[:, :-1], static_idx[:, 1:])
        static_loss.backward()
        opt.step()
    for _ in range(20):
        static_idx.copy_(torch.randint(0, 4096, (16, 129), device=dev, generator=g))
        graph.replay()
        print("loss", static_loss.item().hex())
    model.eval()
    with torch.no_grad():
        for batch in (8, 16, 32, 64, 128):
            idx = torch.randint(0, 4096, (batch, 128), device=dev, generator=g)
            print("infer", batch, digest(model(idx)[:, -1].argmax(-1)))
    return model


def graphinfer(dev):
    model = Net().to(dev).eval()
    g = torch.Generator(device=dev).manual_seed(1)
    pool = torch.cuda.graph_pool_handle()
    graphs, inputs, outputs = {}, {}, {}
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(torch.zeros(64, 128, dtype=torch.long, device=dev))
        torch.cuda.current_stream().wait_stream(side)
        for batch in (64, 32, 16, 8, 4, 2, 1):
            inputs[batch] = torch.zeros(batch, 128, dtype=torch.long, device=dev)
            graphs[batch] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[batch], pool=pool):
                outputs[batch] = model(inputs[batch])[:, -1].argmax(-1)
        for step in range(24):
            batch = (64, 32, 16, 8, 4, 2, 1)[step % 7]
            if batch not in graphs:
                out = model(torch.randint(0, 4096, (batch, 128), device=dev, generator=g))[:, -1].argmax(-1)
            else:
                inputs[batch].copy_(torch.randint(0, 4096, (batch, 128), device=dev, generator=g))
                graphs[batch].replay()
                out = outputs[batch]
            print("step", step, batch, digest(out))
            if step == 11:
                for odd in (32, 8, 2):
                    del graphs[odd], inputs[odd], outputs[odd]
        for batch in (48, 96):
            print("eager", batch, digest(model(torch.randint(0, 4096, (batch, 128), device=dev, generator=g))))
    return model


def compiled(dev):
    model = Net().to(dev).eval()
    run = torch.compile(model, mode="reduce-overhead")
    g = torch.Generator(device=dev).manual_seed(1)
    with torch.no_grad():
        for batch in (32, 8, 64):
            for rep in range(4):
                out = run(torch.randint(0, 4096, (batch, 128), device=dev, generator=g))
                print("compiled", batch, rep, digest(out[:, -1].argmax(-1)))
    return model


def recordstream(dev):
    model = Net(layers=2).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    producer = torch.cuda.Stream()
    g = torch.Generator(device=dev).manual_seed(1)
    sizes = torch.randint(8, 33, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    pending = None
    for step, batch in enumerate(sizes + [0]):
        ready = None
        if batch:
            with torch.cuda.stream(producer):
                nxt = torch.randint(0, 4096, (batch, 129), device=dev, generator=g)
                scratch = torch.randn(batch, 129, 512, device=dev)  # freed on the producer stream
                nxt.add_(scratch.sum().long() * 0)
                ready = torch.cuda.Event()
                ready.record(producer)
                del scratch
        if pending is not None:
            idx, event = pending
            torch.cuda.current_stream().wait_event(event)
            idx.record_stream(torch.cuda.current_stream())
            opt.zero_grad(set_to_none=True)
            loss = loss_of(model, idx[:, :-1], idx[:, 1:])
            loss.backward()
            opt.step()
            print("loss", step, loss.item().hex())
            del idx
        pending = (nxt, ready) if batch else None
        nxt = None
    return model


def emptycache(dev):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(128, 256, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    steps = 32
    for step in range(steps):
        side = int(torch.randint(64, 225, (1,), generator=g)) // 8 * 8
        opt.zero_grad(set_to_none=True)
        for _ in range(4):
            x = torch.randn(24, 3, side, side, generator=g).to(dev)
            y = torch.randint(0, 10, (24,), generator=g).to(dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y) / 4
            loss.backward()
        opt.step()
        print("loss", step, side, loss.item().hex())
        if step in (steps // 2, steps * 3 // 4):
            torch.cuda.empty_cache()
    return model


WORKLOADS = {"graphstep": graphstep, "graphinfer": graphinfer, "compiled": compiled,
             "recordstream": recordstream, "emptycache": emptycache}


def main():
    name, outdir = sys.argv[1], sys.argv[2]
    snapshot = "--snapshot" in sys.argv[3:]
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    install_markers()
    if snapshot:
        torch.cuda.memory._record_memory_history(context=None, max_entries=10_000_000)
    model = WORKLOADS[name](dev)
    torch.cuda.synchronize()
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().cpu().numpy().tobytes())
    print("params", h.hexdigest())
    stats = torch.cuda.memory_stats()
    out = {"workload": name, "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
           "max_memory_reserved": torch.cuda.max_memory_reserved(),
           "max_memory_allocated": torch.cuda.max_memory_allocated(),
           "num_alloc_retries": stats.get("num_alloc_retries", 0),
           "segments": stats.get("segment.all.allocated", 0), "markers": MARKERS,
           "torch": torch.__version__}
    if snapshot:
        with open(os.path.join(outdir, name + ".snapshot.pickle"), "wb") as f:
            pickle.dump(torch.cuda.memory._snapshot(), f, protocol=4)
    with open(os.path.join(outdir, name + ".stats.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
