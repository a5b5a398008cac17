package trace

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
	"github.com/ulikunitz/xz"

	"github.com/allocscope/allocscope/internal/torchsnap"
)

// maxSnapshotBytes bounds the (decompressed) size of a PyTorch snapshot pickle; it is decoded
// in memory.
const maxSnapshotBytes = 2 << 30

// cudaErrorMemoryAllocation is the CUDA result code given to imported out-of-memory events.
const cudaErrorMemoryAllocation = 2

func (r *Reader) openSnapshot(in readAtSeeker, size int64, closer io.Closer) error {
	data, err := readSnapshotBytes(in, size)
	if closer != nil {
		closer.Close() // everything needed is in data
	}
	if err != nil {
		return err
	}
	// fastUnpickle checks every length against data as it goes: when it succeeds, scanPickle
	// would have found nothing wrong. Otherwise scanPickle reports what is malformed, or
	// gopickle decodes what the fast decoder leaves to it (same value or same error as before).
	root, ok := fastUnpickle(data, len(data)/64)
	if !ok {
		if err := scanPickle(data); err != nil {
			return err
		}
		err = catch(func() (err error) {
			u := pickle.NewUnpickler(bytes.NewReader(data))
			root, err = u.Load()
			return err
		})
		if err != nil {
			return fmt.Errorf("pickle: %w", err)
		}
	}
	imp := snapshotImporter{r: r}
	events, err := imp.convert(root)
	if err != nil {
		return err
	}
	r.src = &sliceSource{events: events}
	return nil
}

// readSnapshotBytes reads the whole pickle, decompressing gzip or xz.
func readSnapshotBytes(in readAtSeeker, size int64) ([]byte, error) {
	head := make([]byte, len(xzMagic))
	n, _ := in.ReadAt(head, 0)
	head = head[:n]
	var z io.Reader
	var kind string
	var err error
	raw := io.NewSectionReader(in, 0, size)
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		kind = "gzip"
		z, err = gzip.NewReader(raw)
	case bytes.HasPrefix(head, xzMagic):
		kind = "xz"
		z, err = xz.NewReader(raw)
	default:
		if size > maxSnapshotBytes {
			return nil, fmt.Errorf("snapshot of %d bytes exceeds the %d-byte limit", size, maxSnapshotBytes)
		}
		data := make([]byte, size)
		if _, err := raw.ReadAt(data, 0); err != nil {
			return nil, fmt.Errorf("byte offset 0: %w", err)
		}
		return data, nil
	}
	if err != nil {
		return nil, fmt.Errorf("byte offset 0: %s header: %w", kind, err)
	}
	data, err := readAllHint(io.LimitReader(z, maxSnapshotBytes+1), decompressedSizeHint(in, size, kind == "gzip"))
	got := int64(len(data))
	if err != nil {
		return nil, fmt.Errorf("%s data, after %d decompressed bytes: %w", kind, got, err)
	}
	if got > maxSnapshotBytes {
		return nil, fmt.Errorf("%s data decompresses to more than %d bytes", kind, maxSnapshotBytes)
	}
	if len(data) == 0 || data[0] != pickleProto {
		return nil, fmt.Errorf("%s data is not a pickle (first bytes %q)", kind, clip(data, 16))
	}
	return data, nil
}

// decompressedSizeHint guesses the decompressed size of a compressed snapshot of size bytes, to
// allocate its buffer once: a gzip file's trailer holds it (modulo 4 GiB, for the last member),
// believed up to deflate's largest ratio (1032:1) so that a corrupt trailer cannot make a small
// file allocate much; otherwise four times the compressed size.
func decompressedSizeHint(in io.ReaderAt, size int64, isGzip bool) int {
	hint := min(4*size, maxSnapshotBytes)
	if isGzip && size >= 18 {
		var tail [4]byte
		if n, _ := in.ReadAt(tail[:], size-4); n == 4 {
			isize := int64(binary.LittleEndian.Uint32(tail[:]))
			if isize >= size/2 && isize <= min(1032*size, maxSnapshotBytes) {
				hint = isize
			}
		}
	}
	return int(hint)
}

