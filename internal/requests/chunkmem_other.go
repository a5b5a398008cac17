//go:build !unix

package requests

// chunkMemory returns room for n ops, and with sites for their site indexes: the Go heap's here.
func chunkMemory(n int, withSites bool) (ops []Op, sites []uint32, mem []byte) {
	return heapChunk(n, withSites)
}

// freeChunkMemory releases what chunkMemory returned: nothing to do here.
func freeChunkMemory([]byte) {}
