package intercept

// Robustness tests: the shim must never stall, hang or silently lose events. Every program runs
// through testcuda.Env.RunWith, which kills it (and fails the test) after a deadline, so a deadlock
// or an infinite loop fails instead of hanging go test.

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/trace"
)

// runTimeout bounds every program run of these tests.
const runTimeout = 60 * time.Second

// runWith runs a program (a testdata/progs name or a path) with the given LD_PRELOAD libraries,
// log directory and extra environment, under runTimeout.
func runWith(t testing.TB, logDir string, preload, extraEnv []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	return env(t).RunWith(t, ctx, logDir, preload, extraEnv, name, args...)
}

// newLogDir prepares an empty log directory.
func newLogDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "logs")
	if err := PrepareLogDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// countSink is an eventSink that keeps no event: it counts them per function, checks with a bitmap
// that no seq below limit comes twice, and hands each event with its index to check, if set.
type countSink struct {
	limit      uint64
	bits       []uint64
	n          int64
	dups       int64
	beyond     int64 // seqs >= limit
	byFunction map[string]int64
	check      func(i int64, e *trace.Event) error
	firstErr   error
}

func newCountSink(limit uint64) *countSink {
	return &countSink{limit: limit, bits: make([]uint64, (limit+63)/64), byFunction: map[string]int64{}}
}

func (s *countSink) Write(e *trace.Event) error {
	if e.Seq >= s.limit {
		s.beyond++
	} else if w, b := e.Seq/64, uint64(1)<<(e.Seq%64); s.bits[w]&b != 0 {
		s.dups++
	} else {
		s.bits[w] |= b
	}
	s.byFunction[e.Function]++
	if s.check != nil && s.firstErr == nil {
		if err := s.check(s.n, e); err != nil {
			s.firstErr = fmt.Errorf("event %d (seq %d): %w: %s", s.n, e.Seq, err, testcuda.Render(e))
		}
	}
	s.n++
	return nil
}

// dense reports whether the sink saw exactly the seqs 0..n-1, each once.
func (s *countSink) dense(n uint64) error {
	set := 0
	for _, w := range s.bits {
		set += bits.OnesCount64(w)
	}
	if s.dups != 0 || s.beyond != 0 || uint64(set) != n || uint64(s.n) != n {
		return fmt.Errorf("%d events, %d distinct seqs below %d, %d repeated, %d beyond; want seqs 0..%d once each",
			s.n, set, s.limit, s.dups, s.beyond, n-1)
	}
	for i := uint64(0); i < n; i++ {
		if s.bits[i/64]&(1<<(i%64)) == 0 {
			return fmt.Errorf("seq %d missing", i)
		}
	}
	return nil
}

// convertCounting converts dir into a countSink; the conversion must succeed.
func convertCounting(t testing.TB, dir string, sink *countSink) Summary {
	t.Helper()
	sum, err := convert(dir, sink, ConvertOptions{})
	if err != nil {
		t.Fatalf("convert %s: %v", dir, err)
	}
	if sum.Events != sink.n {
		t.Errorf("summary says %d events, sink got %d", sum.Events, sink.n)
	}
	return sum
}

// loopEvents lists the events of `loop pairs runtime|driver` (testdata/progs/loop.c) as
// testcuda.Render prints them: pair i allocates 512*(i%8+1) bytes, and the fake driver hands each
// of the 8 sizes one address, reused by every later pair of that size.
func loopEvents(pairs int, driver bool) string {
	alloc, free, layer := "cudaMalloc", "cudaFree", "runtime"
	if driver {
		alloc, free, layer = "cuMemAlloc_v2", "cuMemFree_v2", "driver"
	}
	var b strings.Builder
	for i := 0; i < pairs; i++ {
		k := uint64(i % 8)
		size := 512 * (k + 1)
		addr := uint64(0x200000000000) + 512*k*(k+1)/2
		fmt.Fprintf(&b, "%s alloc device %s size=%d addr=%#x result=0 dev=0\n", alloc, layer, size, addr)
		fmt.Fprintf(&b, "%s free device %s size=%d addr=%#x result=0 dev=0\n", free, layer, size, addr)
	}
	return b.String()
}

