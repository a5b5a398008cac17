package model

// TorchSearch is the search of PYTORCH_CUDA_ALLOC_CONF settings: every setting simulated with
// PyTorch's caching allocator (pool.PolicyPyTorch) or, for backend:cudaMallocAsync, CUDA's
// stream-ordered pool, on unbounded memory, and ranked. A setting fits a capacity when its peak
// reserved bytes stay within it: then no request fails and none makes PyTorch free its cache and
// retry.
type TorchSearch struct {
	CapacityBytes uint64         `json:"capacity_bytes"` // the device capacity the settings ran under (0 = unbounded)
	Simulated     int            `json:"simulated"`      // settings simulated
	Fits          bool           `json:"fits"`           // some setting served every request, without a retry, within the capacity
	Best          []TorchSetting `json:"best"`           // the best few, best first
	Defaults      TorchSetting   `json:"defaults"`       // PyTorch's defaults
	// MissBytes is, when no setting fits, by how much the closest one (Best[0]) passes the
	// capacity: its peak reserved bytes minus the capacity.
	MissBytes uint64 `json:"miss_bytes,omitempty"`
}

// TorchSetting is one PYTORCH_CUDA_ALLOC_CONF value and what it did in the model.
type TorchSetting struct {
	Conf              string `json:"conf"`                // the value ("" for the defaults)
	Settings          int    `json:"settings"`            // how many options it sets
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"` // torch.cuda.max_memory_reserved() in the model
	Segments          uint64 `json:"segments"`            // cudaMalloc calls (segments or pages mapped)
	Releases          uint64 `json:"releases"`            // cudaFree calls (segments or pages given back)
	Failures          uint64 `json:"failures"`            // requests that failed
	SavedBytes        int64  `json:"saved_bytes"`         // defaults' peak reserved minus this one's
	Error             string `json:"error,omitempty"`     // the setting could not be simulated
}
