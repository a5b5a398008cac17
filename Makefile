# replay-cuda builds bin/replay-cuda: the replay command with the CUDA backend (build tag cuda,
# gorgonia.org/cu plus our cgo for the stream-ordered allocator). It needs cuda.h and libcuda.so
# (the toolkit's stub is enough to link) under .cuda/include and .cuda/lib (git-ignored; copy them
# from a machine with the CUDA toolkit), and compiles gorgonia.org/cu against CUDA 13 through the
# compat header internal/replay/cudacompat/cuda13compat.h, copied to .cuda/compat/cuda.h and put first on the
# include path. The binary runs only where a CUDA driver is installed.
CUDA_DIR ?= $(CURDIR)/.cuda

.PHONY: replay-cuda
replay-cuda:
	mkdir -p $(CUDA_DIR)/compat && cp internal/replay/cudacompat/cuda13compat.h $(CUDA_DIR)/compat/cuda.h
	CGO_ENABLED=1 CGO_CFLAGS="-I$(CUDA_DIR)/compat -I$(CUDA_DIR)/include" \
		CGO_LDFLAGS="-L$(CUDA_DIR)/lib" go build -tags cuda -o bin/replay-cuda ./cmd/replay