// loopCheck checks that event i of `loop N runtime` is where a prefix of its events has it.
func loopCheck(i int64, e *trace.Event) error {
	want, op := "cudaMalloc", trace.OpAlloc
	if i%2 == 1 {
		want, op = "cudaFree", trace.OpFree
	}
	size := uint64(512 * ((i/2)%8 + 1))
	if e.Seq != uint64(i) || e.Function != want || e.Op != op || e.Size != size || !e.OK() {
		return fmt.Errorf("want seq %d %s size %d ok (a prefix of the program's events)", i, want, size)
	}
	return nil
}

// 1. Many threads: 64 threads x 200,000 cudaMalloc/cudaFree pairs are recorded whole (25,600,000
// events, seqs 0..N-1 once each, none lost). How long they take beside one thread making the same
// calls is BenchmarkManyThreads' (docs/benchmarks.md).
func TestManyThreads(t *testing.T) {
	const threads, iterations = 64, 200000
	const events = 2 * threads * iterations
	base := runWith(t, "", nil, nil, "threads", strconv.Itoa(threads), strconv.Itoa(iterations))
	wantOut := fmt.Sprintf("threads %d, iterations %d, failures 0\n", threads, iterations)
	if base.ExitCode != 17 || base.Stdout != wantOut {
		t.Fatalf("without the shim: exit %d, stdout %q", base.ExitCode, base.Stdout)
	}
	dir := newLogDir(t)
	runThreads(t, dir, threads, iterations)
	sink := newCountSink(events)
	sum := convertCounting(t, dir, sink)
	os.RemoveAll(dir) // gigabytes
	if err := sink.dense(events); err != nil {
		t.Errorf("64 threads: %v", err)
	}
	if sink.byFunction["cudaMalloc"] != events/2 || sink.byFunction["cudaFree"] != events/2 || len(sink.byFunction) != 2 {
		t.Errorf("64 threads: events per function %v, want %d cudaMalloc and %d cudaFree", sink.byFunction, events/2, events/2)
	}
	if sum.Lost != 0 || len(sum.Warnings) != 0 {
		t.Errorf("64 threads: %d lost, warnings %q", sum.Lost, sum.Warnings)
	}
}

// runThreads runs `threads N iterations` under the shim with its logs in dir and checks that every
// thread's calls succeeded.
func runThreads(t testing.TB, dir string, threads, iterations int) {
	t.Helper()
	res := runWith(t, dir, []string{env(t).Shim}, nil, "threads", strconv.Itoa(threads), strconv.Itoa(iterations))
	if res.ExitCode != 17 || res.Stdout != fmt.Sprintf("threads %d, iterations %d, failures 0\n", threads, iterations) {
		t.Fatalf("%d threads under the shim: exit %d signal %v, stdout %q, stderr %q", threads, res.ExitCode, res.Signal,
			res.Stdout, res.Stderr)
	}
}

// timeThreads runs `threads N iterations` and `threads 1 N*iterations` under the shim and returns
// their wall times.
func timeThreads(t testing.TB, threads, iterations int) (many, one time.Duration) {
	for i, run := range [][2]int{{threads, iterations}, {1, threads * iterations}} {
		dir := newLogDir(t)
		start := time.Now()
		runThreads(t, dir, run[0], run[1])
		took := time.Since(start)
		os.RemoveAll(dir) // gigabytes
		if i == 0 {
			many = took
		} else {
			one = took
		}
	}
	return many, one
}

// BenchmarkManyThreads reports the wall time of 64 threads x 200,000 pairs under the shim and of one
// thread making the same calls, in seconds.
//
//	go test -run '^$' -bench ManyThreads -benchtime 1x ./internal/intercept/
func BenchmarkManyThreads(b *testing.B) {
	var many, one time.Duration
	for i := 0; i < b.N; i++ {
		m, o := timeThreads(b, 64, 200000)
		many, one = many+m, one+o
	}
	b.ReportMetric(many.Seconds()/float64(b.N), "s-64threads")
	b.ReportMetric(one.Seconds()/float64(b.N), "s-1thread")
	b.ReportMetric(many.Seconds()/one.Seconds(), "ratio")
	b.ReportMetric(0, "ns/op")
}

