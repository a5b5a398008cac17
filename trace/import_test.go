package trace

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allocscope/allocscope/internal/torchsnap"
)

const fixtures = "../testdata/trace"

// t0 is the time_us of the first entry of make_fixtures.py's small snapshot, in ns.
const t0 = 1_796_228_603_210_850 * 1000

func TestPyTorchSnapshotSmall(t *testing.T) {
	const seg0, seg1 = 0x7F0000000000, 0x7E0000000000
	us := int64(1000)
	want := []Event{
		{Seq: 0, TimeNs: t0, Device: 0, Op: OpAlloc, Layer: LayerRuntime, Function: FuncTorchSegmentAlloc, Size: 20971520, Address: seg0},
		{Seq: 1, TimeNs: t0 + 1*us, Device: 0, Op: OpAlloc, Layer: LayerFramework, Function: FuncTorchAlloc, Size: 1000, Address: seg0},
		{Seq: 2, TimeNs: t0 + 1*us, Device: 1, Op: OpAlloc, Layer: LayerRuntime, Function: FuncTorchSegmentAlloc, Size: 2097152, Address: seg1, Stream: 3},
		{Seq: 3, TimeNs: t0 + 2*us, Device: 0, Op: OpAlloc, Layer: LayerFramework, Function: FuncTorchAlloc, Size: 512, Address: seg0 + 1024},
		{Seq: 4, TimeNs: t0 + 3*us, Device: 1, Op: OpAlloc, Layer: LayerFramework, Function: FuncTorchAlloc, Size: 4096, Address: seg1, Stream: 3},
		{Seq: 5, TimeNs: t0 + 4*us, Device: 1, Op: OpFreeRequested, Layer: LayerFramework, Function: FuncTorchFreeRequested, Size: 4096, Address: seg1, Stream: 3},
		{Seq: 6, TimeNs: t0 + 5*us, Device: 0, Op: OpFreeRequested, Layer: LayerFramework, Function: FuncTorchFreeRequested, Size: 1000, Address: seg0},
		{Seq: 7, TimeNs: t0 + 5*us, Device: 0, Op: OpFree, Layer: LayerFramework, Function: FuncTorchFree, Size: 1000, Address: seg0},
		{Seq: 8, TimeNs: t0 + 8*us, Device: 0, Op: OpMap, Memory: MemoryVirtual, Layer: LayerDriver, Function: FuncTorchSegmentMap, Size: 2097152, Address: 0x200000000, Stream: 7},
		{Seq: 9, TimeNs: t0 + 9*us, Device: 0, Op: OpUnmap, Memory: MemoryVirtual, Layer: LayerDriver, Function: FuncTorchSegmentUnmap, Size: 2097152, Address: 0x200000000, Stream: 7},
		{Seq: 10, TimeNs: t0 + 10*us, Device: 0, Op: OpOOM, Layer: LayerFramework, Function: FuncTorchOOM, Size: 1 << 40, Address: 123456, Result: 2},
		{Seq: 11, TimeNs: t0 + 11*us, Device: 0, Op: OpFree, Layer: LayerRuntime, Function: FuncTorchSegmentFree, Size: 20971520, Address: seg0},
		{Seq: 12, TimeNs: t0 + 12*us, Device: 1, Op: OpFree, Layer: LayerFramework, Function: FuncTorchFree, Size: 4096, Address: seg1, Stream: 3},
	}
	wantSnap := &torchsnap.Snapshot{
		Segments: []torchsnap.Segment{
			{Device: 0, Address: seg0, TotalSize: 20971520, AllocatedSize: 512, ActiveSize: 512, RequestedSize: 512, Large: true, Blocks: 2,
				BlockList: []torchsnap.Block{{Address: seg0, Size: 1024, State: "inactive"},
					{Address: seg0 + 1024, Size: 512, RequestedSize: 512, State: "active_allocated"}}},
			{Device: 0, Address: 0x200000000, TotalSize: 2097152, Stream: 7, Expandable: true, BlockList: []torchsnap.Block{}},
			{Device: 1, Address: seg1, TotalSize: 2097152, Stream: 3, BlockList: []torchsnap.Block{}},
		},
		Settings: &torchsnap.Settings{
			AllocConf:                  "max_split_size_mb:256,roundup_power2_divisions:[256:1,>:4]",
			MaxSplitSize:               268435456,
			GarbageCollectionThreshold: 0.6,
			RoundupPower2Divisions:     []int64{0, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4, 4, 4, 4},
			PinnedNumRegisterThreads:   1,
		},
		TraceEntries: []int{11, 4},
	}
	// Every entry but the oom carries the stack [forward (train.py:12)].
	stack := []Frame{{Function: "forward", File: "train.py", Line: 12}}
	callsite := callsites{}.intern(stack)
	for i := range want {
		if want[i].Op != OpOOM {
			want[i].Callsite = callsite
		}
	}
	for _, name := range []string{"snapshot_small.pickle", "snapshot_small.pickle.gz", "snapshot_small.pickle.xz"} {
		t.Run(name, func(t *testing.T) {
			r, err := Open(filepath.Join(fixtures, name))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got := drain(t, r)
			if c, ok := r.Callsite(0, callsite); !ok || !reflect.DeepEqual(c, Callsite{Label: "forward (train.py:12)", Frames: stack}) {
				t.Errorf("callsite %#x = %+v, %v", callsite, c, ok)
			}
			if _, ok := r.Callsite(0, 0x400123); ok {
				t.Errorf("a return address resolved as a recorded stack")
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("events:\n%+v\nwant\n%+v", got, want)
			}
			if snap := torchsnap.Of(r); !reflect.DeepEqual(snap, wantSnap) {
				t.Errorf("snapshot = %+v, want %+v", snap, wantSnap)
			}
			wantTotals := []segmentTotals{{Device: 0, Count: 2, TotalBytes: 23068672, AllocatedBytes: 512}, {Device: 1, Count: 1, TotalBytes: 2097152}}
			if got := totals(r.snapshot); !reflect.DeepEqual(got, wantTotals) {
				t.Errorf("totals = %+v, want %+v", got, wantTotals)
			}
			wantInfo := Info{Source: SourcePyTorchSnapshot, StartTime: time.Unix(0, t0).UTC()}
			if !reflect.DeepEqual(r.Info(), wantInfo) {
				t.Errorf("info = %+v, want %+v", r.Info(), wantInfo)
			}
			path := filepath.Join(fixtures, name)
			wantWarn := []string{path + `: device_traces: 1 entries with unknown action "annotate" skipped`}
			if !reflect.DeepEqual(r.Warnings(), wantWarn) {
				t.Errorf("warnings = %q, want %q", r.Warnings(), wantWarn)
			}
		})
	}
}

