"""record's framework test: the stand-in torch allocates and frees blocks in this process and in a
spawned child; a second child imports torch without using CUDA. argv[1] picks the ending: "exit"
(sys.exit(3)), "sigterm" (killed by its own SIGTERM), "oom" (an out-of-memory error for 1 TiB, then
os._exit(5), which skips the exit dump: only the out-of-memory observer's remains) or "oom-small"
(the same for 1 MiB)."""

import builtins
import multiprocessing
import os
import signal
import sys

import torch


def say(text):
    print(text, flush=True)


def child_allocates():
    say("child: user sitecustomize ran: %s" % getattr(builtins, "user_sitecustomize_ran", False))
    block = torch.cuda._fake_alloc(2048)
    torch.cuda._fake_free(block)
    say("child: freed %#x" % block)


def child_no_cuda():
    say("idle child: cuda initialized: %s" % torch.cuda.is_initialized())


def run_child(ctx, target):
    p = ctx.Process(target=target)
    p.start()
    p.join()
    if p.exitcode != 0:
        raise SystemExit("child exit code %d" % p.exitcode)


def main():
    say("parent: user sitecustomize ran: %s" % getattr(builtins, "user_sitecustomize_ran", False))
    a = torch.cuda._fake_alloc(1000)
    b = torch.cuda._fake_alloc(4096)
    torch.cuda._fake_free(a)
    ctx = multiprocessing.get_context("spawn")
    run_child(ctx, child_allocates)
    run_child(ctx, child_no_cuda)
    say("parent: live %#x" % b)
    mode = sys.argv[1]
    if mode == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif mode in ("oom", "oom-small"):
        try:
            torch.cuda._fake_oom(1 << 40 if mode == "oom" else 1 << 20)
        except torch.cuda.OutOfMemoryError as err:
            say("parent: %s" % err)
        sys.stdout.flush()
        os._exit(5)
    sys.exit(3)


if __name__ == "__main__":
    main()
