package trace

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// FormatVersion is the version of the Arrow trace layout this package writes and reads.
const FormatVersion = 1

// Sources of a trace, the values of Info.Source.
const (
	SourceAllocscope      = "allocscope"       // recorded by allocscope's shim
	SourcePyTorchSnapshot = "pytorch-snapshot" // imported from torch.cuda.memory._snapshot()
	SourceRMMCSV          = "rmm-csv"          // imported from an RMM logging_resource_adaptor CSV
)

// Info is the metadata of a trace, stored in the Arrow schema's metadata.
type Info struct {
	FormatVersion   int           // layout version of the file; 0 for imported traces
	Source          string        // SourceAllocscope, SourcePyTorchSnapshot or SourceRMMCSV
	Command         []string      // command line of the recorded program
	Host            string        // host name
	StartTime       time.Time     // wall-clock start of the recording (zero when unknown)
	RecorderVersion string        // allocscope version that wrote the file
	DriverVersion   string        // CUDA driver version, when known
	GPUNames        []string      // GPU names by ordinal, when known
	LostEvents      int64         // calls the recorder saw but could not write (the trace lacks them)
	Pool            *PoolActivity // what record --pool's pool did; nil for a recording without it
	Modules         []Module      // the recorded processes' executable mappings, for naming callsites
	// IPCExportSizes are the sizes of the device allocations the program exported by IPC
	// (cudaIpcGetMemHandle), distinct, ascending; analyze sends such requests to CUDA under
	// record --pool (pool.Config.PassThroughSizes). Nil when none, or the recorder did not tell.
	IPCExportSizes []uint64
	// Framework is what record captured of the frameworks' own allocators (PyTorch's memory
	// history, CuPy's memory hook), one entry per process and framework, by pid then framework;
	// nil when nothing was captured (record --no-framework, no framework imported, or an older
	// recorder).
	Framework []FrameworkCapture
}

// Frameworks whose allocator requests record captures, the values of FrameworkCapture.Framework.
const (
	FrameworkTorch = "torch" // PyTorch's CUDA caching allocator: torch.cuda.memory._snapshot()'s history
	FrameworkCupy  = "cupy"  // CuPy's memory pool: a cupy.cuda.memory_hook.MemoryHook
)

// FrameworkCapture is what record captured of one framework in one process: the events of the
// trace's framework layer with that pid and the framework's functions (torch.*, cupy.*).
type FrameworkCapture struct {
	PID       uint32 `json:"pid"`
	Framework string `json:"framework"` // FrameworkTorch or FrameworkCupy
	Events    int64  `json:"events"`    // events written to the trace
	// Entries is the number of history entries the framework kept (PyTorch: the snapshot's
	// device_traces entries, markers and segment entries included; CuPy: the log's lines).
	Entries int64 `json:"entries"`
	// MaxEntries is PyTorch's bound on each device's history (_record_memory_history's
	// max_entries); 0 for CuPy, whose log has no bound.
	MaxEntries int64 `json:"max_entries,omitempty"`
	// Full reports that a device's history held MaxEntries entries: PyTorch then dropped its
	// oldest entries, how many it does not tell; the trace lacks them.
	Full bool `json:"full,omitempty"`
	// Dropped counts entries known to be lost: CuPy lines that could not be written or read.
	Dropped int64 `json:"dropped,omitempty"`
	// OOM is PyTorch's segments at the process's first out-of-memory error, rebuilt from its
	// history up to that error (TorchSegmentsAtOOM); nil without one, or when the history could
	// not rebuild them (it was Full, or named segments or blocks it did not hold).
	OOM *TorchOOM `json:"oom,omitempty"`
}

