//go:build !unix

package requests

// chunkMemory returns room for n ops and their site indexes: the Go heap's here.
func chunkMemory(n int) (ops []Op, sites []uint32, mem []byte) {
	return make([]Op, 0, n), make([]uint32, 0, n), nil
}

// freeChunkMemory releases what chunkMemory returned: nothing to do here.
func freeChunkMemory([]byte) {}
