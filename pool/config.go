package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
)

// This file's types are the pool.json contract between analyze (which writes it) and replay (which
// reads it). docs/pool-json.md describes the file with an example.

// Policy names an allocator policy.
type Policy string

// The policies this package implements.
const (
	PolicySizeClass     Policy = "sizeclass"      // recommended: size classes with per-class slots + best-fit arena for large blocks
	PolicyBestFit       Policy = "bestfit"        // one best-fit coalescing arena, like RMM's pool_memory_resource
	PolicyPyTorch       Policy = "pytorch"        // model of PyTorch's CUDA caching allocator
	PolicyStreamOrdered Policy = "stream-ordered" // model of cudaMallocAsync's pool with a release threshold
	PolicyRaw           Policy = "raw"            // every request goes straight to the Upstream (cudaMalloc/cudaFree)
)

// policies lists every policy, for Validate.
var policies = []Policy{PolicySizeClass, PolicyBestFit, PolicyPyTorch, PolicyStreamOrdered, PolicyRaw}

// ConfigVersion is the pool.json version this package reads and writes.
const ConfigVersion = 1

// DefaultAlignment is the block alignment when Config.Alignment is 0: 512 bytes, the rounding
// of PyTorch's allocator and a multiple of cudaMalloc's 256-byte alignment.
const DefaultAlignment = 512

// AlignUp rounds n up to a multiple of align, which must be above 0: AlignUp(1000,
// DefaultAlignment) is 1024. A power of two (an alignment, a page) costs a mask, any other align a
// division. Like n + align - 1, the result wraps past the largest uint64.
func AlignUp(n, align uint64) uint64 {
	if align&(align-1) == 0 {
		return (n + align - 1) &^ (align - 1)
	}
	return (n + align - 1) / align * align
}

// DefaultGrowBytes is the size a class grows by when SizeClassConfig.GrowSlots is 0 (the class
// grows by as many slots as fit in it, at least one): 2 MiB, cudaMalloc's granularity.
const DefaultGrowBytes = 2 << 20

// Config is the content of pool.json: a policy and its parameters, plus the analyzer's predictions.
// Sections for policies other than Policy may be present (they are validated, and ignored by New):
// replay reads StreamOrdered's threshold for its cudaMallocAsync mode whatever the policy.
type Config struct {
	// Version is the file format version; must be ConfigVersion.
	Version int `json:"version"`
	// Policy is the allocator policy New builds.
	Policy Policy `json:"policy"`
	// Alignment is the block alignment in bytes, a power of two (0 = DefaultAlignment). Block
	// sizes are multiples of it, and so are size class sizes. PolicyPyTorch ignores it (512 B).
	Alignment uint64 `json:"alignment_bytes"`
	// SizeClass parameterises PolicySizeClass; required for it.
	SizeClass *SizeClassConfig `json:"size_class,omitempty"`
	// BestFit parameterises PolicyBestFit, and the growth of PolicySizeClass's large-block arena.
	BestFit *BestFitConfig `json:"best_fit,omitempty"`
	// PyTorch parameterises PolicyPyTorch (defaults: PyTorch's defaults).
	PyTorch *PyTorchConfig `json:"pytorch,omitempty"`
	// StreamOrdered parameterises PolicyStreamOrdered (default: release threshold 0).
	StreamOrdered *StreamOrderedConfig `json:"stream_ordered,omitempty"`
	// PassThroughSizes are request sizes that record --pool sends to CUDA instead of serving them:
	// the sizes of the device allocations the program exported by IPC (cudaIpcGetMemHandle) in
	// the recording the config came from, since another process that opens a handle of a pool
	// block would map the pool's region. At most MaxPassThroughSizes, each above 0, none twice.
	// New ignores them: the pool itself serves every request (replay too).
	PassThroughSizes []uint64 `json:"pass_through_sizes,omitempty"`
	// Prediction is what analyze predicted for this config on its trace (not read by New).
	Prediction *Prediction `json:"prediction,omitempty"`
	// Equivalents are the nearest settings of other allocators (not read by New).
	Equivalents *Equivalents `json:"equivalents,omitempty"`
}