// PoolActivity is what the pool of `record --pool` did inside the recorded program, summed over
// its processes and devices. The calls it served are the events with Event.Pool set.
type PoolActivity struct {
	Syncs             int64  `json:"syncs"`               // device synchronizations the pool made itself
	SyncNs            int64  `json:"sync_ns"`             // time inside them, ns
	Reservations      int64  `json:"reservations"`        // regions reserved from CUDA: the plan and every growth
	Fallbacks         int64  `json:"fallbacks"`           // requests that made the pool grow
	PassedThrough     int64  `json:"passed_through"`      // requests of the kinds it serves that went to CUDA
	Events            int64  `json:"events"`              // CUDA events recorded at stream-ordered frees
	StreamWaits       int64  `json:"stream_waits"`        // streams made to wait for another stream's free
	HostWaits         int64  `json:"host_waits"`          // host waits for another stream's free
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"` // the most bytes one pool held reserved
	IPCExports        int64  `json:"ipc_exports"`         // pool blocks exported with cudaIpcGetMemHandle
	// Barriers is how many of Syncs were barriers on the legacy stream instead of device
	// synchronizations: the host did not wait. Once the program made non-blocking streams, such a
	// barrier is a join: the legacy stream first waits for an event on each of them, and each of
	// them then waits for the barrier.
	Barriers int64 `json:"barriers,omitempty"`
	// StreamsApart counts the non-blocking streams the program made; with them, an ordering is a
	// join barrier, or a device synchronization where a join cannot be made (docs/record-pool.md).
	StreamsApart int64 `json:"streams_apart,omitempty"`
	// PassedBy splits PassedThrough by why each request went to CUDA, by PassReasons' names; a
	// reason with none is left out (nil: none passed, or a recorder that did not tell).
	PassedBy map[string]int64 `json:"passed_by,omitempty"`
	// PoolsNotMade counts the pools (one per process and device) that could not be made: their
	// requests went to CUDA (PassedBy["no_pool"]).
	PoolsNotMade int64 `json:"pools_not_made,omitempty"`
	// FirstNotMadeError is the CUDA error of the first failed reservation of a pool's plan (0: none
	// known, e.g. the driver lacked functions the pool needs).
	FirstNotMadeError int64 `json:"first_not_made_error,omitempty"`
	// PeakReservedSumBytes is the sum over every process and device of its pool's peak reserved
	// bytes: an upper bound of the peak of all pools' reserved bytes together (the pools need not
	// peak at once). PeakReservedBytes is the largest single pool's peak.
	PeakReservedSumBytes uint64 `json:"peak_reserved_sum_bytes,omitempty"`
	// CapturedFrees counts pool blocks freed on a capturing stream: kept allocated, since the graph
	// may use them at every launch.
	CapturedFrees int64 `json:"captured_frees,omitempty"`
	// LateFreesKept counts a signal handler's frees of pool blocks that could not be queued while
	// its thread was inside the pool: those blocks stay allocated.
	LateFreesKept int64 `json:"late_frees_kept,omitempty"`
	// Retired counts pools given up with their contexts (a device reset, a destroyed context).
	Retired int64 `json:"retired,omitempty"`
	// IdleReleases counts the regions the pool gave back to CUDA because nothing in them was in use,
	// when a growth or a call that went to CUDA found the device out of memory; IdleReleasedBytes
	// are their bytes.
	IdleReleases      int64  `json:"idle_releases,omitempty"`
	IdleReleasedBytes uint64 `json:"idle_released_bytes,omitempty"`
}

// PeakReservedTotal is the pools' peak reserved bytes summed over processes and devices
// (PeakReservedSumBytes), or PeakReservedBytes for a recorder that did not keep the sum.
func (p *PoolActivity) PeakReservedTotal() uint64 {
	return max(p.PeakReservedSumBytes, p.PeakReservedBytes)
}

// PassReasons names the reasons a request of the kinds record --pool serves went to CUDA, the keys
// of PoolActivity.PassedBy: the pool could not be made, the thread had no context, a graph was
// being captured, a signal handler's call inside the pool, the pool was full and could not grow, its
// context was reset or destroyed, pool.json excluded the request, anything else.
var PassReasons = []string{"no_pool", "no_context", "capture", "signal", "full", "retired", "excluded", "other"}

// Schema metadata keys. Every key is written; optional values are written as "" (or "[]").
const (
	metaFormatVersion   = "allocscope.format_version"
	metaSource          = "allocscope.source"
	metaCommand         = "allocscope.command"
	metaHost            = "allocscope.host"
	metaStartTime       = "allocscope.start_time"
	metaRecorderVersion = "allocscope.recorder_version"
	metaDriverVersion   = "allocscope.driver_version"
	metaGPUNames        = "allocscope.gpu_names"
	metaLostEvents      = "allocscope.lost_events"
	metaPool            = "allocscope.pool"
	metaModules         = "allocscope.modules"
	metaIPCExports      = "allocscope.ipc_export_sizes"
	metaFramework       = "allocscope.framework"
)