// 2. Another LD_PRELOAD interposer of cuMemAlloc_v2/cuMemFree_v2 that resolves the next definition
// with dlsym(RTLD_NEXT) in its constructor, after the shim or before it: the program behaves as
// without any preload, the interposer sees every call, and the trace holds exactly the driver calls.
func TestOtherInterposer(t *testing.T) {
	const pairs = 1000
	e := env(t)
	base := runWith(t, "", nil, nil, "loop", strconv.Itoa(pairs), "driver")
	if base.ExitCode != 0 || base.Stdout != "loop: 1000 pairs through the driver, 0 failures\n" || base.Stderr != "" {
		t.Fatalf("without preload: %+v", base)
	}
	interposer := e.Preload("interposer")
	wantStderr := fmt.Sprintf("interposer: cuMemAlloc_v2 %d, cuMemFree_v2 %d\n", pairs, pairs)
	alone := runWith(t, "", []string{interposer}, nil, "loop", strconv.Itoa(pairs), "driver")
	if alone.ExitCode != 0 || alone.Stdout != base.Stdout || alone.Stderr != wantStderr {
		t.Fatalf("interposer alone: exit %d, stdout %q, stderr %q; want stderr %q", alone.ExitCode, alone.Stdout,
			alone.Stderr, wantStderr)
	}
	for _, tc := range []struct {
		name    string
		preload []string
	}{
		{"shim-first", []string{e.Shim, interposer}},
		{"interposer-first", []string{interposer, e.Shim}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := newLogDir(t)
			got := runWith(t, dir, tc.preload, nil, "loop", strconv.Itoa(pairs), "driver")
			if got.ExitCode != 0 || got.Signal != 0 || got.Stdout != base.Stdout || got.Stderr != wantStderr {
				t.Fatalf("exit %d signal %v, stdout %q, stderr %q; want as without the shim, stderr %q", got.ExitCode,
					got.Signal, got.Stdout, got.Stderr, wantStderr)
			}
			events, _ := convertDir(t, dir)
			checkEvents(t, events, loopEvents(pairs, true))
			checkSeqs(t, events, 0)
		})
	}
}

// 3. A driver library linked without -Bsymbolic, dlopen'ed RTLD_LOCAL by path, whose cuGetProcAddress
// hands out its own exported functions (which resolve to the shim's exports): the program gets the
// same results as without the shim, and the trace holds exactly its four calls.
func TestProcAddressOfLocalExportedDriver(t *testing.T) {
	e := env(t)
	base := runWith(t, "", nil, nil, "gpa_local", e.ExportedDriver)
	wantOut := "cuGetProcAddress: 0 0 0 0\ncuMemAlloc(1000) = 0 0x200000000000\n" +
		"cuMemAllocAsync(3000) = 0 0x200000000400\ncuMemFreeAsync = 0\ncuMemFree = 0\n"
	if base.ExitCode != 29 || base.Stdout != wantOut {
		t.Fatalf("without the shim: exit %d, stdout:\n%s", base.ExitCode, base.Stdout)
	}
	dir := newLogDir(t)
	got := runWith(t, dir, []string{e.Shim}, nil, "gpa_local", e.ExportedDriver)
	if got.ExitCode != base.ExitCode || got.Stdout != base.Stdout || got.Stderr != base.Stderr {
		t.Errorf("under the shim: exit %d, stdout:\n%s\nstderr %q; want as without it", got.ExitCode, got.Stdout, got.Stderr)
	}
	events, _ := convertDir(t, dir)
	checkEvents(t, events, `
cuMemAlloc_v2 alloc device driver size=1000 addr=0x200000000000 result=0 dev=0
cuMemAllocAsync alloc device driver size=3000 addr=0x200000000400 result=0 dev=0 stream=0x71
cuMemFreeAsync free device driver size=3000 addr=0x200000000400 result=0 dev=0 stream=0x71
cuMemFree_v2 free device driver size=1000 addr=0x200000000000 result=0 dev=0`)
	checkSeqs(t, events, 0)
}

