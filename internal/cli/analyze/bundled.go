package analyze

import _ "embed"

// BundledTraceName is the repository path of the bundled trace, the name its reports give it.
const BundledTraceName = "internal/cli/analyze/bundled/pytorch-train.arrow"

// BundledTrace is an allocscope trace recorded on an NVIDIA H200: a small PyTorch MLP trained for 30
// steps with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that every tensor is one cudaMalloc/cudaFree
// (testdata/h200/README.md says how it was made). `analyze` reads it when it is given no file.
//
//go:embed bundled/pytorch-train.arrow
var BundledTrace []byte