// Class is one size class: blocks of Size bytes, Slots of them reserved up front.
type Class struct {
	// Size is the block size in bytes: a multiple of the alignment, above the previous class's.
	Size uint64 `json:"size_bytes"`
	// Slots is the number of blocks reserved at New (the most simultaneously live blocks
	// expected); 0 reserves none until the class is first used.
	Slots uint64 `json:"slots"`
}

// SizeClassConfig parameterises PolicySizeClass.
type SizeClassConfig struct {
	// Classes are the size classes, strictly ascending by Size. A request goes to the smallest
	// class at least as large, unless it is above LargeThreshold or above every class.
	Classes []Class `json:"classes"`
	// LargeThreshold sends requests above it to the arena (0 = the largest class's size).
	LargeThreshold uint64 `json:"large_threshold_bytes"`
	// ArenaBytes is the initial size of the best-fit arena for large blocks (rounded up to the
	// alignment); growth beyond it counts a Fallback per region added.
	ArenaBytes uint64 `json:"arena_bytes"`
	// PerStream keeps freed blocks on per-stream free lists: a block freed on stream S is reused
	// only by requests on S (never-used slots and arena space are shared).
	PerStream bool `json:"per_stream"`
	// GrowSlots is how many slots a class grows by when all its slots are taken (one Fallback
	// per growth); 0 = as many as fit in DefaultGrowBytes, at least 1.
	GrowSlots uint64 `json:"grow_slots,omitempty"`
	// ArenaFit is the large-block arena's placement strategy (empty = FitBest).
	ArenaFit Fit `json:"arena_fit,omitempty"`
	// ArenaPaging, when set, makes the arena ArenaBytes of address space whose pages are mapped
	// on demand instead of one region of memory (see ArenaPaging); needs a Mapper Upstream.
	ArenaPaging *ArenaPaging `json:"arena_paging,omitempty"`
}

// BestFitConfig parameterises PolicyBestFit (and the large-block arena).
type BestFitConfig struct {
	// InitialBytes is the first region taken from the Upstream at New (0 = none until needed).
	// For PolicySizeClass it must be 0 or equal ArenaBytes.
	InitialBytes uint64 `json:"initial_bytes"`
	// MaximumBytes caps the bytes the arena holds (0 = unbounded); at least InitialBytes.
	MaximumBytes uint64 `json:"maximum_bytes"`
	// GrowBytes is the minimum size of each further region (0 = the request).
	GrowBytes uint64 `json:"grow_bytes"`
	// Fit is PolicyBestFit's placement strategy (empty = FitBest).
	Fit Fit `json:"fit,omitempty"`
}

// PyTorchConfig parameterises PolicyPyTorch with the knobs of PYTORCH_CUDA_ALLOC_CONF.
type PyTorchConfig struct {
	// MaxSplitSizeMB is max_split_size_mb: blocks this large (MiB) or larger are never split and
	// serve only requests of at least this size (0 = unlimited; otherwise at least 20).
	MaxSplitSizeMB uint64 `json:"max_split_size_mb"`
	// RoundupPower2Divisions is roundup_power2_divisions: requests are rounded up to one of this
	// many steps between powers of two (0 or 1 = off; otherwise a power of two).
	RoundupPower2Divisions uint64 `json:"roundup_power2_divisions"`
	// RoundupPower2Ranges is roundup_power2_divisions's per-size-range form, [256:1,512:2,>:8]
	// (see RoundupRange), in place of RoundupPower2Divisions.
	RoundupPower2Ranges []RoundupRange `json:"roundup_power2_ranges,omitempty"`
	// GarbageCollectionThreshold is garbage_collection_threshold (0 = off, else in (0, 1)): when a
	// segment is needed while more than this share of CapacityBytes is reserved, the cached
	// segments unused the longest are released first. It acts only with a capacity, as PyTorch's
	// only with a per-process memory fraction.
	GarbageCollectionThreshold float64 `json:"garbage_collection_threshold,omitempty"`
	// ExpandableSegments is expandable_segments:True: one growing segment per stream and pool,
	// mapped in 2 MiB (small) / 20 MiB (large) pages; needs an Upstream that is a Mapper.
	ExpandableSegments bool `json:"expandable_segments"`
	// CapacityBytes is the device capacity: a segment that would take reserved memory above it
	// fails like cudaMalloc on a full device, triggering PyTorch's free-cached-and-retry (0 = unbounded).
	CapacityBytes uint64 `json:"capacity_bytes"`
}