// fullDiskPairs is the number of cudaMalloc/cudaFree pairs of the full-disk tests.
const fullDiskPairs = 500000

// 5. The log directory's filesystem fills up (RLIMIT_FSIZE stands in: EFBIG takes the same path as
// ENOSPC): the program's output and exit code stay the same, the logs convert (no "bad magic"), the
// trace holds a prefix of the events and the summary counts the rest as lost: Events+Lost == 2N.
func TestFullDiskFileSizeLimit(t *testing.T) {
	e := env(t)
	dir := newLogDir(t)
	// ulimit -f: 8192 blocks (4 MiB in sh's 512-byte blocks, 8 MiB in bash's 1024) of about 64 MB of
	// records; trap "" XFSZ: the write fails instead of killing the program.
	got := runWith(t, dir, []string{e.Shim}, nil, "/bin/sh", "-c", `ulimit -f 8192; trap "" XFSZ; exec "$0" "$@"`,
		e.Prog("loop"), strconv.Itoa(fullDiskPairs))
	checkFullDisk(t, dir, got)
}

// 5'. The same on a real full filesystem: an 8 MiB tmpfs (skipped where mounting is not allowed).
func TestFullDiskTmpfs(t *testing.T) {
	e := env(t)
	mnt := mountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "logs")
	if err := PrepareLogDir(dir); err != nil {
		t.Fatal(err)
	}
	got := runWith(t, dir, []string{e.Shim}, nil, "loop", strconv.Itoa(fullDiskPairs))
	checkFullDisk(t, dir, got)
}

// mountTmpfs mounts a tmpfs of size on a new directory, unmounted at the end of the test, or skips
// the test when this machine does not let it.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	mnt := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a %s tmpfs here (needs root or CAP_SYS_ADMIN; EPERM in most containers): %v: %s",
			size, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

func checkFullDisk(t *testing.T, dir string, got result) {
	t.Helper()
	const events = 2 * fullDiskPairs
	want := fmt.Sprintf("loop: %d pairs through the runtime, 0 failures\n", fullDiskPairs)
	if got.ExitCode != 0 || got.Signal != 0 || got.Stdout != want {
		t.Errorf("exit %d signal %v, stdout %q; want 0 and %q (stderr %q)", got.ExitCode, got.Signal, got.Stdout, want, got.Stderr)
	}
	if n := strings.Count(got.Stderr, "\n"); n > 1 {
		t.Errorf("stderr has %d lines, want at most one notice:\n%s", n, got.Stderr)
	}
	sink := newCountSink(events)
	sink.check = loopCheck
	sum := convertCounting(t, dir, sink)
	if sink.firstErr != nil {
		t.Errorf("trace is not a prefix of the program's events: %v", sink.firstErr)
	}
	if sum.Events+sum.Lost != events {
		t.Errorf("summary: %d events + %d lost = %d, want %d (warnings %q)", sum.Events, sum.Lost, sum.Events+sum.Lost,
			events, sum.Warnings)
	}
	if sum.Events >= events {
		t.Errorf("all %d events recorded: the filesystem did not fill up, the test proves nothing", sum.Events)
	}
	t.Logf("recorded %d events, %d lost; stderr %q", sum.Events, sum.Lost, got.Stderr)
}

// 6. A program that drops root privileges before its first CUDA call, with a log directory owned by
// root (mode 0755): all its 200 events are recorded (the shim opens its files before the drop).
func TestPrivilegeDrop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the program drops from root to uid 65534 (nobody)")
	}
	e := env(t)
	base := runWith(t, "", nil, nil, "privdrop")
	if base.ExitCode != 0 || base.Stdout != "uid 65534, failures 0\n" || base.Stderr != "" {
		t.Fatalf("without the shim: %+v", base)
	}
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "logs")
	if err := PrepareLogDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	got := runWith(t, dir, []string{e.Shim}, nil, "privdrop")
	if got.ExitCode != 0 || got.Stdout != base.Stdout || got.Stderr != "" {
		t.Errorf("under the shim: exit %d, stdout %q, stderr %q; want as without it", got.ExitCode, got.Stdout, got.Stderr)
	}
	events, _ := convertDir(t, dir)
	var want strings.Builder
	for i := 0; i < 100; i++ {
		want.WriteString("cudaMalloc alloc device runtime size=2048 addr=0x200000000000 result=0 dev=0\n" +
			"cudaFree free device runtime size=2048 addr=0x200000000000 result=0 dev=0\n")
	}
	checkEvents(t, events, want.String())
	checkSeqs(t, events, 0)
}

