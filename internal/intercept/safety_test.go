package intercept

import (
	"fmt"
	"github.com/allocscope/allocscope/internal/testcuda"
	"strings"
	"testing"
)

// The safety tests run programs of testdata/progs that launch "device work" on the fake driver
// (fakecuda_launch, which models streams, events, synchronizations and contexts and counts hazards:
// new work over a range that pending, unordered work of another allocation lifetime covers), each
// without the shim and under record --pool's shim with the size-class pool. Each program prints one
// `name: value` line per check; the tests compare the whole text, so a failure names the line that
// differed (for example "hazards: 57" where "hazards: 0" was wanted).

// safetyReport is the end of every safety program's output: no hazards, no cross-context misuse, no
// two live blocks overlapping.
const safetyReport = "hazards: 0\nmisuses: 0\noverlaps: 0\n"

// runSafety runs the program without the shim and with record --pool's, with extraEnv and args, and
// checks that each run exits 0 with nothing on stderr and the stdout wanted (wantBase without the shim,
// wantPool with it).
// The two runs are subtests, so a run that hangs (killed after runTimeout) is named too.
func runSafety(t *testing.T, name string, extraEnv, args []string, wantBase, wantPool string) {
	t.Helper()
	t.Run("without the shim", func(t *testing.T) {
		checkSafety(t, name+" without the shim", runWith(t, "", nil, extraEnv, name, args...), wantBase)
	})
	t.Run("under record --pool", func(t *testing.T) {
		spec, err := PoolSpec(sizeClassPool(t))
		if err != nil {
			t.Fatal(err)
		}
		served := runWith(t, newLogDir(t), []string{env(t).Shim}, append([]string{EnvPool + "=" + spec}, extraEnv...),
			name, args...)
		checkSafety(t, name+" under record --pool", served, wantPool)
	})
}

// checkSafety fails t with every line of got's stdout that differs from want, and with a non-zero exit
// or anything on stderr.
func checkSafety(t *testing.T, what string, got result, want string) {
	t.Helper()
	if got.ExitCode != 0 || got.Stderr != "" {
		t.Errorf("%s: exit %d, stderr %q; want exit 0, nothing on stderr", what, got.ExitCode, got.Stderr)
	}
	if got.Stdout == want {
		return
	}
	var diffs []string
	for _, d := range testcuda.LineDiffs(strings.Split(got.Stdout, "\n"), strings.Split(want, "\n")) {
		diffs = append(diffs, fmt.Sprintf("line %d: %q, want %q", d.Index+1, d.Got, d.Want))
	}
	t.Errorf("%s: stdout differs:\n  %s\nwhole stdout:\n%s", what, strings.Join(diffs, "\n  "), got.Stdout)
}

// A device synchronization that waits (FAKECUDA_SYNC_DELAY_US) while other threads launch on their
// blocks, cudaFree them, allocate the same sizes again and launch on the new blocks on another
// non-blocking stream (testdata/progs/sync_race.c): no new work may overlap old work the synchronization
// did not wait for.
func TestSafetySyncRace(t *testing.T) {
	want := "failures: 0\n" + safetyReport
	runSafety(t, "sync_race", []string{"FAKECUDA_SYNC_DELAY_US=200000"}, nil, want, want)
}

// Graph capture (testdata/progs/capture.c): stream-ordered calls on a capturing non-blocking stream
// reach the driver as graph nodes (the fake counts one graph allocation and one free, as the program
// made), the capture ends with 0, nothing records events or waits on the capturing stream, and
// cudaMalloc inside a global-mode capture returns 900 and invalidates it (its end returns 901) exactly
// as without the shim.
func TestSafetyCapture(t *testing.T) {
	want := `begin: 0
cudaMallocAsync while capturing: 0
cudaFreeAsync while capturing: 0
end: 0
graph handle: yes
cudaMalloc after the capture: 0
begin again: 0
cudaMalloc while capturing: 900
end: 901
graph allocations: fake 1, program 1
graph frees: fake 1, program 1
capture intrusions: 0
cudaFree: 0
` + safetyReport
	runSafety(t, "capture", nil, nil, want, want)
}

// Frees that must be refused (testdata/progs/double_free.c): the second cudaFree of a block returns 1,
// cuMemFree_v2 of an address inside a live block returns 1, 1,000 more allocations overlap no live
// block, and under the pool the fake sees neither free (no unknown or interior free reaches it) and
// still holds an allocation under a live block (the pool's region). Without the shim the fake itself
// refuses both, counting one unknown and one interior free.
func TestSafetyDoubleFree(t *testing.T) {
	head := "first block: 0x200000000000\nfree: 0\nsecond free: 1\ncuMemFree_v2 inside a live block: 1\n" +
		"failed allocations: 0\nfake allocation holding a live block: 0\n"
	runSafety(t, "double_free", nil, nil, head+"unknown frees: 1\ninterior frees: 1\n"+safetyReport,
		head+"unknown frees: 0\ninterior frees: 0\n"+safetyReport)
}

