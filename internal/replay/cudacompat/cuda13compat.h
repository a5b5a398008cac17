/*
 * allocscope's CUDA-13 compatibility header for gorgonia.org/cu v0.9.6.
 *
 * `make replay-cuda` copies it to .cuda/compat/cuda.h (git-ignored, so that no file named cuda.h is
 * tracked) and puts that directory first on the include path, before the CUDA toolkit's include
 * directory. It includes the real cuda.h (#include_next), then undoes the CUDA 13 renames that break
 * gorgonia.org/cu: CUDA 13 #defines these names to new entry points with different parameters
 * (cuCtxCreate -> cuCtxCreate_v4 with CUctxCreateParams*, cuMemAdvise/cuMemPrefetchAsync -> _v2
 * with CUmemLocation, the cuGraph*Dependencies/Edges calls -> _v2 with edge data). Here each
 * name is bound again to its pre-13 prototype and the old symbol, which libcuda still exports.
 *
 * Written for allocscope; contains no NVIDIA code.
 */
#ifndef ALLOCSCOPE_CUDA13COMPAT_H
#define ALLOCSCOPE_CUDA13COMPAT_H

#include_next <cuda.h>

#if defined(CUDA_VERSION) && CUDA_VERSION >= 13000

#ifdef __cplusplus
extern "C" {
#endif

#undef cuCtxCreate
#define cuCtxCreate cuCtxCreate_v2
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#undef cuMemAdvise
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);

#undef cuMemPrefetchAsync
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);

#undef cuGraphAddDependencies
CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                        size_t numDependencies);

#undef cuGraphGetEdges
CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges);

#undef cuGraphNodeGetDependencies
CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies);

#undef cuGraphNodeGetDependentNodes
CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                              size_t *numDependentNodes);

#undef cuGraphRemoveDependencies
CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                           size_t numDependencies);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_VERSION >= 13000 */

#endif /* ALLOCSCOPE_CUDA13COMPAT_H */
