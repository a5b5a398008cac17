package trace

// The function names the importers of this package write.
const (
	FuncTorchAlloc         = "torch.alloc"
	FuncTorchFreeRequested = "torch.free_requested"
	FuncTorchFree          = "torch.free"
	FuncTorchSegmentAlloc  = "torch.segment_alloc"
	FuncTorchSegmentFree   = "torch.segment_free"
	FuncTorchSegmentMap    = "torch.segment_map"
	FuncTorchSegmentUnmap  = "torch.segment_unmap"
	FuncTorchOOM           = "torch.oom"
	FuncRMMAllocate        = "rmm.allocate"
	FuncRMMFree            = "rmm.free"
	// CuPy's memory pool, as record's CuPy hook logs it (a pool request and its return to the pool).
	FuncCupyMalloc = "cupy.malloc"
	FuncCupyFree   = "cupy.free"
)

// KnownFunctions returns the function names every Writer can store without being told: the
// CUDA runtime and driver entry points allocscope intercepts and the names the importers write.
// A trace's "function" column is dictionary-encoded with one dictionary for the whole file, so
// a Writer must know every name before the first batch; pass others with WithFunctions.
func KnownFunctions() []string {
	return append([]string(nil), knownFunctions...)
}

var knownFunctions = []string{
	"", // unknown
	// CUDA runtime API.
	"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaMallocFromPoolAsync",
	"cudaMallocAsync_ptsz", "cudaFreeAsync_ptsz", "cudaMallocFromPoolAsync_ptsz",
	"cudaMallocManaged", "cudaMallocPitch", "cudaMalloc3D", "cudaMallocHost", "cudaHostAlloc",
	"cudaFreeHost",
	// CUDA driver API.
	"cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocPitch_v2", "cuMemAllocManaged",
	"cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync",
	"cuMemAllocAsync_ptsz", "cuMemFreeAsync_ptsz", "cuMemAllocFromPoolAsync_ptsz",
	"cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemFreeHost",
	"cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuMemAddressReserve", "cuMemAddressFree",
	// Importers.
	FuncTorchAlloc, FuncTorchFreeRequested, FuncTorchFree, FuncTorchSegmentAlloc, FuncTorchSegmentFree,
	FuncTorchSegmentMap, FuncTorchSegmentUnmap, FuncTorchOOM, FuncRMMAllocate, FuncRMMFree,
	FuncCupyMalloc, FuncCupyFree,
}