// StreamOrderedConfig parameterises PolicyStreamOrdered.
type StreamOrderedConfig struct {
	// ReleaseThresholdBytes is cudaMemPoolAttrReleaseThreshold: the memory the pool keeps at a
	// synchronization point; unused memory above it goes back to the Upstream.
	ReleaseThresholdBytes uint64 `json:"release_threshold_bytes"`
}

// Prediction is what analyze predicted for the config on the trace it was derived from; replay
// prints it next to what it measured.
type Prediction struct {
	Trace                string `json:"trace"`                   // the trace file the config was derived from
	Events               uint64 `json:"events"`                  // allocation and free events simulated
	PeakLiveBytes        uint64 `json:"peak_live_bytes"`         // peak of requested bytes live
	PeakReservedBytes    uint64 `json:"peak_reserved_bytes"`     // peak of bytes held from the Upstream
	UpstreamCalls        uint64 `json:"upstream_calls"`          // Upstream calls (Stats.UpstreamCalls)
	Fallbacks            uint64 `json:"fallbacks"`               // Stats.Fallbacks
	Failures             uint64 `json:"failures"`                // Stats.Failures
	AllocatorTimeSavedNs int64  `json:"allocator_time_saved_ns"` // measured time of the replaced calls minus the pool's
	// RecordPool is what the same requests do to the pool inside the program under `record --pool`,
	// where a synchronous free is deferred (Deferrer); nil when record --pool cannot serve the config.
	RecordPool *DeferredPrediction `json:"record_pool,omitempty"`
}

// DeferredPrediction is a simulation of the pool with synchronous frees deferred until the pool
// synchronizes the device (Deferrer): the figures `record --pool` reports in the trace.
type DeferredPrediction struct {
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"` // Stats.PeakReservedBytes
	Fallbacks         uint64 `json:"fallbacks"`           // Stats.Fallbacks
	Syncs             uint64 `json:"syncs"`               // Stats.Syncs: synchronizations the pool makes itself
}

// Equivalents are the nearest settings of other allocators a user can paste.
type Equivalents struct {
	PyTorchAllocConf            string `json:"pytorch_cuda_alloc_conf"`              // a PYTORCH_CUDA_ALLOC_CONF value
	RMMInitialPoolBytes         uint64 `json:"rmm_initial_pool_bytes"`               // rmm pool_memory_resource initial size
	RMMMaximumPoolBytes         uint64 `json:"rmm_maximum_pool_bytes"`               // rmm pool_memory_resource maximum size
	CudaMemPoolReleaseThreshold uint64 `json:"cuda_mempool_release_threshold_bytes"` // cudaMemPoolAttrReleaseThreshold
}

// alignment returns the block alignment in force.
// PlanBytes returns what a size-class pool of c reserves when it is made: its classes' slots and
// its arena (0 for the other policies).
func (c Config) PlanBytes() uint64 {
	if c.SizeClass == nil {
		return 0
	}
	n := c.SizeClass.ArenaBytes
	for _, cl := range c.SizeClass.Classes {
		n += cl.Size * cl.Slots
	}
	return n
}

