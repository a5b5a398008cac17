"""A deterministic PyTorch training run for record --pool's bars: its outputs must be bit-identical
with and without the pool.

usage: CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 torch_pool.py WORKLOAD [STEPS]

WORKLOAD: mlp (an MLP, 60 steps), cnn (a CNN on batches of varying image size, 40 steps), gpt (a
small GPT decoder trained on random tokens, 20 steps) or generate (batched greedy generation of 96
tokens by that decoder, untrained, its KV cache grown by torch.cat every token; STEPS is the token
count).
Prints every step's loss (float.hex; for generate, a SHA-256 of each step's tokens), a SHA-256 of the
final parameters (of the generated tokens for generate), and on stderr the most device memory in
use (cudaMemGetInfo, sampled after every step) above what was in use before the model was made, and
PyTorch's own max_memory_allocated and max_memory_reserved (0 with PYTORCH_NO_CUDA_MEMORY_CACHING=1).
"""
import hashlib
import sys

import torch


def mlp(dev, steps):
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator(device=dev).manual_seed(1)
    for _ in range(steps or 60):
        x = torch.randn(256, 512, device=dev, generator=g)
        y = torch.randint(0, 10, (256,), device=dev, generator=g)
        yield model, opt, x, y


def cnn(dev, steps):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    gd = torch.Generator(device=dev).manual_seed(1)
    for _ in range(steps or 40):
        side = int(torch.randint(64, 257, (1,), generator=g)) // 8 * 8
        batch = int(torch.randint(16, 65, (1,), generator=g))
        x = torch.randn(batch, 3, side, side, device=dev, generator=gd)
        y = torch.randint(0, 10, (batch,), device=dev, generator=gd)
        yield model, opt, x, y


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x, cache=None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        if cache is None or t > 1:
            mask = torch.ones(t, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - t)
            att = att.masked_fill(~mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab=4096, d=512, heads=8, layers=6, ctx=512):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(ctx, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)

    def forward(self, idx, caches=None, start=0):
        pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i])
        return self.head(self.ln(x))


def gpt(dev, steps):
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator(device=dev).manual_seed(1)
    for _ in range(steps or 20):
        idx = torch.randint(0, 4096, (16, 257), device=dev, generator=g)
        yield model, opt, idx[:, :-1], idx[:, 1:]


def generate(dev, steps):
    """Greedy generation: a prompt of 64 tokens for 32 sequences, then steps tokens one at a time."""
    model = GPT().to(dev).eval()
    g = torch.Generator(device=dev).manual_seed(1)
    idx = torch.randint(0, 4096, (32, 64), device=dev, generator=g)
    caches = [[] for _ in model.blocks]
    out, h = [idx], hashlib.sha256()
    peak, base = 0, total_in_use()
    with torch.no_grad():
        logits = model(idx, caches)
        for t in range(steps or 96):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            print("tokens", hashlib.sha256(nxt.cpu().numpy().tobytes()).hexdigest()[:16])
            logits = model(nxt, caches, start=64 + t)
            peak = max(peak, total_in_use() - base)
    h.update(torch.cat(out, dim=1).cpu().numpy().tobytes())
    print("generated", h.hexdigest())
    report(peak)


def total_in_use():
    free, total = torch.cuda.mem_get_info()
    return total - free


def report(peak):
    print("peak_in_use_above_start", peak, "torch_max_allocated", torch.cuda.max_memory_allocated(),
          "torch_max_reserved", torch.cuda.max_memory_reserved(), file=sys.stderr)


def step_loss(model, x, y):
    out = model(x)
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def main():
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    base, peak = total - free, 0
    model = None
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if sys.argv[1] == "generate":
        return generate(dev, steps)
    for model, opt, x, y in {"mlp": mlp, "cnn": cnn, "gpt": gpt}[sys.argv[1]](dev, steps):
        loss = step_loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print("loss", loss.item().hex())
        free, total = torch.cuda.mem_get_info()
        peak = max(peak, total - free - base)
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    print("params", h.hexdigest())
    report(peak)


if __name__ == "__main__":
    main()
