package trace

import (
	"bytes"
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
	FormatVersion   int       // layout version of the file; 0 for imported traces
	Source          string    // SourceAllocscope, SourcePyTorchSnapshot or SourceRMMCSV
	Command         []string  // command line of the recorded program
	Host            string    // host name
	StartTime       time.Time // wall-clock start of the recording (zero when unknown)
	RecorderVersion string    // allocscope version that wrote the file
	DriverVersion   string    // CUDA driver version, when known
	GPUNames        []string  // GPU names by ordinal, when known
	LostEvents      int64     // calls the recorder saw but could not write (the trace lacks them)
	Modules         []Module  // the recorded processes' executable mappings, for naming callsites
	// Pool is what the pool of allocscope's `record --pool` did inside the recorded program: a
	// JSON object of the recorder's own counters, kept as written. Its fields follow the recorder
	// and are no part of this package's promise; nil for a recording without the pool.
	Pool json.RawMessage
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
	// OOM is PyTorch's caching allocator at the process's first out-of-memory error, rebuilt by
	// the recorder from the history up to that error: a JSON object of allocscope's own, kept as
	// written, no part of this package's promise (analyze explains the error from it); nil without
	// one, or when the history could not rebuild it (it was Full, or named segments or blocks it
	// did not hold).
	OOM json.RawMessage `json:"oom,omitempty"`
}

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
		objectJSON(info.Pool), modulesJSON(info.Modules), sizesJSON(info.IPCExportSizes), frameworkJSON(info.Framework)}
	return arrow.NewMetadata(keys, values)
}

// objectJSON is raw compacted, "" for nil; raw must be a JSON object (checkObject).
func objectJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil { // NewWriter checked it
		return ""
	}
	return b.String()
}

// checkObject reports an error unless raw is empty or a JSON object.
func checkObject(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	if !json.Valid(raw) || bytes.TrimLeft(raw, " \t\r\n")[0] != '{' {
		return fmt.Errorf("not a JSON object: %.40q", raw)
	}
	return nil
}

// check reports the first field of info that cannot be written: an opaque value that is not a
// JSON object.
func (info Info) check() error {
	if err := checkObject(info.Pool); err != nil {
		return fmt.Errorf("pool activity: %w", err)
	}
	for i, c := range info.Framework {
		if err := checkObject(c.OOM); err != nil {
			return fmt.Errorf("framework capture %d: oom: %w", i, err)
		}
	}
	return nil
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
	b, _ := json.Marshal(f) // numbers, strings, booleans and checked objects (Info.check) always marshal
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
		if string(c.OOM) == "null" {
			f[i].OOM = nil
		} else if err := checkObject(c.OOM); err != nil {
			return nil, fmt.Errorf("schema metadata %q: entry %d: oom: %w", metaFramework, i, err)
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

// metaObject reads the JSON object of key, kept as written; "" or a missing key is nil.
func metaObject(md arrow.Metadata, key string) (json.RawMessage, error) {
	v, _ := metaValue(md, key)
	if v == "" {
		return nil, nil
	}
	if err := checkObject(json.RawMessage(v)); err != nil {
		return nil, fmt.Errorf("schema metadata %q: %w", key, err)
	}
	return json.RawMessage(v), nil
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
	if info.Pool, err = metaObject(md, metaPool); err != nil {
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