func (c Config) alignment() uint64 {
	if c.Alignment == 0 {
		return DefaultAlignment
	}
	return c.Alignment
}

// Validate checks the config. Its error names the offending field by its JSON path, e.g.
// `size_class.classes[2].size_bytes: 1000 is not a multiple of alignment_bytes 512`.
func (c Config) Validate() error {
	if c.Version != ConfigVersion {
		return fmt.Errorf("version: %d is not supported (this build reads version %d)", c.Version, ConfigVersion)
	}
	if !slices.Contains(policies, c.Policy) {
		return fmt.Errorf("policy: %q is not one of %q", c.Policy, policies)
	}
	if c.Alignment != 0 && bits.OnesCount64(c.Alignment) != 1 {
		return fmt.Errorf("alignment_bytes: %d is not a power of two", c.Alignment)
	}
	if c.Alignment != 0 && c.Alignment < MinAlignment {
		return fmt.Errorf("alignment_bytes: %d is below %d, cudaMalloc's alignment", c.Alignment, MinAlignment)
	}
	if c.Policy == PolicySizeClass && c.SizeClass == nil {
		return errors.New("size_class: required for policy \"sizeclass\"")
	}
	if err := validPassThrough(c.PassThroughSizes); err != nil {
		return err
	}
	if c.SizeClass != nil {
		if err := c.SizeClass.validate(c.alignment(), c.BestFit); err != nil {
			return fmt.Errorf("size_class.%w", err)
		}
	}
	if c.BestFit != nil {
		if err := c.BestFit.validate(); err != nil {
			return fmt.Errorf("best_fit.%w", err)
		}
	}
	if c.PyTorch != nil {
		if err := c.PyTorch.validate(); err != nil {
			return fmt.Errorf("pytorch.%w", err)
		}
	}
	return nil
}

// MaxPassThroughSizes bounds Config.PassThroughSizes (EXPORT_SIZES of the shim's internal/intercept/shim/log.h).
const MaxPassThroughSizes = 16

// validPassThrough checks Config.PassThroughSizes.
func validPassThrough(sizes []uint64) error {
	if len(sizes) > MaxPassThroughSizes {
		return fmt.Errorf("pass_through_sizes: %d sizes, at most %d", len(sizes), MaxPassThroughSizes)
	}
	for i, n := range sizes {
		if n == 0 {
			return fmt.Errorf("pass_through_sizes[%d]: 0 is not a request size", i)
		}
		if slices.Contains(sizes[:i], n) {
			return fmt.Errorf("pass_through_sizes[%d]: %d is there twice", i, n)
		}
	}
	return nil
}

// MinAlignment is the smallest Config.Alignment accepted: cudaMalloc's alignment, 256 bytes.
const MinAlignment = 256

// MaxSlots bounds the slots of all classes together (and SizeClassConfig.GrowSlots), so that the
// host bookkeeping of record --pool's C pool stays under MaxBookkeepingBytes: its tables take up to
// 56 bytes per slot, doubled by their power-of-two capacities and by a quarter of slack
// (cp_book_bytes in internal/intercept/cpool/pool.c), about 140 bytes per slot. 2^27 slots once passed and
// touched 14 GB of host memory. The shim's spec parser is to refuse more slots than this too.
const MaxSlots = 1 << 22

// MaxBookkeepingBytes is the host memory the C pool's bookkeeping of a valid plan stays under.
const MaxBookkeepingBytes = 1 << 30