// 7. CUDA calls from signal handlers: the first SIGUSR1 arrives inside the main thread's first
// cudaMalloc (the fake driver raises it), then a 50 us interval timer interrupts 200,000 pairs. No
// hang, the exit code unchanged, and every call recorded, the handlers' included:
// 2*(main pairs + handler pairs) events, handler pairs of them cudaMalloc(777).
//
// Known limit: a handler's driver-API call made while the thread is inside a runtime call cannot be
// told from the runtime's own nested driver call, so the handler uses the runtime API only.
func TestSignalHandlerCalls(t *testing.T) {
	e := env(t)
	raise := []string{fmt.Sprintf("FAKECUDA_RAISE=%d:1", int(syscall.SIGUSR1))}
	base := runWith(t, "", nil, raise, "sighandler")
	bm, bh := parseSighandler(t, "without the shim", base)
	if bm != 200001 || bh < 1 {
		t.Fatalf("without the shim: main pairs %d, handler pairs %d", bm, bh)
	}
	dir := newLogDir(t)
	got := runWith(t, dir, []string{e.Shim}, raise, "sighandler")
	mainPairs, handlerPairs := parseSighandler(t, "under the shim", got)
	if got.Stderr != "" {
		t.Errorf("stderr %q", got.Stderr)
	}
	events := uint64(2 * (mainPairs + handlerPairs))
	sink := newCountSink(events)
	var handlerAllocs int64
	sink.check = func(_ int64, e *trace.Event) error {
		if e.Function == "cudaMalloc" && e.Size == 777 {
			handlerAllocs++
		}
		return nil
	}
	convertCounting(t, dir, sink)
	if err := sink.dense(events); err != nil {
		t.Errorf("main pairs %d, handler pairs %d: %v", mainPairs, handlerPairs, err)
	}
	if handlerAllocs != handlerPairs || sink.byFunction["cudaMalloc"] != mainPairs+handlerPairs ||
		sink.byFunction["cudaFree"] != mainPairs+handlerPairs {
		t.Errorf("%d handler cudaMalloc(777) recorded of %d; per function %v; want %d of each", handlerAllocs, handlerPairs,
			sink.byFunction, mainPairs+handlerPairs)
	}
}

// parseSighandler reads "main pairs M, handler pairs H, failures 0" and checks exit code 0.
func parseSighandler(t *testing.T, what string, r result) (mainPairs, handlerPairs int64) {
	t.Helper()
	var failures int64
	if _, err := fmt.Sscanf(r.Stdout, "main pairs %d, handler pairs %d, failures %d\n", &mainPairs, &handlerPairs,
		&failures); err != nil || r.ExitCode != 0 || r.Signal != 0 || failures != 0 {
		t.Fatalf("%s: exit %d signal %v, stdout %q (%v), stderr %q; want exit 0, no failure", what, r.ExitCode, r.Signal,
			r.Stdout, err, r.Stderr)
	}
	return mainPairs, handlerPairs
}