func TestPyTorchSnapshotOldProtocol2(t *testing.T) {
	r, err := Open(filepath.Join(fixtures, "snapshot_old_proto2.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := drain(t, r)
	want := []Event{
		{Seq: 0, Op: OpAlloc, Layer: LayerRuntime, Function: FuncTorchSegmentAlloc, Size: 256, Address: 0x1000},
		{Seq: 1, Op: OpAlloc, Layer: LayerFramework, Function: FuncTorchAlloc, Size: 512, Address: 0x2000},
		{Seq: 2, Op: OpFreeRequested, Layer: LayerFramework, Function: FuncTorchFreeRequested, Size: 768, Address: 0x3000},
		{Seq: 3, Op: OpFree, Layer: LayerFramework, Function: FuncTorchFree, Size: 1024, Address: 0x4000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n%+v\nwant\n%+v", got, want)
	}
	snap := r.snapshot
	if snap.Settings != nil || len(snap.Segments) != 0 || !reflect.DeepEqual(snap.TraceEntries, []int{4}) {
		t.Errorf("snapshot = %+v, want no settings, no segments, 4 entries", snap)
	}
	if !r.Info().StartTime.IsZero() {
		t.Errorf("start time = %v, want zero (no time_us)", r.Info().StartTime)
	}
}

// segmentTotals sums the segments of one device of a snapshot.
type segmentTotals struct {
	Device         int32
	Count          int
	TotalBytes     uint64 // sum of TotalSize: PyTorch's reserved memory
	AllocatedBytes uint64 // sum of AllocatedSize
}

// totals returns the segment count and bytes of snap per device, by ascending device ordinal.
func totals(snap *torchsnap.Snapshot) []segmentTotals {
	var out []segmentTotals
	for _, seg := range snap.Segments {
		i := slices.IndexFunc(out, func(t segmentTotals) bool { return t.Device == seg.Device })
		if i < 0 {
			i = len(out)
			out = append(out, segmentTotals{Device: seg.Device})
		}
		out[i].Count++
		out[i].TotalBytes += seg.TotalSize
		out[i].AllocatedBytes += seg.AllocatedSize
	}
	slices.SortFunc(out, func(a, b segmentTotals) int { return cmp.Compare(a.Device, b.Device) })
	return out
}

// torchStats are PyTorch's own figures for a run (testdata/torch/WORKLOAD.SETTING.stats.json,
// written by bench/torch_work.py).
type torchStats struct {
	AllocConf         string         `json:"alloc_conf"`
	MaxMemoryReserved uint64         `json:"max_memory_reserved"`
	SegmentAllocCount int            `json:"segment_alloc_count"`
	HistoryActions    map[string]int `json:"history_actions"` // action of the memory history → count
}

// TestPyTorchSnapshotsFromH200 reads the real PyTorch 2.11 snapshots of testdata/torch and checks
// the counts against PyTorch's own figures for the same run (WORKLOAD.SETTING.stats.json beside
// each snapshot): an event per action of the memory history, the segment bytes of the history and
// the segments at the end both max_memory_reserved, and segment_alloc_count segments.
func TestPyTorchSnapshotsFromH200(t *testing.T) {
	// The function each action of the history becomes.
	functions := map[string]string{"alloc": FuncTorchAlloc, "free_requested": FuncTorchFreeRequested,
		"free_completed": FuncTorchFree, "segment_alloc": FuncTorchSegmentAlloc, "segment_map": FuncTorchSegmentMap}
	// With expandable segments PyTorch counts no segment allocation (segment_alloc_count 0); the
	// snapshot ends with 2 segments, which its figures do not hold.
	const expandableSegments = 2
	for _, name := range []string{"train.caching.snapshot.pickle.gz", "train.expandable.snapshot.pickle.xz",
		"cnn.caching.snapshot.pickle.gz", "kvcache.caching.snapshot.pickle.gz"} {
		t.Run(name, func(t *testing.T) {
			run, _, _ := strings.Cut(name, ".snapshot.")
			data, err := os.ReadFile(filepath.Join("../testdata/torch", run+".stats.json"))
			if err != nil {
				t.Fatal(err)
			}
			var st torchStats
			if err := json.Unmarshal(data, &st); err != nil {
				t.Fatal(err)
			}
			wantEvents, wantByFunction := 0, map[string]int{}
			for action, n := range st.HistoryActions {
				f, ok := functions[action]
				if !ok {
					t.Fatalf("%s.stats.json: history action %q has no function here", run, action)
				}
				wantByFunction[f] = n
				wantEvents += n
			}
			expandable := strings.Contains(st.AllocConf, "expandable_segments:True")
			wantSegments := st.SegmentAllocCount
			if expandable {
				wantSegments = expandableSegments
			}
			if wantEvents == 0 || st.MaxMemoryReserved == 0 {
				t.Fatalf("%s.stats.json holds no history or no reserved memory: %+v", run, st)
			}

			r, err := Open(filepath.Join("../testdata/torch", name))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			events := drain(t, r)
			byFunction := map[string]int{}
			var segBytes uint64
			for i, e := range events {
				byFunction[e.Function]++
				if e.Function == FuncTorchSegmentAlloc || e.Function == FuncTorchSegmentMap {
					segBytes += e.Size
				}
				if e.Seq != uint64(i) || (i > 0 && e.TimeNs < events[i-1].TimeNs) {
					t.Fatalf("event %d: seq %d time %d out of order", i, e.Seq, e.TimeNs)
				}
			}
			if len(events) != wantEvents || !reflect.DeepEqual(byFunction, wantByFunction) || segBytes != st.MaxMemoryReserved {
				t.Errorf("got %d events %v, segment bytes %d; want %d %v, %d", len(events), byFunction, segBytes,
					wantEvents, wantByFunction, st.MaxMemoryReserved)
			}
			totals := totals(r.snapshot)
			if len(totals) != 1 || totals[0].Count != wantSegments || totals[0].TotalBytes != st.MaxMemoryReserved {
				t.Errorf("totals = %+v, want %d segments of %d bytes", totals, wantSegments, st.MaxMemoryReserved)
			}
			s := r.snapshot.Settings
			if s == nil || s.ExpandableSegments != expandable || s.MaxSplitSize != -1 || len(s.RoundupPower2Divisions) != 16 {
				t.Errorf("settings = %+v", s)
			}
			if len(r.Warnings()) != 0 {
				t.Errorf("warnings: %q", r.Warnings())
			}
		})
	}
}

func TestRMMTimeOfDay(t *testing.T) {
	r, err := Open(filepath.Join(fixtures, "rmm_timeofday.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := drain(t, r)
	const day = int64(24 * time.Hour)
	lastSecond := day - int64(time.Second)
	want := []Event{
		{Seq: 0, TimeNs: lastSecond + 999000000, TID: 1, Device: -1, Op: OpAlloc, Layer: LayerFramework, Function: FuncRMMAllocate, Size: 1024, Address: 0x7f8a40000000},
		{Seq: 1, TimeNs: lastSecond + 999500000, TID: 1, Device: -1, Op: OpAlloc, Layer: LayerFramework, Function: FuncRMMAllocate, Size: 2048, Address: 0x7f8a40000400, Stream: 0x7f8a38001020},
		{Seq: 2, TimeNs: day + 250000, TID: 12345, Device: -1, Op: OpFree, Layer: LayerFramework, Function: FuncRMMFree, Size: 1024, Address: 0x7f8a40000000},
		{Seq: 3, TimeNs: day + 1000000, TID: 12345, Device: -1, Op: OpAlloc, Layer: LayerFramework, Function: FuncRMMAllocate, Size: 68719476736, Result: 2},
		{Seq: 4, TimeNs: day + 1500000000, TID: 1, Device: -1, Op: OpFree, Layer: LayerFramework, Function: FuncRMMFree, Size: 2048, Address: 0x7f8a40000400, Stream: 0x7f8a38001020},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n%+v\nwant\n%+v", got, want)
	}
	if want := (Info{Source: SourceRMMCSV}); !reflect.DeepEqual(r.Info(), want) {
		t.Errorf("info = %+v, want %+v", r.Info(), want)
	}
}

func TestRMMEpoch(t *testing.T) {
	r, err := Open(filepath.Join(fixtures, "rmm_epoch.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := drain(t, r)
	const s = int64(1634567890) * 1e9
	want := []Event{
		{Seq: 0, TimeNs: s + 123456000, TID: 4242, Device: -1, Op: OpAlloc, Layer: LayerFramework, Function: FuncRMMAllocate, Size: 1024, Address: 0x7f8a40000000, Stream: 0x7f8a38001020},
		{Seq: 1, TimeNs: s + 234567000, TID: 4242, Device: -1, Op: OpAlloc, Layer: LayerFramework, Function: FuncRMMAllocate, Size: 2048, Address: 0x7f8a40000400},
		{Seq: 2, TimeNs: s + 345678000, TID: 4243, Device: -1, Op: OpFree, Layer: LayerFramework, Function: FuncRMMFree, Size: 1024, Address: 0x7f8a40000000, Stream: 0x7f8a38001020},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n%+v\nwant\n%+v", got, want)
	}
	if want := time.Unix(1634567890, 123456000).UTC(); !r.Info().StartTime.Equal(want) {
		t.Errorf("start = %v, want %v", r.Info().StartTime, want)
	}
}

func TestRMMBadRow(t *testing.T) {
	path := filepath.Join(fixtures, "rmm_bad_row.csv")
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Next()
	if want := path + `: line 3: column Size: bad size "sixty-four"`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
	r.Close()

	r, err = Open(path, WithSkipBadRows())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := drain(t, r)
	if len(got) != 2 || got[0].Address != 0x1000 || got[1].Op != OpFree || got[1].Seq != 1 {
		t.Errorf("events = %+v, want the alloc and free of 0x1000 as seq 0 and 1", got)
	}
	if want := []string{path + `: line 3: skipped: column Size: bad size "sixty-four"`}; !reflect.DeepEqual(r.Warnings(), want) {
		t.Errorf("warnings = %q, want %q", r.Warnings(), want)
	}
}

// drain reads all events of r.
func drain(t *testing.T, r *Reader) []Event {
	t.Helper()
	var all []Event
	for {
		batch, err := r.Next()
		if err != nil {
			if err.Error() == "EOF" {
				if done, total := r.Progress(); done != total {
					t.Errorf("progress at the end = %d of %d", done, total)
				}
				return all
			}
			t.Fatal(err)
		}
		all = append(all, batch...)
	}
}

// torchsnap.Of gives the snapshot of a Reader of a PyTorch snapshot only: nil for an Arrow trace's
// Reader and for what is no Reader.
func TestSnapshotOfReadersOnly(t *testing.T) {
	r, err := Open(filepath.Join(fixtures, "snapshot_old_proto2.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if snap := torchsnap.Of(r); snap == nil || !reflect.DeepEqual(snap.TraceEntries, []int{4}) {
		t.Errorf("snapshot's Reader: %+v, want 4 entries", snap)
	}
	a, err := Open(smallArrow)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if snap := torchsnap.Of(a); snap != nil {
		t.Errorf("Arrow trace's Reader: %+v, want nil", snap)
	}
	if snap := torchsnap.Of(Reader{}); snap != nil {
		t.Errorf("a Reader value, not a pointer: %+v, want nil", snap)
	}
}