// readAllHint reads r to EOF into a buffer first sized hint+1 bytes (so that reading exactly
// hint bytes needs no growth to see EOF).
func readAllHint(r io.Reader, hint int) ([]byte, error) {
	buf := make([]byte, 0, max(hint, 512)+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// sliceSource serves events held in memory in batches of maxBatch.
type sliceSource struct {
	events []Event
	pos    int
}

func (s *sliceSource) next([]Event) ([]Event, error) {
	if s.pos >= len(s.events) {
		return nil, io.EOF
	}
	end := min(s.pos+maxBatch, len(s.events))
	batch := s.events[s.pos:end:end]
	s.pos = end
	return batch, nil
}

func (s *sliceSource) progress() (done, total int64) {
	return int64(s.pos), int64(len(s.events))
}

func (s *sliceSource) close() error { s.events = nil; return nil }

// snapshotImporter turns a decoded snapshot into events and a torchsnap.Snapshot.
type snapshotImporter struct {
	r         *Reader
	skipped   map[string]int // unknown actions and how often they occurred
	callsites callsites
	frames    []Frame // the stack being read, reused
	// stacks maps the addresses of a "frames" list's dicts (stackKey, reused) to the list's
	// Event.Callsite, for the stacks read so far; the decoded values stay alive meanwhile.
	stacks   map[string]uint64
	stackKey []byte
}

func (imp *snapshotImporter) convert(root any) ([]Event, error) {
	top, ok := root.(*types.Dict)
	if !ok {
		return nil, fmt.Errorf("not a PyTorch memory snapshot: top-level object is %s, want a dict", pyType(root))
	}
	snap := &torchsnap.Snapshot{}
	var traces any
	var haveTraces bool
	for _, e := range *top {
		var err error
		switch key, _ := e.Key.(string); key {
		case "device_traces":
			traces, haveTraces = e.Value, true
		case "segments":
			snap.Segments, err = imp.convertSegments(e.Value)
		case "allocator_settings":
			snap.Settings, err = convertSettings(e.Value)
		}
		if err != nil {
			return nil, err
		}
	}
	if !haveTraces {
		return nil, fmt.Errorf(`not a PyTorch memory snapshot: no "device_traces" key`)
	}
	events, err := imp.convertTraces(traces, snap)
	if err != nil {
		return nil, err
	}
	imp.r.snapshot = snap
	imp.r.callsites = imp.callsites
	imp.r.info = Info{Source: SourcePyTorchSnapshot}
	if len(events) > 0 && events[0].TimeNs > 0 {
		imp.r.info.StartTime = time.Unix(0, events[0].TimeNs).UTC()
	}
	for _, action := range slices.Sorted(maps.Keys(imp.skipped)) {
		imp.r.warnf("device_traces: %d entries with unknown action %q skipped", imp.skipped[action], action)
	}
	return events, nil
}

func (imp *snapshotImporter) convertTraces(v any, snap *torchsnap.Snapshot) ([]Event, error) {
	devices, ok := asList(v)
	if !ok {
		return nil, fmt.Errorf(`device_traces: %s, want a list`, pyType(v))
	}
	total := 0
	for _, dv := range devices {
		entries, _ := asList(dv)
		total += len(entries)
	}
	events := make([]Event, 0, total)
	for dev, dv := range devices {
		entries, ok := asList(dv)
		if !ok {
			return nil, fmt.Errorf("device_traces[%d]: %s, want a list", dev, pyType(dv))
		}
		snap.TraceEntries = append(snap.TraceEntries, len(entries))
		for i, ev := range entries {
			e, keep, err := imp.convertEntry(ev)
			if err != nil {
				return nil, fmt.Errorf("device_traces[%d][%d]: %w", dev, i, err)
			}
			if keep {
				e.Device = int32(dev)
				events = append(events, e)
			}
		}
	}
	// Device lists are concatenated in device order; a stable sort by time keeps list order
	// (then device order) among equal times.
	if !slices.IsSortedFunc(events, compareTime) {
		slices.SortStableFunc(events, compareTime)
	}
	for i := range events {
		events[i].Seq = uint64(i)
	}
	return events, nil
}

func compareTime(a, b Event) int { return cmp.Compare(a.TimeNs, b.TimeNs) }

// torchActions maps a trace entry's action to the event it becomes.
var torchActions = map[string]Event{
	"alloc":          {Op: OpAlloc, Layer: LayerFramework, Function: FuncTorchAlloc},
	"free_requested": {Op: OpFreeRequested, Layer: LayerFramework, Function: FuncTorchFreeRequested},
	"free_completed": {Op: OpFree, Layer: LayerFramework, Function: FuncTorchFree},
	"segment_alloc":  {Op: OpAlloc, Layer: LayerRuntime, Function: FuncTorchSegmentAlloc},
	"segment_free":   {Op: OpFree, Layer: LayerRuntime, Function: FuncTorchSegmentFree},
	"segment_map":    {Op: OpMap, Memory: MemoryVirtual, Layer: LayerDriver, Function: FuncTorchSegmentMap},
	"segment_unmap":  {Op: OpUnmap, Memory: MemoryVirtual, Layer: LayerDriver, Function: FuncTorchSegmentUnmap},
	"oom":            {Op: OpOOM, Layer: LayerFramework, Function: FuncTorchOOM, Result: cudaErrorMemoryAllocation},
}

// convertEntry converts one trace entry; keep is false for entries that make no event.
func (imp *snapshotImporter) convertEntry(v any) (e Event, keep bool, err error) {
	d, ok := v.(*types.Dict)
	if !ok {
		return e, false, fmt.Errorf("%s, want a dict", pyType(v))
	}
	var action string
	var haveAction bool
	var timeUs int64
	for _, kv := range *d {
		key, _ := kv.Key.(string)
		switch key {
		case "action":
			action, haveAction = kv.Value.(string)
			if !haveAction {
				return e, false, fmt.Errorf(`"action" is %s, want a str`, pyType(kv.Value))
			}
		case "addr", "device_free":
			e.Address, err = uintField(key, kv.Value)
		case "size":
			e.Size, err = uintField(key, kv.Value)
		case "stream":
			e.Stream, err = uintField(key, kv.Value)
		case "frames":
			e.Callsite, err = imp.stack(kv.Value)
		case "time_us":
			var t uint64
			t, err = uintField(key, kv.Value)
			if t > math.MaxInt64/1000 {
				err = fmt.Errorf(`"time_us" %d out of range`, t)
			}
			timeUs = int64(t)
		}
		if err != nil {
			return e, false, err
		}
	}
	if !haveAction {
		return e, false, fmt.Errorf(`no "action"`)
	}
	proto, known := torchActions[action]
	if !known {
		if action != "snapshot" {
			if imp.skipped == nil {
				imp.skipped = map[string]int{}
			}
			imp.skipped[action]++
		}
		return e, false, nil
	}
	e.Op, e.Memory, e.Layer, e.Function, e.Result = proto.Op, proto.Memory, proto.Layer, proto.Function, proto.Result
	e.TimeNs = timeUs * 1000
	return e, true, nil
}

// convertFrames reads a stack, a list of dicts with "name", "filename" and "line", into buf's
// storage.
func convertFrames(v any, buf []Frame) ([]Frame, error) {
	list, ok := asList(v)
	if !ok {
		return nil, fmt.Errorf(`"frames" is %s, want a list`, pyType(v))
	}
	frames := buf[:0]
	for _, item := range list {
		d, ok := item.(*types.Dict)
		if !ok {
			return nil, fmt.Errorf(`"frames": %s, want a dict`, pyType(item))
		}
		var f Frame
		for _, kv := range *d {
			switch key, _ := kv.Key.(string); key {
			case "name":
				f.Function, _ = kv.Value.(string)
			case "filename":
				f.File, _ = kv.Value.(string)
			case "line":
				line, err := intField("line", kv.Value)
				if err != nil {
					return nil, fmt.Errorf(`"frames": %w`, err)
				}
				f.Line = line
			}
		}
		frames = append(frames, f)
	}
	return frames, nil
}

// convertBlocks reads a segment's blocks.
func (imp *snapshotImporter) convertBlocks(list []any) ([]torchsnap.Block, error) {
	blocks := make([]torchsnap.Block, 0, len(list))
	for j, bv := range list {
		d, ok := bv.(*types.Dict)
		if !ok {
			return nil, fmt.Errorf("blocks[%d]: %s, want a dict", j, pyType(bv))
		}
		var b torchsnap.Block
		for _, kv := range *d {
			var err error
			switch key, _ := kv.Key.(string); key {
			case "address":
				b.Address, err = uintField(key, kv.Value)
			case "size":
				b.Size, err = uintField(key, kv.Value)
			case "requested_size":
				b.RequestedSize, err = uintField(key, kv.Value)
			case "state":
				b.State, _ = kv.Value.(string)
			case "frames":
				b.Callsite, err = imp.stack(kv.Value)
			}
			if err != nil {
				return nil, fmt.Errorf("blocks[%d]: %w", j, err)
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// stack returns the Event.Callsite of a "frames" value, 0 for an empty stack. Snapshots share
// the frame dicts among stacks (the pickle memo), so a stack made of frame dicts already seen
// in that order gives its id without reading its frames again; the decoded values are not
// modified while they are converted, so the same dicts mean the same frames.
func (imp *snapshotImporter) stack(v any) (uint64, error) {
	l, isList := v.(*types.List)
	if isList {
		key := imp.stackKey[:0]
		for _, item := range *l {
			d, ok := item.(*types.Dict)
			if !ok {
				isList = false // read it the long way, which reports the error
				break
			}
			key = binary.LittleEndian.AppendUint64(key, uint64(uintptr(unsafe.Pointer(d))))
		}
		imp.stackKey = key
		if isList {
			if id, ok := imp.stacks[string(key)]; ok {
				return id, nil
			}
		}
	}
	var err error
	if imp.frames, err = convertFrames(v, imp.frames); err != nil {
		return 0, err
	}
	var id uint64
	if len(imp.frames) > 0 {
		id = imp.intern(imp.frames)
	}
	if isList {
		if imp.stacks == nil {
			imp.stacks = map[string]uint64{}
		}
		imp.stacks[string(imp.stackKey)] = id
	}
	return id, nil
}

// intern keeps a stack and returns its Event.Callsite value.
func (imp *snapshotImporter) intern(frames []Frame) uint64 {
	if imp.callsites == nil {
		imp.callsites = callsites{}
	}
	return imp.callsites.intern(frames)
}

func (imp *snapshotImporter) convertSegments(v any) ([]torchsnap.Segment, error) {
	list, ok := asList(v)
	if !ok {
		return nil, fmt.Errorf("segments: %s, want a list", pyType(v))
	}
	segs := make([]torchsnap.Segment, 0, len(list))
	for i, sv := range list {
		d, ok := sv.(*types.Dict)
		if !ok {
			return nil, fmt.Errorf("segments[%d]: %s, want a dict", i, pyType(sv))
		}
		var s torchsnap.Segment
		for _, kv := range *d {
			var err error
			var dev uint64
			switch key, _ := kv.Key.(string); key {
			case "device":
				dev, err = uintField(key, kv.Value)
				s.Device = int32(min(dev, math.MaxInt32))
			case "address":
				s.Address, err = uintField(key, kv.Value)
			case "total_size":
				s.TotalSize, err = uintField(key, kv.Value)
			case "allocated_size":
				s.AllocatedSize, err = uintField(key, kv.Value)
			case "active_size":
				s.ActiveSize, err = uintField(key, kv.Value)
			case "requested_size":
				s.RequestedSize, err = uintField(key, kv.Value)
			case "stream":
				s.Stream, err = uintField(key, kv.Value)
			case "segment_type":
				s.Large = kv.Value == "large"
			case "is_expandable":
				s.Expandable = kv.Value == true
			case "blocks":
				blocks, _ := asList(kv.Value)
				s.Blocks = len(blocks)
				s.BlockList, err = imp.convertBlocks(blocks)
			}
			if err != nil {
				return nil, fmt.Errorf("segments[%d]: %w", i, err)
			}
		}
		segs = append(segs, s)
	}
	return segs, nil
}

func convertSettings(v any) (*torchsnap.Settings, error) {
	d, ok := v.(*types.Dict)
	if !ok {
		return nil, fmt.Errorf("allocator_settings: %s, want a dict", pyType(v))
	}
	s := &torchsnap.Settings{}
	for _, kv := range *d {
		var err error
		switch key, _ := kv.Key.(string); key {
		case "PYTORCH_CUDA_ALLOC_CONF":
			s.AllocConf, _ = kv.Value.(string)
		case "max_split_size":
			s.MaxSplitSize, err = intField(key, kv.Value)
		case "garbage_collection_threshold":
			s.GarbageCollectionThreshold, err = floatField(key, kv.Value)
		case "expandable_segments":
			s.ExpandableSegments = kv.Value == true
		case "release_lock_on_cudamalloc":
			s.ReleaseLockOnCudaMalloc = kv.Value == true
		case "pinned_use_cuda_host_register":
			s.PinnedUseCudaHostRegister = kv.Value == true
		case "pinned_num_register_threads":
			s.PinnedNumRegisterThreads, err = intField(key, kv.Value)
		case "roundup_power2_divisions":
			s.RoundupPower2Divisions, err = convertRoundup(kv.Value)
		}
		if err != nil {
			return nil, fmt.Errorf("allocator_settings: %w", err)
		}
	}
	return s, nil
}

// convertRoundup reads {"1": n, "2": n, "4": n, ...} into a slice indexed by log2 of the key.
func convertRoundup(v any) ([]int64, error) {
	d, ok := v.(*types.Dict)
	if !ok {
		return nil, fmt.Errorf("roundup_power2_divisions: %s, want a dict", pyType(v))
	}
	out := make([]int64, 0, d.Len())
	for _, kv := range *d {
		ks, _ := kv.Key.(string)
		k, err := strconv.ParseUint(ks, 10, 64)
		if err != nil || k == 0 || k&(k-1) != 0 {
			return nil, fmt.Errorf("roundup_power2_divisions: key %q is not a power of two", ks)
		}
		n, err := intField("roundup_power2_divisions", kv.Value)
		if err != nil {
			return nil, err
		}
		i := 0
		for k > 1 {
			k >>= 1
			i++
		}
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i] = n
	}
	return out, nil
}

func asList(v any) ([]any, bool) {
	switch l := v.(type) {
	case *types.List:
		return *l, true
	case *types.Tuple:
		return *l, true
	}
	return nil, false
}

// intField converts a Python int (or bool) to int64.
func intField(key string, v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), nil
		}
	case nil:
		return 0, nil
	}
	return 0, fmt.Errorf("%q is %s, want an int", key, pyType(v))
}

// uintField converts a Python int to uint64; negative values are taken as their 64-bit
// two's complement (PyTorch stores some pointers and streams as signed int64).
func uintField(key string, v any) (uint64, error) {
	if b, ok := v.(*big.Int); ok && b.Sign() > 0 && b.IsUint64() {
		return b.Uint64(), nil
	}
	i, err := intField(key, v)
	return uint64(i), err
}

func floatField(key string, v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int:
		return float64(x), nil
	}
	return 0, fmt.Errorf("%q is %s, want a float", key, pyType(v))
}

// pyType names the Python type of a decoded pickle value, for error messages.
func pyType(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case *types.Dict:
		return "a dict"
	case *types.List:
		return "a list"
	case *types.Tuple:
		return "a tuple"
	case string:
		return "a str"
	case int, *big.Int:
		return "an int"
	case float64:
		return "a float"
	case bool:
		return "a bool"
	}
	return fmt.Sprintf("a %T", v)
}