func (s *SizeClassConfig) validate(align uint64, bf *BestFitConfig) error {
	var prev, slots uint64
	planned := s.ArenaBytes
	for i, cl := range s.Classes {
		slots += cl.Slots
		if slots > MaxSlots {
			return fmt.Errorf("classes[%d].slots: %d slots in all exceed the limit of %d (the pool's bookkeeping must stay under 1 GiB of host memory)", i, slots, MaxSlots)
		}
		switch {
		case cl.Size == 0:
			return fmt.Errorf("classes[%d].size_bytes: must be above 0", i)
		case cl.Size%align != 0:
			return fmt.Errorf("classes[%d].size_bytes: %d is not a multiple of alignment_bytes %d", i, cl.Size, align)
		case cl.Size <= prev:
			return fmt.Errorf("classes[%d].size_bytes: %d is not above the previous class's %d (classes must be strictly ascending)", i, cl.Size, prev)
		case cl.Slots > 0 && cl.Size > math.MaxUint64/cl.Slots:
			return fmt.Errorf("classes[%d].slots: %d slots of %d bytes overflow", i, cl.Slots, cl.Size)
		case s.GrowSlots > 0 && cl.Size > math.MaxUint64/s.GrowSlots/2:
			return fmt.Errorf("grow_slots: %d slots of %d bytes overflow", s.GrowSlots, cl.Size)
		}
		prev = cl.Size
		if planned += cl.Size * cl.Slots; planned < cl.Size*cl.Slots || planned > math.MaxUint64/2 {
			return fmt.Errorf("classes[%d].slots: the planned bytes overflow", i)
		}
	}
	if err := s.ArenaFit.validate(); err != nil {
		return fmt.Errorf("arena_fit: %w", err)
	}
	if s.ArenaPaging != nil {
		if err := s.ArenaPaging.validate(align, s.ArenaBytes); err != nil {
			return fmt.Errorf("arena_paging.%w", err)
		}
		planned -= s.ArenaBytes
	}
	if s.ArenaBytes > math.MaxUint64/2 {
		return fmt.Errorf("arena_bytes: %d is too large", s.ArenaBytes)
	}
	if s.GrowSlots > MaxSlots {
		return fmt.Errorf("grow_slots: %d exceeds the limit of %d", s.GrowSlots, MaxSlots)
	}
	if bf != nil && bf.InitialBytes != 0 && bf.InitialBytes != s.ArenaBytes {
		return fmt.Errorf("arena_bytes: %d differs from best_fit.initial_bytes %d (set the arena's size here and leave initial_bytes 0)", s.ArenaBytes, bf.InitialBytes)
	}
	return nil
}

func (b *BestFitConfig) validate() error {
	if b.MaximumBytes != 0 && b.MaximumBytes < b.InitialBytes {
		return fmt.Errorf("maximum_bytes: %d is below initial_bytes %d", b.MaximumBytes, b.InitialBytes)
	}
	if b.InitialBytes > math.MaxUint64/2 || b.GrowBytes > math.MaxUint64/2 {
		return errors.New("initial_bytes: too large")
	}
	if err := b.Fit.validate(); err != nil {
		return fmt.Errorf("fit: %w", err)
	}
	return nil
}

func (p *PyTorchConfig) validate() error {
	if p.MaxSplitSizeMB != 0 && p.MaxSplitSizeMB < torchLargeBuffer>>20 {
		return fmt.Errorf("max_split_size_mb: %d is below PyTorch's minimum of %d", p.MaxSplitSizeMB, torchLargeBuffer>>20)
	}
	if p.MaxSplitSizeMB > math.MaxUint64>>21 {
		return fmt.Errorf("max_split_size_mb: %d is too large", p.MaxSplitSizeMB)
	}
	if d := p.RoundupPower2Divisions; d > 1 && !validDivisions(d) {
		return fmt.Errorf("roundup_power2_divisions: %d is not a power of two up to %d", d, maxDivisions)
	}
	return p.validateRangesAndGC()
}

// LoadConfig reads and validates a pool.json file. Its errors name the file and the position:
// `pool.json: line 3 col 15: ...` for malformed JSON, `pool.json: size_class.classes[1]...: ...`
// for a value that fails Validate.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read pool config: %w", err)
	}
	return parseConfig(path, data)
}

