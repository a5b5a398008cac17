package trace

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// realisticEvents returns n events shaped like a training loop's: increasing seq and time,
// one process, a few threads, sizes from a small set, addresses reused, alloc/free pairs.
func realisticEvents(n int) []Event {
	sizes := []uint64{512, 4096, 1 << 20, 3 << 20, 20 << 20, 256, 8192, 65536}
	funcs := []string{"cudaMallocAsync", "cudaFreeAsync", "cuMemAlloc_v2", "cuMemFree_v2"}
	events := make([]Event, n)
	for i := range events {
		k := i / 2
		e := &events[i]
		e.Seq = uint64(i)
		e.TimeNs = int64(i) * 850
		e.DurationNs = int64(300 + (i*7919)%2000)
		e.PID = 4242
		e.TID = uint32(4242 + k%4)
		e.Size = sizes[k%len(sizes)]
		e.Address = 0x7f0000000000 + uint64(k%512)*(32<<20)
		e.Stream = uint64(k % 2)
		e.Callsite = 0x401000 + uint64(k%16)*0x40
		e.Op, e.Function = OpAlloc, funcs[2*(k%2)]
		if i%2 == 1 {
			e.Op, e.Function = OpFree, funcs[2*(k%2)+1]
		}
	}
	return events
}

// BenchmarkWrite measures Writer.Write + Close into io.Discard; one op is one event.
func BenchmarkWrite(b *testing.B) {
	events := realisticEvents(1 << 20)
	for _, c := range []struct {
		name string
		opts []WriterOption
	}{
		{"zstd-fastest-np1", []WriterOption{WithCompressConcurrency(1)}},
		{"zstd-fastest-np2", nil}, // the default
		{"zstd-default-np1", []WriterOption{withZstdLevel(3)}},
		{"zstd-default-np2", []WriterOption{withZstdLevel(3), WithCompressConcurrency(2)}},
		{"uncompressed", []WriterOption{withoutCompression()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var out countingWriter
			w, err := NewWriter(&out, testInfo(), c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := w.Write(&events[i&(len(events)-1)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(out.n)/float64(b.N), "bytes/event")
		})
	}
}

// countingWriter counts and discards what is written to it.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

var readFile = flag.String("read.file", "", "BenchmarkRead reads the trace at `PATH` instead of a generated 1 Mi-event trace")

// benchTrace returns -read.file, or the path of a 1 Mi-event trace written to b's temp dir.
func benchTrace(b *testing.B) string {
	if *readFile != "" {
		return *readFile
	}
	events := realisticEvents(1 << 20)
	path := filepath.Join(b.TempDir(), "bench.arrow")
	w, err := Create(path, testInfo())
	if err != nil {
		b.Fatal(err)
	}
	for i := range events {
		if err := w.Write(&events[i]); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if st, err := os.Stat(path); err == nil {
		b.Logf("1 Mi events: %d bytes (%.1f bytes/event)", st.Size(), float64(st.Size())/float64(len(events)))
	}
	return path
}

// BenchmarkRead measures Open + Next over a 1 Mi-event trace file (or -read.file); one op is one
// event.
func BenchmarkRead(b *testing.B) {
	path := benchTrace(b)
	b.ReportAllocs()
	b.ResetTimer()
	readEvents(b, path)
}

// BenchmarkReadColumns measures Open + NextColumns over the trace of BenchmarkRead, summing one
// column, without read-ahead and with the default; one op is one event.
func BenchmarkReadColumns(b *testing.B) {
	path := benchTrace(b)
	for _, c := range []struct {
		name string
		opts []ReadOption
	}{{"ahead=0", []ReadOption{WithReadAhead(0)}}, {"ahead=default", nil}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			read, sum := 0, uint64(0)
			for read < b.N {
				r, err := Open(path, c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				for read < b.N {
					cols, err := r.NextColumns()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					for _, v := range cols.Size {
						sum += v
					}
					read += cols.Len()
				}
				r.Close()
			}
			b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkImportSnapshot measures the PyTorch snapshot importer on the real kvcache
// snapshot (70814 history entries); one op is one whole import. ALLOCSCOPE_BENCH_SNAPSHOT names
// another snapshot to import instead (e.g. a large synthetic one).
func BenchmarkImportSnapshot(b *testing.B) {
	path := "../testdata/torch/kvcache.caching.snapshot.pickle.gz"
	if p := os.Getenv("ALLOCSCOPE_BENCH_SNAPSHOT"); p != "" {
		path = p
	}
	n := 0
	for i := 0; i < b.N; i++ {
		r, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		for {
			batch, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += len(batch)
		}
		r.Close()
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkImportRMM measures the RMM CSV importer; one op is one row.
func BenchmarkImportRMM(b *testing.B) {
	path := filepath.Join(b.TempDir(), "rmm.csv")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintln(f, "Thread,Time,Action,Pointer,Size,Stream")
	const rows = 200000
	for i := 0; i < rows; i++ {
		action := "allocate"
		if i%2 == 1 {
			action = "free"
		}
		fmt.Fprintf(f, "140573312345856,12:%02d:%02d.%06d,%s,0x7f8a4%07x,%d,0x0\n", i/60000%60, i/1000%60, i%1000*1000, action, i/2*256, 256+i%4096)
	}
	f.Close()
	b.ResetTimer()
	readEvents(b, path)
}

// readEvents opens path as often as needed to read b.N events and reports events/s.
func readEvents(b *testing.B, path string) {
	read := 0
	for read < b.N {
		r, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		for read < b.N {
			batch, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			read += len(batch)
		}
		r.Close()
	}
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkFastUnpickle measures the snapshot decoder alone (fastUnpickle) on the pickle of the real
// kvcache snapshot (70814 history entries), decompressed beforehand; one op is one whole decode.
func BenchmarkFastUnpickle(b *testing.B) {
	f, err := os.Open("../testdata/torch/kvcache.caching.snapshot.pickle.gz")
	if err != nil {
		b.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	data, err := readSnapshotBytes(f, st.Size())
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := fastUnpickle(data, len(data)/64); !ok {
			b.Fatal("fastUnpickle gave up")
		}
	}
}
