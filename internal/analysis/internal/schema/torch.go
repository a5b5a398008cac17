package schema

// TorchSearch is the search of PYTORCH_CUDA_ALLOC_CONF settings: every setting simulated with
// PyTorch's caching allocator (pool.PolicyPyTorch) and ranked, and backend:cudaMallocAsync
// simulated as CUDA's stream-ordered pool and reported apart, on unbounded memory (those with
// garbage_collection_threshold within the capacity, where it acts). A setting fits a capacity
// when its peak reserved bytes stay within it and no request fails nor makes PyTorch free its
// cache and retry.
type TorchSearch struct {
	CapacityBytes uint64         `json:"capacity_bytes"` // the device capacity the settings ran under (0 = unbounded)
	Simulated     int            `json:"simulated"`      // settings simulated
	Fits          bool           `json:"fits"`           // some setting served every request, without a retry, within the capacity
	Best          []TorchSetting `json:"best"`           // the best few, best first
	Defaults      TorchSetting   `json:"defaults"`       // PyTorch's defaults
	// MissBytes is, when no setting fits, by how much the closest one (Best[0]) passes the
	// capacity: its peak reserved bytes minus the capacity.
	MissBytes uint64 `json:"miss_bytes,omitempty"`
	// AsyncBackend is backend:cudaMallocAsync in the model (CUDA's stream-ordered pool keeping its
	// memory), apart from the ranking: PyTorch's reserved figure under that backend is not
	// predicted to the byte. nil when it was not simulated.
	AsyncBackend *TorchSetting `json:"async_backend,omitempty"`
}

// TorchSetting is one PYTORCH_CUDA_ALLOC_CONF value and what it did in the model.
type TorchSetting struct {
	Conf              string `json:"conf"`                // the value ("" for the defaults)
	Settings          int    `json:"settings"`            // how many options it sets
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"` // torch.cuda.max_memory_reserved() in the model
	Segments          uint64 `json:"segments"`            // cudaMalloc calls (segments or pages mapped)
	Releases          uint64 `json:"releases"`            // cudaFree calls (segments or pages given back)
	Failures          uint64 `json:"failures"`            // requests that failed
	Retries           uint64 `json:"retries,omitempty"`   // failed cudaMalloc calls, each a free-cache-and-retry (bounded runs)
	SavedBytes        int64  `json:"saved_bytes"`         // defaults' peak reserved minus this one's
	Error             string `json:"error,omitempty"`     // the setting could not be simulated
	// Processes is, for a trace of several processes, each process's peak reserved bytes, each
	// simulated with its own caching allocator as PyTorch runs one per process; then
	// PeakReservedBytes, Segments, Releases, Failures and Retries are the processes' sums.
	Processes []ProcessReserved `json:"processes,omitempty"`
}

// ProcessReserved is one process's peak reserved bytes under a setting.
type ProcessReserved struct {
	PID               uint32 `json:"pid"`
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
}

// OOMReport explains an out-of-memory of a PyTorch snapshot from the snapshot's segments, which
// PyTorch dumps at the OOM when the program takes the snapshot there, an out-of-memory of a
// program run under record from the segments rebuilt at the failing request (Recorded), or the first request the
// PyTorch model failed within the capacity (Simulated) from the model's segments at that moment:
// what was reserved, in use and cached, where the free memory was, the most fragmented segments
// and the blocks that pin them, and the setting of the search that would have fit.
type OOMReport struct {
	Seq             uint64 `json:"seq"`               // the oom event
	PID             uint32 `json:"pid,omitempty"`     // its process (0 when the trace keeps none)
	Device          int32  `json:"device"`            // its device
	RequestedBytes  uint64 `json:"requested_bytes"`   // what the failed request asked for
	DeviceFreeBytes uint64 `json:"device_free_bytes"` // what CUDA still had free on the device
	// CapacityBytes is what PyTorch could have reserved: reserved plus the device's free bytes.
	CapacityBytes   uint64              `json:"capacity_bytes"`
	ReservedBytes   uint64              `json:"reserved_bytes"`    // segments' bytes
	AllocatedBytes  uint64              `json:"allocated_bytes"`   // blocks in use
	CachedFreeBytes uint64              `json:"cached_free_bytes"` // free blocks inside the segments
	LargestFree     []StreamFree        `json:"largest_free"`      // the largest free block of each stream
	Fragmented      []FragmentedSegment `json:"fragmented"`        // the segments with the most free bytes among blocks in use
	// Fits is the best setting of the search whose peak reserved plus the failed request stay
	// within CapacityBytes (a sufficient condition: the peak may come at another moment); for a
	// simulated out-of-memory, the best setting when it fits the capacity. nil when none does.
	Fits *TorchSetting `json:"fits,omitempty"`
	// Simulated is set when the out-of-memory is the model's, not the snapshot's.
	Simulated *SimulatedOOM `json:"simulated,omitempty"`
	// Recorded is set when the segments are those record rebuilt from a recorded program's memory
	// history at the failing request (trace.FrameworkCapture.OOM), not a snapshot's.
	Recorded bool `json:"recorded,omitempty"`
}

// SimulatedOOM is the setting whose model failed requests within the capacity.
type SimulatedOOM struct {
	Conf     string `json:"conf"`     // its PYTORCH_CUDA_ALLOC_CONF value ("" for the defaults)
	Failures uint64 `json:"failures"` // the requests it failed; the report is on the first
}

// StreamFree is the largest free block of one stream's segments.
type StreamFree struct {
	Stream uint64 `json:"stream"`
	Bytes  uint64 `json:"bytes"`
}

// FragmentedSegment is a segment whose free bytes cannot serve a request as one block, and the
// blocks in use that keep it from being given back.
type FragmentedSegment struct {
	Address      string         `json:"address"`
	Stream       uint64         `json:"stream"`
	SizeBytes    uint64         `json:"size_bytes"`
	FreeBytes    uint64         `json:"free_bytes"`
	LargestFree  uint64         `json:"largest_free_bytes"`
	PinnedBy     []PinningBlock `json:"pinned_by"` // the blocks in use, largest first (at most 3)
	PinnedBlocks int            `json:"pinned_blocks"`
}

// PinningBlock is a block in use inside a fragmented segment.
type PinningBlock struct {
	SizeBytes uint64 `json:"size_bytes"`
	Callsite  string `json:"callsite"`
}
