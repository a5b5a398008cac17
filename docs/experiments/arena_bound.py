#!/usr/bin/env python3
"""How small can a single large-block arena be for a trace, online and with hindsight?

Reads the output of `go run ./docs/experiments/dumpreqs/main.go TRACE` on stdin, keeps the requests of at
least --threshold bytes (rounded to 512 B, as the pool does) and prints, as a ratio to their peak
live bytes, the smallest arena (to 1 MiB, by bisection) that serves them all without growing:

  best        best fit, block cut from the low end of the span
  best-aged   best fit, block cut from the end next to the older neighbour (the pool's FitBestAged)
  hindsight   knows when every block will be freed: among the spans that fit, the block goes next
              to a neighbour that outlives it (no hole is left when it dies), smallest span first
  paged B     an arena of 4x address space whose 2 MiB pages are mapped on demand, with at most
              B x peak live mapped: fully free pages are unmapped, highest first, when that is
              reached; best-aged placement; prints the pages mapped and unmapped (each page a
              driver call or more on a GPU)
  paged-fewer the same, the block cut from the end of its span that needs fewer new pages (the
              placement of pool's ArenaPaging)

It is a model for deciding what to build, not part of allocscope (docs/experiments/README.md).
"""
import argparse
import bisect
import sys

ALIGN = 512
PAGE = 2 << 20
FAR = 1 << 62


def load(lines, threshold):
    reqs, ids, sizes = [], {}, {}
    for line in lines:
        p = line.split()
        if p[0] == "a":
            size = int(p[2])
            if size < threshold:
                continue
            n = len(sizes)
            sizes[n] = (size + ALIGN - 1) // ALIGN * ALIGN
            ids[int(p[1])] = n
            reqs.append(("a", n))
        elif int(p[1]) in ids:
            reqs.append(("f", ids.pop(int(p[1]))))
    born, death = {}, {}
    for i, (k, b) in enumerate(reqs):
        (born if k == "a" else death)[b] = i
    for b in born:
        death.setdefault(b, len(reqs))
    return reqs, sizes, born, death


class Arena:
    """Free spans sorted by address; live blocks by id, with their neighbours found by address."""

    def __init__(self, size):
        self.size, self.free, self.at, self.by_start, self.by_end = size, [[0, size]], {}, {}, {}

    def fits(self, s):
        return [j for j, f in enumerate(self.free) if f[1] >= s]

    def place(self, j, s, high, b):
        f = self.free[j]
        addr = f[0] + f[1] - s if high else f[0]
        if not high:
            f[0] += s
        f[1] -= s
        if f[1] == 0:
            self.free.pop(j)
        self.at[b] = (addr, s)
        self.by_start[addr], self.by_end[addr + s] = b, b
        return addr

    def release(self, b):
        addr, s = self.at.pop(b)
        del self.by_start[addr], self.by_end[addr + s]
        fr = self.free
        pos = bisect.bisect_left(fr, [addr, 0])
        fr.insert(pos, [addr, s])
        if pos + 1 < len(fr) and fr[pos][0] + fr[pos][1] == fr[pos + 1][0]:
            fr[pos][1] += fr.pop(pos + 1)[1]
        if pos > 0 and fr[pos - 1][0] + fr[pos - 1][1] == fr[pos][0]:
            fr[pos - 1][1] += fr.pop(pos)[1]
        return addr, s

    def neighbour(self, j, high):
        """The block next to span j at its low or high end: None at the arena's ends."""
        a, fs = self.free[j]
        return self.by_start.get(a + fs) if high else self.by_end.get(a)


def best(ar, s, b, t):
    js = ar.fits(s)
    return None if not js else (min(js, key=lambda j: ar.free[j][1]), False)


def best_aged(ar, s, b, t):
    c = best(ar, s, b, t)
    if c is None:
        return None
    lo, hi = ar.neighbour(c[0], False), ar.neighbour(c[0], True)
    age = lambda n: -1 if n is None else t.born[n]
    return (c[0], age(hi) < age(lo))


