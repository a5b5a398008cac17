package testcuda

// Expected event listings (Render lines) of the test programs recorded under the shim, as
// intercept's tests assert them. Addresses follow from the fake libraries' deterministic allocator.
const (
	// PlainEvents lists the 55 events of testdata/progs/plain.c (exit code 7):
	// every hooked runtime and driver function reached by plain symbols.
	PlainEvents = `
cudaMalloc alloc device runtime size=1000 addr=0x200000000000 result=0 dev=0
cudaMalloc alloc device runtime size=4096 addr=0x200000000400 result=0 dev=0
cudaFree free device runtime size=1000 addr=0x200000000000 result=0 dev=0
cudaMalloc alloc device runtime size=1000 addr=0x200000000000 result=0 dev=0
cudaMallocAsync alloc device runtime size=2048 addr=0x200000001400 result=0 dev=0 stream=0x51
cudaFreeAsync free device runtime size=2048 addr=0x200000001400 result=0 dev=0 stream=0x51
cudaMallocFromPoolAsync alloc device runtime size=512 addr=0x200000001c00 result=0 dev=0 stream=0x52
cudaMallocManaged alloc managed runtime size=3000 addr=0x300000000000 result=0 dev=-1
cudaMallocPitch alloc device runtime size=5120 addr=0x200000001e00 result=0 dev=0
cudaMalloc3D alloc device runtime size=4096 addr=0x200000003200 result=0 dev=0
cudaMallocHost alloc host runtime size=256 addr=0x310000000000 result=0 dev=-1
cudaHostAlloc alloc host runtime size=100 addr=0x310000000200 result=0 dev=-1
cudaFreeHost free host runtime size=256 addr=0x310000000000 result=0 dev=-1
cudaFreeHost free host runtime size=100 addr=0x310000000200 result=0 dev=-1
cudaMalloc alloc device runtime size=2199023255552 addr=0x0 result=2 dev=-1
cudaFree free device runtime size=0 addr=0x1234 result=1 dev=-1
cudaFree free device runtime size=0 addr=0x0 result=0 dev=-1
cudaMalloc alloc device runtime size=64 addr=0x200000004200 result=0 dev=1
cudaFree free device runtime size=64 addr=0x200000004200 result=0 dev=1
cudaFree free managed runtime size=3000 addr=0x300000000000 result=0 dev=-1
cuMemAlloc_v2 alloc device driver size=777 addr=0x200000004400 result=0 dev=0
cuMemAllocPitch_v2 alloc device driver size=3072 addr=0x200000004800 result=0 dev=0
cuMemAllocManaged alloc managed driver size=5000 addr=0x300000000c00 result=0 dev=-1
cuMemAllocAsync alloc device driver size=300 addr=0x200000004200 result=0 dev=0 stream=0x61
cuMemAllocAsync_ptsz alloc device driver size=301 addr=0x200000005400 result=0 dev=0 stream=0x62
cuMemFreeAsync free device driver size=300 addr=0x200000004200 result=0 dev=0 stream=0x61
cuMemFreeAsync_ptsz free device driver size=301 addr=0x200000005400 result=0 dev=0 stream=0x62
cuMemAllocFromPoolAsync alloc device driver size=7000 addr=0x200000005600 result=0 dev=0 stream=0x63
cuMemAllocFromPoolAsync_ptsz alloc device driver size=7001 addr=0x200000007200 result=0 dev=0 stream=0x64
cuMemAllocHost_v2 alloc host driver size=1024 addr=0x310000000400 result=0 dev=-1
cuMemHostAlloc alloc host driver size=2048 addr=0x310000000800 result=0 dev=-1
cuMemFreeHost free host driver size=1024 addr=0x310000000400 result=0 dev=-1
cuMemFreeHost free host driver size=2048 addr=0x310000000800 result=0 dev=-1
cuMemFree_v2 free device driver size=777 addr=0x200000004400 result=0 dev=0
cuMemFree_v2 free device driver size=3072 addr=0x200000004800 result=0 dev=0
cuMemFree_v2 free managed driver size=5000 addr=0x300000000c00 result=0 dev=-1
cuMemFree_v2 free device driver size=7000 addr=0x200000005600 result=0 dev=0
cuMemFree_v2 free device driver size=7001 addr=0x200000007200 result=0 dev=0
cuMemFree_v2 free device driver size=0 addr=0x200000004400 result=1 dev=-1
cuMemAddressReserve reserve virtual driver size=4194304 addr=0x400000000000 result=0 dev=-1
cuMemCreate create virtual driver size=2097152 addr=0x1000 result=0 dev=1
cuMemMap map virtual driver size=2097152 addr=0x400000000000 result=0 dev=1 handle=0x1000
cuMemUnmap unmap virtual driver size=2097152 addr=0x400000000000 result=0 dev=-1
cuMemRelease release virtual driver size=2097152 addr=0x1000 result=0 dev=1
cuMemAddressFree unreserve virtual driver size=4194304 addr=0x400000000000 result=0 dev=-1
cuMemCreate create virtual driver size=12345 addr=0x0 result=1 dev=-1
cuMemAlloc_v2 alloc device driver size=128 addr=0x200000005400 result=0 dev=0
cuMemAllocAsync_ptsz alloc device driver size=129 addr=0x200000004200 result=0 dev=0 stream=0x65
cuMemFree_v2 free device driver size=128 addr=0x200000005400 result=0 dev=0
cuMemFreeAsync_ptsz free device driver size=129 addr=0x200000004200 result=0 dev=0 stream=0x65
cudaFree free device runtime size=4096 addr=0x200000000400 result=0 dev=0
cudaFree free device runtime size=1000 addr=0x200000000000 result=0 dev=0
cudaFreeAsync free device runtime size=512 addr=0x200000001c00 result=0 dev=0 stream=0x52
cudaFree free device runtime size=5120 addr=0x200000001e00 result=0 dev=0
cudaFree free device runtime size=4096 addr=0x200000003200 result=0 dev=0
`
	// StaticCudartEvents lists the 18 events of testdata/progs/static_cudart.c (exit code 11):
	// the driver reached the way static cudart does.
	StaticCudartEvents = `
cuMemAlloc_v2 alloc device driver size=1048576 addr=0x200000000000 result=0 dev=0
cuMemAlloc_v2 alloc device driver size=2097152 addr=0x200000100000 result=0 dev=0
cuMemAlloc_v2 alloc device driver size=3145728 addr=0x200000300000 result=0 dev=0
cuMemAlloc_v2 alloc device driver size=4194304 addr=0x200000600000 result=0 dev=0
cuMemAlloc_v2 alloc device driver size=5242880 addr=0x200000a00000 result=0 dev=0
cuMemFree_v2 free device driver size=5242880 addr=0x200000a00000 result=0 dev=0
cuMemFree_v2 free device driver size=4194304 addr=0x200000600000 result=0 dev=0
cuMemFree_v2 free device driver size=3145728 addr=0x200000300000 result=0 dev=0
cuMemFree_v2 free device driver size=2097152 addr=0x200000100000 result=0 dev=0
cuMemFree_v2 free device driver size=1048576 addr=0x200000000000 result=0 dev=0
cuMemAllocAsync alloc device driver size=4096 addr=0x200000f00000 result=0 dev=0 stream=0x21
cuMemAllocAsync_ptsz alloc device driver size=8192 addr=0x200000f01000 result=0 dev=0 stream=0x22
cuMemFreeAsync_ptsz free device driver size=4096 addr=0x200000f00000 result=0 dev=0 stream=0x22
cuMemFreeAsync free device driver size=8192 addr=0x200000f01000 result=0 dev=0 stream=0x21
cuMemAlloc_v2 alloc device driver size=100 addr=0x200000f03000 result=0 dev=0
cuMemFree_v2 free device driver size=100 addr=0x200000f03000 result=0 dev=0
cuMemCreate create virtual driver size=4194304 addr=0x1000 result=0 dev=0
cuMemRelease release virtual driver size=4194304 addr=0x1000 result=0 dev=0
`
	// CupyStyleEvents lists the 8 events of testdata/progs/cupy_style.c (exit code 13):
	// dlsym of the driver functions, like CuPy.
	CupyStyleEvents = `
cuMemAlloc_v2 alloc device driver size=1000 addr=0x200000000000 result=0 dev=0
cuMemAlloc_v2 alloc device driver size=2000 addr=0x200000000400 result=0 dev=0
cuMemAlloc_v2 alloc device driver size=3000 addr=0x200000000c00 result=0 dev=0
cuMemAllocAsync alloc device driver size=64 addr=0x200000001800 result=0 dev=0 stream=0x31
cuMemFreeAsync free device driver size=64 addr=0x200000001800 result=0 dev=0 stream=0x31
cuMemFree_v2 free device driver size=1000 addr=0x200000000000 result=0 dev=0
cuMemFree_v2 free device driver size=2000 addr=0x200000000400 result=0 dev=0
cuMemFree_v2 free device driver size=3000 addr=0x200000000c00 result=0 dev=0
`
	// ForkExecEvents lists the 19 events of testdata/progs/forkexec.c (exit code 19):
	// three processes (parent, forked child, exec'd image) merged in seq order.
	ForkExecEvents = `
cudaMalloc alloc device runtime size=100 addr=0x200000000000 result=0 dev=0
cudaMalloc alloc device runtime size=200 addr=0x200000000200 result=0 dev=0
cudaMalloc alloc device runtime size=300 addr=0x200000000400 result=0 dev=0
cudaMalloc alloc device runtime size=1111 addr=0x200000000600 result=0 dev=0
cudaFree free device runtime size=1111 addr=0x200000000600 result=0 dev=0
cudaFree free device runtime size=100 addr=0x200000000000 result=0 dev=0
cudaMalloc alloc device runtime size=4096 addr=0x200000000000 result=0 dev=0
cudaMalloc alloc device runtime size=8192 addr=0x200000001000 result=0 dev=0
cudaMalloc alloc device runtime size=12288 addr=0x200000003000 result=0 dev=0
cudaMalloc alloc device runtime size=16384 addr=0x200000006000 result=0 dev=0
cudaFree free device runtime size=4096 addr=0x200000000000 result=0 dev=0
cudaFree free device runtime size=8192 addr=0x200000001000 result=0 dev=0
cudaFree free device runtime size=12288 addr=0x200000003000 result=0 dev=0
cudaFree free device runtime size=16384 addr=0x200000006000 result=0 dev=0
cudaFree free device runtime size=200 addr=0x200000000200 result=0 dev=0
cudaFree free device runtime size=300 addr=0x200000000400 result=0 dev=0
cudaMalloc alloc device runtime size=400 addr=0x200000000400 result=0 dev=0
cudaFree free device runtime size=400 addr=0x200000000400 result=0 dev=0
cudaFree free device runtime size=100 addr=0x200000000000 result=0 dev=0
`
)

// SignalsEvents lists the 6 events of testdata/progs/signals.c (exit code 42 after SIGINT or
// SIGTERM); SignalsEventsBeforeSignal are the 3 it logs before printing "ready".
const (
	SignalsEventsBeforeSignal = `
cudaMalloc alloc device runtime size=1024 addr=0x200000000000 result=0 dev=0
cudaMalloc alloc device runtime size=2048 addr=0x200000000400 result=0 dev=0
cudaMalloc alloc device runtime size=3072 addr=0x200000000c00 result=0 dev=0
`
	SignalsEvents = SignalsEventsBeforeSignal + `
cudaFree free device runtime size=1024 addr=0x200000000000 result=0 dev=0
cudaFree free device runtime size=2048 addr=0x200000000400 result=0 dev=0
cudaFree free device runtime size=3072 addr=0x200000000c00 result=0 dev=0
`
)
