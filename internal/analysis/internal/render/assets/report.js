// allocscope HTML report: draws the charts of every analyzed stream with uPlot, picks the timeline's
// level of detail by the visible range, shows the event behind a hovered point and sorts tables.
(function () {
  "use strict";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  const peakColor = "#d62728", blue = "#1f77b4";

  // bytes writes n as the text report does (units.FormatBytes): "1000 B", "1.5 KiB", "3 MiB".
  function bytes(n) {
    let v = n, u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return u === 0 ? n + " B" : v.toFixed(1).replace(/\.0$/, "") + " " + units[u];
  }

  // duration writes ns nanoseconds with three significant digits.
  function duration(ns) {
    const steps = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"]];
    for (const [f, unit] of steps) {
      if (ns >= f) return +(ns / f).toPrecision(3) + " " + unit;
    }
    return Math.round(ns) + " ns";
  }

  // decimals is the fewest decimals (at most 9) that write every multiple of step exactly.
  function decimals(step) {
    for (let d = 0; d < 9; d++) {
      const v = step * Math.pow(10, d);
      if (Math.abs(v - Math.round(v)) < 1e-6 * Math.max(1, v)) return d;
    }
    return 9;
  }

  // timeLabels writes the ticks of a time axis (seconds) in the unit of the largest tick (s, ms, µs
  // or ns), each with its unit and the decimals the step between ticks needs.
  function timeLabels(ticks, step) {
    let top = 0;
    for (const v of ticks) top = Math.max(top, Math.abs(v));
    const [f, unit] = [[1, "s"], [1e-3, "ms"], [1e-6, "µs"]].find(([f]) => top >= f) || [1e-9, "ns"];
    const d = decimals(step / f);
    return ticks.map((v) => (v / f).toFixed(d) + " " + unit);
  }

  // byteSplits puts the ticks of a bytes axis at round binary values: steps of 1, 2, 2.5 or 5 times a
  // power of ten of the largest unit below max.
  function byteSplits(u, axis, min, max) {
    let unit = 1;
    while (max / unit >= 1024) unit *= 1024;
    const raw = (max - min) / 5 / unit, p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    const step = unit * p * ([1, 2, 2.5, 5, 10].find((m) => m * p >= raw) || 10);
    const out = [];
    for (let v = Math.ceil(min / step) * step; v <= max; v += step) out.push(v);
    return out;
  }

  // undelta returns the running sums of a delta-coded array.
  function undelta(a) {
    const out = new Float64Array(a.length);
    let acc = 0;
    for (let i = 0; i < a.length; i++) { acc += a[i]; out[i] = acc; }
    return out;
  }

  // bound returns the first index whose value is ≥ x (or > x when after).
  function bound(arr, x, after) {
    let lo = 0, hi = arr.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (arr[mid] < x || (after && arr[mid] === x)) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Timeline is one stream's live bytes: uPlot draws the level of detail that select picks.
  class Timeline {
    constructor(sec, d) {
      this.d = d;
      this.root = sec.querySelector(".timeline");
      this.tip = sec.querySelector(".timeline-box .tip");
      this.lod = sec.querySelector(".lod");
      const ns = undelta(d.t);
      this.secs = ns.map((t) => t / 1e9);
      this.v = Float64Array.from(d.v);
      if (d.events) { this.seq = undelta(d.seq); this.n = undelta(d.n); }
      this.levels = d.levels.map((l, i) => {
        const idx = i === 0 ? null : Int32Array.from(undelta(l.p));
        return { w: l.w, idx: idx, t: idx ? Float64Array.from(idx, (j) => this.secs[j]) : this.secs };
      });
      this.bounds = d.bounds;
      this.cur = null;
      this.plot = new uPlot(this.options(), [[0, this.bounds[1]], [0, 0]], this.root);
      this.controls(sec);
      this.zoom(this.bounds[0], this.bounds[1]);
    }

    options() {
      return {
        width: this.root.clientWidth || 900, height: 340,
        scales: { x: { time: false, auto: false, range: (u, a, b) => [a, b] },
          y: { auto: false, range: (u, a, b) => [a, b] } },
        axes: [{ label: "time from the first event",
          values: (u, ticks, axis, space, step) => {
            this.xTicks = ticks;
            return (this.xLabels = timeLabels(ticks, step));
          } },
          { label: "live", size: 80, splits: byteSplits, values: (u, ticks) => ticks.map(bytes) }],
        series: [{}, { label: "live bytes", stroke: blue, fill: "rgba(31,119,180,0.12)", width: 1.5,
          paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }],
        cursor: { drag: { x: true, y: false, setScale: false }, points: { size: 8, fill: blue },
          bind: { dblclick: () => () => null } },
        legend: { show: false },
        hooks: {
          setSelect: [(u) => this.selected(u.select)],
          setCursor: [() => this.hover()],
          draw: [() => this.drawPeak()],
        },
      };
    }

    // select returns the finest level with at most budget points in [a, b] and those points' range.
    select(a, b) {
      for (let L = 0; L < this.levels.length; L++) {
        const t = this.levels[L].t, lo = bound(t, a, false), hi = bound(t, b, true);
        if (hi - lo <= this.d.budget || L === this.levels.length - 1) return { L: L, lo: lo, hi: hi };
      }
    }

    // zoom shows [a, b] (within the bounds): the level of detail select picks for it, with one point
    // beyond the range on each side, and the y axis up to the highest point shown.
    zoom(a, b) {
      const [first, last] = this.bounds, least = (last - first) * 1e-9;
      if (b - a < least) { const c = (a + b) / 2; a = c - least / 2; b = c + least / 2; }
      if (b - a > last - first) { a = first; b = last; }
      if (a < first) { b += first - a; a = first; }
      if (b > last) { a -= b - last; b = last; }
      const s = this.select(a, b), lvl = this.levels[s.L];
      const s0 = Math.max(s.lo - 1, 0), s1 = Math.min(s.hi + 1, lvl.t.length);
      const xs = Array.from(lvl.t.subarray(s0, s1));
      const ys = xs.map((_, i) => this.v[lvl.idx ? lvl.idx[s0 + i] : s0 + i]);
      let top = 1;
      for (const y of ys) top = Math.max(top, y);
      this.cur = { L: s.L, lo: s.lo, hi: s.hi, s0: s0 };
      const u = this.plot;
      u.batch(() => {
        u.setData([xs, ys], false);
        u.setScale("x", { min: a, max: b });
        u.setScale("y", { min: 0, max: top * 1.1 });
      });
      this.root.dataset.visiblePoints = s.hi - s.lo;
      this.root.dataset.level = s.L;
      this.lod.textContent = "level " + s.L + " of " + this.levels.length + ": " +
        (lvl.w === 1 ? "every request" : "lowest and highest of every " + lvl.w + " requests") +
        "; " + (s.hi - s.lo) + " points in view";
    }

    // selected zooms into the range dragged over the chart.
    selected(sel) {
      if (sel.width <= 0) return;
      const u = this.plot;
      this.zoom(u.posToVal(sel.left, "x"), u.posToVal(sel.left + sel.width, "x"));
      u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    }

    controls(sec) {
      const u = this.plot, view = () => [u.scales.x.min, u.scales.x.max];
      const acts = {
        out: () => { const [a, b] = view(), w = b - a; this.zoom(a - w / 2, b + w / 2); },
        left: () => { const [a, b] = view(), w = b - a; this.zoom(a - w / 2, b - w / 2); },
        right: () => { const [a, b] = view(), w = b - a; this.zoom(a + w / 2, b + w / 2); },
        peak: () => { const c = this.d.peak_t / 1e9, w = (this.bounds[1] - this.bounds[0]) / 50; this.zoom(c - w / 2, c + w / 2); },
        reset: () => this.zoom(this.bounds[0], this.bounds[1]),
      };
      sec.querySelectorAll(".toolbar button").forEach((b) => b.addEventListener("click", acts[b.dataset.act]));
      u.over.addEventListener("dblclick", acts.reset);
      u.over.addEventListener("wheel", (e) => {
        e.preventDefault();
        const [a, b] = view(), w = b - a, sideways = Math.abs(e.deltaX) > Math.abs(e.deltaY);
        const step = (sideways ? e.deltaX : e.deltaY) > 0 ? 1 : -1;
        if (e.shiftKey || sideways) { this.zoom(a + step * w / 5, b + step * w / 5); return; }
        const x = u.posToVal(e.offsetX, "x"), f = step > 0 ? 1.25 : 0.8;
        this.zoom(x - (x - a) * f, x + (b - x) * f);
      }, { passive: false });
    }

    // event returns the index in the columns of the point uPlot has at data index i.
    event(i) {
      const lvl = this.levels[this.cur.L], j = this.cur.s0 + i;
      return lvl.idx ? lvl.idx[j] : j;
    }

    hover() {
      const u = this.plot, i = u.cursor.idx;
      if (i == null || !this.cur) { this.tip.hidden = true; return; }
      const e = this.event(i), d = this.d, lvl = this.levels[this.cur.L];
      const lines = [this.secs[e].toFixed(6) + " s · live " + bytes(this.v[e])];
      if (d.events) {
        lines.push((d.free[e] ? "free of " : "allocation of ") + bytes(d.size[e]) + " (seq " + this.seq[e] + ")");
        lines.push("callsite: " + (d.sites[d.site[e]] || "unknown"));
        lines.push("stream: " + d.streams[d.stream[e]]);
        lines.push("lifetime: " + (d.life[e] < 0 ? "still live at the end" : duration(d.life[e])));
      }
      if (lvl.w > 1 && d.events) lines.push(this.bucketLine(i, e, lvl.w));
      this.tip.replaceChildren(...lines.map((s) => el("div", "", s)));
      this.tip.dataset.event = e;
      this.tip.hidden = false;
      const left = u.cursor.left + u.over.offsetLeft, top = u.cursor.top + u.over.offsetTop;
      this.tip.style.left = Math.min(left + 14, this.root.clientWidth - this.tip.offsetWidth) + "px";
      this.tip.style.top = top + 14 + "px";
    }

    // bucketLine says whether the point at data index i (event e) is the lowest or the highest of
    // its bucket of w requests: the other point of the bucket is a neighbour.
    bucketLine(i, e, w) {
      const bucket = (k) => Math.floor((this.n[this.event(k)] - 1) / w), data = this.plot.data[1];
      const other = [i - 1, i + 1].find((k) => k >= 0 && k < data.length && bucket(k) === bucket(i));
      if (other === undefined) return "live bytes stayed at this value for its " + w + " requests";
      return "the " + (this.v[e] > this.v[this.event(other)] ? "highest" : "lowest") + " live bytes of " + w + " requests";
    }

    drawPeak() {
      const u = this.plot, t = this.d.peak_t / 1e9;
      if (t < u.scales.x.min || t > u.scales.x.max) return;
      const x = u.valToPos(t, "x", true), y = u.valToPos(this.d.peak_v, "y", true), r = devicePixelRatio;
      const ctx = u.ctx;
      ctx.save();
      ctx.fillStyle = peakColor;
      ctx.beginPath();
      ctx.arc(x, y, 5 * r, 0, 2 * Math.PI);
      ctx.fill();
      ctx.font = 12 * r + "px sans-serif";
      ctx.textAlign = x > u.bbox.left + u.bbox.width * 0.8 ? "right" : "left";
      ctx.fillText("peak " + bytes(this.d.peak_v), x + (ctx.textAlign === "left" ? 9 : -9) * r, y + 4 * r);
      ctx.restore();
    }

    // pixel returns where event e is drawn, in page coordinates, or null when it is not in view.
    pixel(e) {
      const u = this.plot, r = u.over.getBoundingClientRect(), t = this.secs[e];
      if (t < u.scales.x.min || t > u.scales.x.max) return null;
      return { x: r.left + u.valToPos(t, "x"), y: r.top + u.valToPos(this.v[e], "y") };
    }
  }

  // bars draws a bar chart with a tooltip per bar. With opts.base the y axis starts below the
  // smallest bar rather than at 0, and every bar is labelled with its value (opts.fmt), so that
  // small differences show; opts.xLabel names the x axis.
  function bars(root, d, opts) {
    const tip = root.parentElement.querySelector(".tip"), xs = d.labels.map((_, i) => i), fmt = opts.fmt;
    let lo = 0, hi = 0;
    for (const v of d.values) hi = Math.max(hi, v);
    if (opts.base && d.values.length) {
      const least = Math.min(...d.values), span = hi - least || hi * 0.05 || 1;
      lo = Math.max(0, least - span * 0.3);
      hi += span * 0.15;
    } else {
      hi = hi * 1.1 || 1;
    }
    const u = new uPlot({
      width: root.clientWidth || 600, height: 280, padding: [18, 12, 0, 0],
      scales: { x: { time: false, range: [-0.5, Math.max(xs.length, 1) - 0.5] }, y: { range: () => [lo, hi] } },
      axes: [{ splits: () => xs, values: (u, s) => s.map((i) => d.labels[i]), rotate: -40, size: 120, gap: 2,
        label: opts.xLabel, labelSize: 20 },
        { size: 70, values: (u, ticks) => ticks.map(fmt) }],
      series: [{}, { fill: "rgba(31,119,180,0.6)", stroke: blue, paths: uPlot.paths.bars({ size: [0.7, 60] }),
        points: { show: false }, fillTo: () => lo }],
      legend: { show: false }, cursor: { drag: { x: false, y: false } },
      hooks: { setCursor: [(u) => {
        const i = u.cursor.idx;
        tip.hidden = i == null;
        if (i == null) return;
        tip.textContent = d.notes[i];
        tip.style.left = Math.min(u.cursor.left + u.over.offsetLeft + 14, root.clientWidth - tip.offsetWidth) + "px";
        tip.style.top = u.cursor.top + u.over.offsetTop + 14 + "px";
      }], draw: opts.base ? [(u) => barValues(u, d.values, fmt)] : [] },
    }, [xs, d.values], root);
    u.range = [lo, hi];
    u.labels = d.labels;
    u.barLabels = opts.base ? d.values.map(fmt) : [];
    return u;
  }

  // barValues writes each bar's value above it.
  function barValues(u, values, fmt) {
    const ctx = u.ctx, r = devicePixelRatio;
    ctx.save();
    ctx.fillStyle = "#222";
    ctx.font = 11 * r + "px sans-serif";
    ctx.textAlign = "center";
    values.forEach((v, i) => ctx.fillText(fmt(v), u.valToPos(i, "x", true), u.valToPos(v, "y", true) - 4 * r));
    ctx.restore();
  }

  // cdf draws the lifetime CDF on a log axis.
  function cdf(root, d) {
    if (!d.x || d.x.length === 0) { root.textContent = "no allocation was freed"; return null; }
    return new uPlot({
      width: root.clientWidth || 600, height: 280, padding: [12, 36, 0, 0],
      scales: { x: { time: false, distr: 3 }, y: { range: [0, 1] } },
      axes: [{ label: "lifetime (µs)" }, { label: "fraction of frees" }],
      series: [{}, { stroke: blue, width: 1.5, label: "fraction" }],
      legend: { show: false },
    }, [d.x, d.y], root);
  }

  // hex writes n in hexadecimal, as the report writes addresses.
  function hex(n) { return "0x" + n.toString(16); }

  // PeakMap draws a memory map's regions, one canvas per region, live blocks in their callsite's
  // colour (a merged entry's live bytes first, the rest free), and shows the entry under the pointer.
  class PeakMap {
    constructor(root, d, stacks) {
      this.root = root;
      this.d = d;
      this.stacks = stacks;
      this.tip = root.querySelector(".tip");
      this.bars = Array.from(root.querySelectorAll("canvas.pm-bar"));
      this.bars.forEach((c) => {
        c.addEventListener("mousemove", (e) => this.hover(c, e.clientX, e.clientY));
        c.addEventListener("mouseleave", () => { this.tip.hidden = true; });
      });
      this.draw();
    }

    draw() { this.bars.forEach((c) => this.drawRegion(c, this.d.regions[+c.dataset.region])); }

    drawRegion(c, r) {
      const dpr = devicePixelRatio;
      c.width = Math.max(1, Math.round(c.clientWidth * dpr));
      c.height = Math.max(1, Math.round(c.clientHeight * dpr));
      const ctx = c.getContext("2d"), k = c.width / r.s;
      ctx.fillStyle = this.d.free;
      ctx.fillRect(0, 0, c.width, c.height);
      for (let i = 0; i < r.o.length; i++) {
        if (!r.l[i]) continue;
        ctx.fillStyle = r.c[i] >= 0 ? this.d.colors[r.c[i]] : this.d.other;
        ctx.fillRect(r.o[i] * k, 0, (r.n[i] === 1 ? r.z[i] : r.l[i]) * k, c.height);
      }
      ctx.fillStyle = "#fff"; // a line between neighbouring blocks wide enough to tell apart
      for (let i = 1; i < r.o.length; i++) {
        if (r.z[i] * k >= 4 * dpr && r.z[i - 1] * k >= 4 * dpr) ctx.fillRect(Math.round(r.o[i] * k), 0, dpr, c.height);
      }
    }

    // hover shows the entry of the region of canvas c under the pointer at (x, y), page coordinates.
    hover(c, x, y) {
      const r = this.d.regions[+c.dataset.region], b = c.getBoundingClientRect();
      const off = (x - b.left) / b.width * r.s, i = Math.max(0, bound(r.o, off, true) - 1);
      this.tip.replaceChildren(...this.lines(r, i).map((s) => el("div", "", s)));
      const stack = r.l[i] && r.c[i] >= 0 ? this.stacks[this.d.sites[r.c[i]]] : null;
      if (stack) this.tip.append(...stackLines(stack));
      this.tip.dataset.region = c.dataset.region;
      this.tip.dataset.block = i;
      this.tip.hidden = false;
      const box = this.tip.parentElement.getBoundingClientRect();
      this.tip.style.left = Math.max(0, Math.min(x - box.left + 14, box.width - this.tip.offsetWidth)) + "px";
      this.tip.style.top = y - box.top + 14 + "px";
    }

    // lines describes entry i of region r.
    lines(r, i) {
      const site = r.c[i] >= 0 ? this.d.sites[r.c[i]] : "unknown", out = [];
      if (r.n[i] > 1) {
        out.push(r.n[i] + " blocks together, " + bytes(r.z[i]) + ": " + bytes(r.l[i]) + " live, " + bytes(r.z[i] - r.l[i]) + " free");
      } else {
        out.push((r.l[i] ? "live block of " : "free (cached), ") + bytes(r.z[i]) +
          (r.cl[i] ? (r.z[i] > r.cl[i] ? " (" + r.z[i] / r.cl[i] + " slots" : " (a slot") + " of class " + bytes(r.cl[i]) + ")" : ""));
      }
      out.push("offset " + hex(r.o[i]) + " in " + r.k + " region " + r.a + " (" + bytes(r.s) + ", " + bytes(r.f) + " free)");
      if (r.l[i]) out.push("requested " + bytes(r.r[i]) + (r.n[i] > 1 ? "; the largest live block from " : " by ") + site);
      return out;
    }

    // pixel returns the middle of entry i of region j, in page coordinates.
    pixel(j, i) {
      const c = this.bars[j], r = this.d.regions[j], b = c.getBoundingClientRect();
      return { x: b.left + (r.o[i] + r.z[i] / 2) / r.s * b.width, y: b.top + b.height / 2 };
    }
  }

  // stackLines are a stack's tooltip lines: a heading, then every frame, innermost first.
  function stackLines(stack) {
    return [el("div", "stack-head", "stack (" + stack.length + " frames, innermost first):"),
      ...stack.map((f) => el("div", "frame", f))];
  }

  // stackTips shows the stack of a callsite named in a table cell (data-site) while the pointer is
  // on it, in one tip of the page.
  function stackTips(sec, stacks, tip) {
    sec.querySelectorAll("[data-site]").forEach((c) => {
      const stack = stacks[c.dataset.site];
      if (!stack) return;
      c.classList.add("has-stack");
      c.addEventListener("mouseenter", () => {
        tip.replaceChildren(el("div", "", c.dataset.site), ...stackLines(stack));
        tip.dataset.site = c.dataset.site;
        tip.hidden = false;
        const b = c.getBoundingClientRect();
        tip.style.left = Math.max(0, Math.min(b.left, document.documentElement.clientWidth - tip.offsetWidth - 4)) + "px";
        tip.style.top = (b.bottom + 4 + tip.offsetHeight < innerHeight ? b.bottom + 4 : Math.max(0, b.top - 4 - tip.offsetHeight)) + "px";
      });
      c.addEventListener("mouseleave", () => { tip.hidden = true; });
    });
  }

  // sortable sorts a table's rows by the column whose header is clicked: ascending, then descending.
  function sortable(table) {
    const heads = Array.from(table.tHead.rows[0].cells), body = table.tBodies[0];
    heads.forEach((th, col) => th.addEventListener("click", () => {
      const asc = th.dataset.dir !== "asc", num = th.dataset.type === "num";
      heads.forEach((h) => delete h.dataset.dir);
      th.dataset.dir = asc ? "asc" : "desc";
      const key = (r) => { const c = r.cells[col], v = c.dataset.v ?? c.textContent; return num ? parseFloat(v) : v; };
      const cmp = (x, y) => {
        if (num && (isNaN(x) || isNaN(y))) return isNaN(x) - isNaN(y);
        const c = x < y ? -1 : x > y ? 1 : 0;
        return asc ? c : -c;
      };
      Array.from(body.rows).sort((a, b) => cmp(key(a), key(b))).forEach((r) => body.appendChild(r));
    }));
  }

  const sections = [], plots = [], maps = [], stackTip = el("div", "tip stack-tip");
  stackTip.hidden = true;
  document.body.appendChild(stackTip);
  document.querySelectorAll("section.stream").forEach((sec) => {
    const d = JSON.parse(sec.querySelector("script.data").textContent), stacks = d.stacks || {};
    const tl = new Timeline(sec, d.timeline);
    sections.push(tl);
    plots.push(tl.plot);
    maps.push(Array.from(sec.querySelectorAll(".pmap"), (root) => new PeakMap(root, d.maps[+root.dataset.map], stacks)));
    stackTips(sec, stacks, stackTip);
    const ratios = sec.querySelector(".ratios");
    if (ratios && d.ratios.labels) {
      const r = bars(ratios, d.ratios, { base: true, fmt: (v) => v.toFixed(3) + "×" });
      plots.push(r);
      tl.ratios = r;
    }
    const hist = sec.querySelector(".hist");
    if (hist && d.hist.labels) {
      const h = bars(hist, d.hist, { fmt: (v) => v.toLocaleString("en-US"), xLabel: "request size, from (log2 buckets)" });
      plots.push(h);
      tl.hist = h;
    }
    const c = cdf(sec.querySelector(".cdf"), d.cdf);
    if (c) plots.push(c);
  });
  document.querySelectorAll("table.sortable").forEach(sortable);
  window.addEventListener("resize", () => {
    plots.forEach((u) => {
      const w = u.root.parentElement.clientWidth;
      if (w && w !== u.width) u.setSize({ width: w, height: u.height });
    });
    maps.forEach((ms) => ms.forEach((m) => m.draw()));
  });

  // The page's interface for tests and the console.
  window.allocscope = {
    ready: null, // when every chart was drawn, in ms from the start of the navigation
    sections: sections,
    visiblePoints: (i) => { const c = sections[i || 0].cur; return c.hi - c.lo; },
    level: (i) => sections[i || 0].cur.L,
    range: (i) => { const u = sections[i || 0].plot; return [u.scales.x.min, u.scales.x.max]; },
    zoom: (a, b, i) => sections[i || 0].zoom(a, b),
    pixel: (e, i) => sections[i || 0].pixel(e),
    maps: maps, // per section, its memory maps
    mapPixel: (m, j, k, i) => maps[i || 0][m].pixel(j, k),
    timeAxis: (i) => ({ ticks: sections[i || 0].xTicks, labels: sections[i || 0].xLabels }), // as last drawn
    ratioAxis: (i) => { const r = sections[i || 0].ratios; return { range: r.range, labels: r.barLabels }; },
    histogram: (i) => { const h = sections[i || 0].hist; return { labels: h.labels, values: Array.from(h.data[1]) }; },
  };
  // uPlot draws in a microtask queued before this one.
  queueMicrotask(() => {
    window.allocscope.ready = performance.now();
    document.documentElement.dataset.ready = "1";
  });
})();
