"""A deterministic PyTorch training run for record --pool's bars: its outputs must be bit-identical
with and without the pool.

usage: CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 torch_pool.py WORKLOAD [STEPS]

WORKLOAD: mlp (an MLP, 60 steps) or cnn (a CNN on batches of varying image size, 40 steps).
Prints every step's loss (float.hex), a SHA-256 of the final parameters, and the most device memory
in use (cudaMemGetInfo, sampled after every step) above what was in use before the model was made.
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
    for model, opt, x, y in {"mlp": mlp, "cnn": cnn}[sys.argv[1]](dev, steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
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
    print("peak_in_use_above_start", peak, file=sys.stderr)


if __name__ == "__main__":
    main()