// A context reset under the program's blocks (testdata/progs/reset.c): cudaDeviceReset, the last
// cuDevicePrimaryCtxRelease, cuCtxDestroy_v2 of a context of cuCtxCreate_v2. The fake's allocator
// starts again at the region's base; the 300 MiB and 200 small blocks allocated afterwards overlap no
// live block, no hazard, and a free of a pre-reset pointer returns 1 as without the shim.
func TestSafetyReset(t *testing.T) {
	want := "reset: 0\nfailed allocations: 0\nfailed frees after the reset: 0\nfree of a pre-reset pointer: 1\n" +
		safetyReport
	for _, mode := range []string{"runtime", "release", "destroy"} {
		t.Run(mode, func(t *testing.T) { runSafety(t, "reset", nil, []string{mode}, want, want) })
	}
}

// Two devices (testdata/progs/two_devices.c, FAKECUDA_DEVICES=2): a device-1 block freed with
// cudaFreeAsync on a device-1 stream while device 0 is current, and cudaMallocAsync on that stream
// while device 0 is current gets device 1's memory; no event crosses contexts, no hazard.
func TestSafetyTwoDevices(t *testing.T) {
	want := `cudaMalloc on device 1: 0
block on device: 1
cudaFreeAsync on device 1's stream, device 0 current: 0
cudaMallocAsync on device 1's stream, device 0 current: 0
block on device: 1
cudaFreeAsync: 0
cudaDeviceSynchronize: 0
` + safetyReport
	runSafety(t, "two_devices", []string{"FAKECUDA_DEVICES=2"}, nil, want, want)
}

// A synchronization the pool makes while another thread allocates (testdata/progs/sync_deadlock.c,
// FAKECUDA_SYNC_PROBE=1: inside cuCtxSynchronize and cuEventSynchronize the fake has another thread
// cudaMalloc and cudaFree and waits for it). A shim that holds its lock across the wait deadlocks: the
// run is killed after runTimeout (60 s), a backstop only, and the test fails saying so.
func TestSafetySyncDeadlock(t *testing.T) {
	want := "failed calls: 0\ncudaDeviceSynchronize: 0\n" + safetyReport
	runSafety(t, "sync_deadlock", []string{"FAKECUDA_SYNC_PROBE=1"}, nil, want, want)
}

// Capacity (testdata/progs/oom.c, FAKECUDA_CAPACITY=1 GiB): after 600 blocks of 1 MiB are freed, 700
// MiB must be had, under the pool too (it gives idle memory back and retries).
func TestSafetyOutOfMemory(t *testing.T) {
	want := "failed 1 MiB calls: 0\n700 MiB: 0\n" + safetyReport
	runSafety(t, "oom", []string{"FAKECUDA_CAPACITY=1073741824"}, nil, want, want)
}

// cuMemGetAddressRange_v2 of p + 100 for a 1 MiB block p gives base p and size 1 MiB, and the free
// memory cudaMemGetInfo reports afterwards can be had in one cudaMalloc (testdata/progs/address_range.c,
// on a fake device of 1 GiB).
func TestSafetyAddressRange(t *testing.T) {
	want := "cudaMalloc: 0\ncuMemGetAddressRange_v2: 0\nbase is the block: yes\nsize: 1048576\n" +
		"free dropped: yes\ncudaMalloc of the free memory but 4 MiB: 0\ncudaFree of it: 0\n" + safetyReport
	runSafety(t, "address_range", []string{"FAKECUDA_CAPACITY=1073741824"}, nil, want, want)
}

// 64 threads of a seeded random mix over two devices with a reset in the middle
// (testdata/progs/stress.c), three fixed seeds of 400 operations per thread: no failed call, no
// hazard, no overlapping live blocks.
func TestSafetyStress(t *testing.T) {
	for _, seed := range []string{"1", "2", "3"} {
		t.Run("seed "+seed, func(t *testing.T) {
			want := "seed: " + seed + "\nops: 400\nfailed cudaMalloc: 0\nfailed cudaFree: 0\nfailed cudaMallocAsync: 0\n" +
				"failed cudaFreeAsync: 0\nfailed synchronizations: 0\nfailed captures: 0\n" +
				"failed streams, events and resets: 0\n" + safetyReport
			runSafety(t, "stress", []string{"FAKECUDA_DEVICES=2"}, []string{seed, "400"}, want, want)
		})
	}
}