def hindsight(ar, s, b, t):
    js = ar.fits(s)
    if not js:
        return None
    cands = []
    for j in js:
        for high in (False, True):
            n = ar.neighbour(j, high)
            gap = 0 if n is None or t.death[n] >= t.death[b] else t.death[b] - t.death[n]
            cands.append((gap, ar.free[j][1], ar.free[j][0], j, high))
    return min(cands)[3:]


def fixed(t, size, choose):
    ar = Arena(size)
    for k, b in t.reqs:
        if k == "f":
            ar.release(b)
            continue
        c = choose(ar, t.sizes[b], b, t)
        if c is None:
            return False
        ar.place(c[0], t.sizes[b], c[1], b)
    return True


def fewer_pages(mapped):
    """Best fit, cut from the end of the span that needs fewer pages mapped (the low end on a tie)."""

    def choose(ar, s, b, t):
        c = best_aged(ar, s, b, t)
        if c is None:
            return None
        a, fs = ar.free[c[0]]
        new = lambda addr: sum(1 for p in range(addr // PAGE, (addr + s - 1) // PAGE + 1) if p not in mapped)
        low, high = new(a), new(a + fs - s)
        return (c[0], high < low)

    return choose


def paged(t, budget, fewer):
    ar, mapped, users, maps, unmaps = Arena(4 * t.peak // PAGE * PAGE), set(), {}, 0, 0
    limit = budget // PAGE
    choose = fewer_pages(mapped) if fewer else best_aged
    for k, b in t.reqs:
        if k == "f":
            addr, s = ar.release(b)
            for p in range(addr // PAGE, (addr + s - 1) // PAGE + 1):
                users[p] -= 1
            continue
        s = t.sizes[b]
        c = choose(ar, s, b, t)
        addr = ar.place(c[0], s, c[1], b)
        pages = range(addr // PAGE, (addr + s - 1) // PAGE + 1)
        new = [p for p in pages if p not in mapped]
        over = len(mapped) + len(new) - limit
        if over > 0:
            idle = sorted((p for p in mapped if users.get(p, 0) == 0), reverse=True)
            if len(idle) < over:
                return None
            for p in idle[:over]:
                mapped.discard(p)
            unmaps += over
        mapped.update(new)
        maps += len(new)
        for p in pages:
            users[p] = users.get(p, 0) + 1
    return maps, unmaps


def smallest(t, choose):
    lo, hi = t.peak, 3 * t.peak
    while hi - lo > 1 << 20:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fixed(t, mid, choose) else (mid, hi)
    return hi


class Trace:
    def __init__(self, lines, threshold):
        self.reqs, self.sizes, self.born, self.death = load(lines, threshold)
        live = self.peak = 0
        for k, b in self.reqs:
            live += self.sizes[b] if k == "a" else -self.sizes[b]
            self.peak = max(self.peak, live)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threshold", type=int, default=1 << 20, help="smallest request the arena serves")
    args = ap.parse_args()
    t = Trace(sys.stdin, args.threshold)
    print(f"{len(t.sizes)} requests >= {args.threshold} B, peak live {t.peak / 2**20:.1f} MiB")
    for name, choose in (("best", best), ("best-aged", best_aged), ("hindsight", hindsight)):
        size = smallest(t, choose)
        print(f"{name:10} arena {size / 2**20:8.1f} MiB  {size / t.peak:.3f}x")
    for fewer in (False, True):
        for ratio in (1.02, 1.05):
            r = paged(t, int(ratio * t.peak), fewer)
            name = "paged-fewer" if fewer else "paged"
            print(f"{name} {ratio:.2f}  " + ("fails" if r is None else f"{r[0]} page maps, {r[1]} unmaps"))


if __name__ == "__main__":
    main()