// metadata encodes info as Arrow schema metadata. The format version written is always
// FormatVersion, whatever info.FormatVersion says.
func (info Info) metadata() arrow.Metadata {
	start := ""
	if !info.StartTime.IsZero() {
		start = info.StartTime.Format(time.RFC3339Nano)
	}
	source := info.Source
	if source == "" {
		source = SourceAllocscope
	}
	keys := []string{metaFormatVersion, metaSource, metaCommand, metaHost, metaStartTime,
		metaRecorderVersion, metaDriverVersion, metaGPUNames, metaLostEvents, metaPool, metaModules, metaIPCExports, metaFramework}
	values := []string{strconv.Itoa(FormatVersion), source, jsonStrings(info.Command), info.Host, start,
		info.RecorderVersion, info.DriverVersion, jsonStrings(info.GPUNames), strconv.FormatInt(info.LostEvents, 10),
		poolJSON(info.Pool), modulesJSON(info.Modules), sizesJSON(info.IPCExportSizes), frameworkJSON(info.Framework)}
	return arrow.NewMetadata(keys, values)
}

func poolJSON(p *PoolActivity) string {
	if p == nil {
		return ""
	}
	b, _ := json.Marshal(p) // a struct of numbers always marshals
	return string(b)
}

func sizesJSON(sizes []uint64) string {
	if len(sizes) == 0 {
		return ""
	}
	b, _ := json.Marshal(sizes) // numbers always marshal
	return string(b)
}

// metaSizes decodes a JSON array of byte counts above 0; "" or a missing key is none.
func metaSizes(md arrow.Metadata, key string) ([]uint64, error) {
	v, _ := metaValue(md, key)
	if v == "" {
		return nil, nil
	}
	var sizes []uint64
	if err := json.Unmarshal([]byte(v), &sizes); err != nil || slices.Contains(sizes, 0) {
		return nil, fmt.Errorf("schema metadata %q: not a JSON array of byte counts: %q", key, v)
	}
	if len(sizes) == 0 {
		return nil, nil
	}
	return sizes, nil
}

func frameworkJSON(f []FrameworkCapture) string {
	if len(f) == 0 {
		return ""
	}
	b, _ := json.Marshal(f) // numbers, strings and booleans always marshal
	return string(b)
}

// metaFrameworkOf decodes and checks the framework captures; "" or a missing key is none.
func metaFrameworkOf(md arrow.Metadata) ([]FrameworkCapture, error) {
	v, _ := metaValue(md, metaFramework)
	if v == "" {
		return nil, nil
	}
	var f []FrameworkCapture
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("schema metadata %q: %w", metaFramework, err)
	}
	for i, c := range f {
		if c.Framework != FrameworkTorch && c.Framework != FrameworkCupy {
			return nil, fmt.Errorf("schema metadata %q: entry %d: unknown framework %q", metaFramework, i, c.Framework)
		}
		if c.Events < 0 || c.Entries < 0 || c.MaxEntries < 0 || c.Dropped < 0 {
			return nil, fmt.Errorf("schema metadata %q: entry %d: negative count", metaFramework, i)
		}
		if c.Full && c.MaxEntries == 0 {
			return nil, fmt.Errorf("schema metadata %q: entry %d: full without max_entries", metaFramework, i)
		}
	}
	if len(f) == 0 {
		return nil, nil
	}
	return f, nil
}

func modulesJSON(m []Module) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // numbers and strings always marshal
	return string(b)
}

// metaModules decodes the modules; "" or a missing key is none.
func metaModulesOf(md arrow.Metadata) ([]Module, error) {
	v, _ := metaValue(md, metaModules)
	if v == "" {
		return nil, nil
	}
	var m []Module
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, fmt.Errorf("schema metadata %q: %w", metaModules, err)
	}
	return m, nil
}