// parseConfig decodes and validates pool.json content; name is used in errors.
func parseConfig(name string, data []byte) (Config, error) {
	var cfg Config
	if len(bytes.TrimSpace(data)) == 0 {
		return Config{}, fmt.Errorf("%s: empty file", name)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, jsonError(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		off := dec.InputOffset()
		return Config{}, fmt.Errorf("%s: %s: data after the config object", name, position(data, off-1))
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// jsonError turns a decoding error into "line L col C: what".
func jsonError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%s: %w", position(data, syn.Offset-1), err)
	case errors.As(err, &typ):
		what := fmt.Sprintf("%s: cannot use %s as %s", typ.Field, typ.Value, typ.Type)
		return fmt.Errorf("%s: %s", position(data, valueStart(data, typ.Offset)), what)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: unexpected end of file", position(data, int64(len(data))-1))
	}
	const unknown = "json: unknown field "
	if msg := err.Error(); len(msg) > len(unknown) && msg[:len(unknown)] == unknown {
		field := msg[len(unknown):]
		return fmt.Errorf("%s: unknown field %s", position(data, keyOffset(data, field)), field)
	}
	return err
}

// position formats the 0-based byte offset off as "line L col C" (1-based; col counts bytes).
func position(data []byte, off int64) string {
	off = max(0, min(off, int64(len(data))-1))
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	col := off + 1
	if nl := bytes.LastIndexByte(data[:off], '\n'); nl >= 0 {
		col = off - int64(nl)
	}
	return fmt.Sprintf("line %d col %d", line, col)
}

// valueStart returns the offset of the first byte of the JSON value that ends at end.
func valueStart(data []byte, end int64) int64 {
	dec := json.NewDecoder(bytes.NewReader(data))
	prev := int64(0)
	for {
		if _, err := dec.Token(); err != nil {
			return end - 1
		}
		if dec.InputOffset() >= end {
			return skipSeparators(data, prev)
		}
		prev = dec.InputOffset()
	}
}

// keyOffset returns the offset of the first object key spelled quoted (a JSON string with its
// quotes), or 0.
func keyOffset(data []byte, quoted string) int64 {
	dec := json.NewDecoder(bytes.NewReader(data))
	prev := int64(0)
	for {
		tok, err := dec.Token()
		if err != nil {
			return 0
		}
		if s, ok := tok.(string); ok && fmt.Sprintf("%q", s) == quoted {
			return skipSeparators(data, prev)
		}
		prev = dec.InputOffset()
	}
}

func skipSeparators(data []byte, off int64) int64 {
	for off < int64(len(data)) && bytes.IndexByte([]byte(" \t\r\n:,"), data[off]) >= 0 {
		off++
	}
	return off
}

// Save validates the config and writes it to path as indented JSON, replacing the file atomically.
func (c Config) Save(path string) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pool-*.json")
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}

// New builds the allocator that cfg describes on top of up. It validates cfg first, and reserves
// the planned memory (PolicySizeClass's slabs and arena, PolicyBestFit's initial region) from up.
// Allocators are safe for concurrent use unless the SingleGoroutine option is given.
func New(cfg Config, up Upstream, opts ...Option) (Allocator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool config: %w", err)
	}
	if up == nil {
		return nil, errors.New("new pool: nil upstream")
	}
	o := collect(opts)
	var a Allocator
	var err error
	switch cfg.Policy {
	case PolicySizeClass:
		a, err = newSizeClass(cfg, up, o)
	case PolicyBestFit:
		a, err = newBestFit(cfg, up, o)
	case PolicyPyTorch:
		a, err = newPyTorch(cfg, up, o)
	case PolicyStreamOrdered:
		a = newStreamOrdered(cfg, up, o)
	default:
		a = newRaw(cfg, up, o)
	}
	if err != nil {
		return nil, fmt.Errorf("new %s pool: %w", cfg.Policy, err)
	}
	return a, nil
}