// 8. The shim's cost per call with addresses the fake driver reuses (fresh=0) and with a new address
// for every allocation (FAKECUDA_FRESH=1, as cudaMallocAsync pools, VMM and bump allocators give).
// Reports the added ns per call by the wall clock (bench's median batch) and by thread CPU time.
//
//	go test -run '^$' -bench FreshAddresses -benchtime 5x ./internal/intercept/
func BenchmarkFreshAddresses(b *testing.B) {
	for _, fresh := range []int{0, 1} {
		b.Run(fmt.Sprintf("fresh=%d", fresh), func(b *testing.B) {
			var wall, cpu []float64
			for i := 0; i < b.N; i++ {
				w, c := addedPerCall(b, fresh)
				wall, cpu = append(wall, w), append(cpu, c)
			}
			b.ReportMetric(median(wall), "ns/call-added")
			b.ReportMetric(median(cpu), "cpu-ns/call-added")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// The shim records every call of bench with addresses the fake driver reuses (fresh=0) and with a
// new address for every allocation (FAKECUDA_FRESH=1), losing none. What it adds per call, by the
// wall clock and by thread CPU time, is BenchmarkFreshAddresses' (docs/benchmarks.md: the targets
// are 50 ns with reused addresses and 100 ns with fresh ones).
func TestFreshAddressRecording(t *testing.T) {
	e := env(t)
	for _, fresh := range []int{0, 1} {
		dir := newLogDir(t)
		extra := []string{"FAKECUDA_FRESH=" + strconv.Itoa(fresh)}
		if res := runWith(t, dir, []string{e.Shim}, extra, "bench", "1", strconv.Itoa(benchPairs)); res.ExitCode != 0 {
			t.Fatalf("fresh=%d: bench exit %d, stderr %q", fresh, res.ExitCode, res.Stderr)
		}
		sink := newCountSink(2 * benchPairs)
		sum := convertCounting(t, dir, sink)
		if err := sink.dense(2 * benchPairs); err != nil {
			t.Errorf("fresh=%d: %v", fresh, err)
		}
		if sink.byFunction["cuMemAlloc_v2"] != benchPairs || sink.byFunction["cuMemFree_v2"] != benchPairs ||
			len(sink.byFunction) != 2 || sum.Lost != 0 {
			t.Errorf("fresh=%d: events per function %v, %d lost; want %d cuMemAlloc_v2 and cuMemFree_v2, none lost",
				fresh, sink.byFunction, sum.Lost, benchPairs)
		}
	}
}

// addedPerCall runs bench (1 thread, benchPairs pairs) without and with the shim and returns the
// ns per call it adds by bench's median batch (wall clock) and by thread 0's CPU time.
func addedPerCall(tb testing.TB, fresh int) (wall, cpu float64) {
	e := env(tb)
	extra := []string{"FAKECUDA_FRESH=" + strconv.Itoa(fresh)}
	w0, c0 := benchOnce(tb, "", nil, extra)
	w1, c1 := benchOnce(tb, newLogDir(tb), []string{e.Shim}, extra)
	return w1 - w0, c1 - c0
}

func benchOnce(tb testing.TB, logDir string, preload, extra []string) (wallNs, cpuNs float64) {
	res := runWith(tb, logDir, preload, extra, "bench", "1", strconv.Itoa(benchPairs))
	f := strings.Fields(res.Stdout)
	if res.ExitCode != 0 || len(f) != 6 {
		tb.Fatalf("bench: exit %d, output %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	wallNs, err1 := strconv.ParseFloat(f[1], 64)
	perCPU, err2 := strconv.ParseFloat(f[5], 64)
	if err := errors.Join(err1, err2); err != nil || perCPU <= 0 {
		tb.Fatalf("bench output %q: %v", res.Stdout, err)
	}
	if logDir != "" {
		os.RemoveAll(logDir)
	}
	return wallNs, 1e9 / perCPU
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// A program that closes every descriptor and reuses the numbers for files of its own (a daemon):
// the shim notices before it writes, stops recording with one line, never touches the program's
// files, and the trace plus the lost events account for every call.
func TestProgramReusesLogDescriptors(t *testing.T) {
	dir := newLogDir(t)
	f1, f2 := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	got := runWith(t, dir, []string{env(t).Shim}, nil, "closefds", f1, f2)
	if got.ExitCode != 0 || got.Stdout != "files intact: yes\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and intact files", got.ExitCode, got.Stdout, got.Stderr)
	}
	if !strings.Contains(got.Stderr, "Bad file descriptor; recording stopped") {
		t.Errorf("stderr %q, want the one line saying recording stopped", got.Stderr)
	}
	_, sum := convertDir(t, dir)
	if sum.Events+sum.Lost != 6002 || sum.Lost == 0 {
		t.Errorf("%d events + %d lost, want 6002 with some lost", sum.Events, sum.Lost)
	}
}