// metaPoolActivity decodes the pool activity; "" or a missing key is nil.
func metaPoolActivity(md arrow.Metadata) (*PoolActivity, error) {
	v, _ := metaValue(md, metaPool)
	if v == "" {
		return nil, nil
	}
	var p PoolActivity
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("schema metadata %q: %w", metaPool, err)
	}
	if p.Syncs < 0 || p.SyncNs < 0 || p.Reservations < 0 || p.Fallbacks < 0 || p.PassedThrough < 0 ||
		p.Events < 0 || p.StreamWaits < 0 || p.HostWaits < 0 || p.IPCExports < 0 || p.CapturedFrees < 0 ||
		p.LateFreesKept < 0 || p.Retired < 0 || p.Barriers < 0 || p.Barriers > p.Syncs ||
		p.StreamsApart < 0 || p.IdleReleases < 0 || p.PoolsNotMade < 0 || p.FirstNotMadeError < 0 {
		return nil, fmt.Errorf("schema metadata %q: negative count, or more barriers than syncs, in %s", metaPool, v)
	}
	for reason, n := range p.PassedBy {
		if !slices.Contains(PassReasons, reason) || n < 0 {
			return nil, fmt.Errorf("schema metadata %q: passed_by: %q %d is not a reason and count", metaPool, reason, n)
		}
	}
	return &p, nil
}

func jsonStrings(s []string) string {
	if s == nil {
		s = []string{}
	}
	b, _ := json.Marshal(s) // a []string always marshals
	return string(b)
}

// infoFromMetadata decodes and validates the schema metadata of an allocscope trace.
func infoFromMetadata(md arrow.Metadata) (Info, error) {
	var info Info
	v, ok := metaValue(md, metaFormatVersion)
	if !ok {
		return info, fmt.Errorf("not an allocscope trace: schema metadata has no %q", metaFormatVersion)
	}
	version, err := strconv.Atoi(v)
	if err != nil {
		return info, fmt.Errorf("schema metadata %q: bad value %q", metaFormatVersion, v)
	}
	if version != FormatVersion {
		return info, fmt.Errorf("format version %d is not supported (this build reads version %d)", version, FormatVersion)
	}
	info.FormatVersion = version
	info.Source, _ = metaValue(md, metaSource)
	info.Host, _ = metaValue(md, metaHost)
	info.RecorderVersion, _ = metaValue(md, metaRecorderVersion)
	info.DriverVersion, _ = metaValue(md, metaDriverVersion)
	if info.Command, err = metaStrings(md, metaCommand); err != nil {
		return info, err
	}
	if info.GPUNames, err = metaStrings(md, metaGPUNames); err != nil {
		return info, err
	}
	if s, _ := metaValue(md, metaLostEvents); s != "" {
		if info.LostEvents, err = strconv.ParseInt(s, 10, 64); err != nil || info.LostEvents < 0 {
			return info, fmt.Errorf("schema metadata %q: bad count %q", metaLostEvents, s)
		}
	}
	if info.Pool, err = metaPoolActivity(md); err != nil {
		return info, err
	}
	if info.Modules, err = metaModulesOf(md); err != nil {
		return info, err
	}
	if info.IPCExportSizes, err = metaSizes(md, metaIPCExports); err != nil {
		return info, err
	}
	if info.Framework, err = metaFrameworkOf(md); err != nil {
		return info, err
	}
	if s, _ := metaValue(md, metaStartTime); s != "" {
		if info.StartTime, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return info, fmt.Errorf("schema metadata %q: bad time %q", metaStartTime, s)
		}
	}
	return info, nil
}

func metaValue(md arrow.Metadata, key string) (string, bool) {
	i := md.FindKey(key)
	if i < 0 {
		return "", false
	}
	return md.Values()[i], true
}

func metaStrings(md arrow.Metadata, key string) ([]string, error) {
	v, ok := metaValue(md, key)
	if !ok || v == "" {
		return nil, nil
	}
	var s []string
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, fmt.Errorf("schema metadata %q: not a JSON array of strings: %q", key, v)
	}
	if len(s) == 0 {
		return nil, nil
	}
	return s, nil
}
