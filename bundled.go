// Package allocscope holds what the allocscope commands share at the module root: the bundled real
// trace that `analyze` reads when it is given no file.
//
// The tools themselves are cmd/record, cmd/analyze and cmd/replay; the stable library API is the
// trace package.
package allocscope

import _ "embed"

// BundledTraceName is the repository path of the bundled trace.
const BundledTraceName = "testdata/pytorch-train.arrow"

// BundledTrace is an allocscope trace recorded on an NVIDIA H200: a small PyTorch MLP trained for 30
// steps with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that every tensor is one cudaMalloc/cudaFree
// (testdata/h200/README.md says how it was made).
//
//go:embed testdata/pytorch-train.arrow
var BundledTrace []byte
