package trace

import (
	"runtime"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// maxReadAhead bounds the default read-ahead: more decoding goroutines than this outrun any
// consumer of the batches, and each holds a decoded batch (about 6 MiB at 65536 rows).
const maxReadAhead = 4

// defaultReadAhead is the read-ahead of a Reader without WithReadAhead: one batch per CPU the Go
// scheduler uses, at most maxReadAhead.
func defaultReadAhead() int { return min(runtime.GOMAXPROCS(0), maxReadAhead) }

// fetched is one record batch decoded ahead, or why it could not be.
type fetched struct {
	rec arrow.RecordBatch
	err error
}

// readAhead decodes the record batches after the one being consumed on goroutines of their own,
// at most depth at a time, and hands them out in file order. The first batch is decoded by get
// itself, and decoding goes ahead only after a batch decoded without error: a file whose batches
// fail is read no further than sequentially.
//
// Each decoding goroutine takes an ipc.FileReader of its own from idle: arrow-go's FileReader
// resolves the dictionaries of a batch through state it does not lock (dictutils.Mapper hashes
// the field path with one shared hasher), so two goroutines decoding with one reader fail with
// "dictionary field not found", although RecordBatchAt's documentation says it is safe.
type readAhead struct {
	fetch   func(fr *ipc.FileReader, i int) (arrow.RecordBatch, error)
	open    func() (*ipc.FileReader, error) // another reader of the file
	main    *ipc.FileReader                 // get's own reader
	n       int                             // batches in the file
	depth   int                             // most batches decoded ahead; 0 = none
	next    int                             // next batch to start decoding
	pending []chan fetched                  // batches being decoded, oldest first
	idle    chan *ipc.FileReader            // the decoding goroutines' readers not in use
	readers []*ipc.FileReader               // all of them, made at the first start
}

// get returns batch i, the batch after the one of the previous call (0 at the first). The caller
// releases it.
func (a *readAhead) get(i int) (arrow.RecordBatch, error) {
	var f fetched
	if len(a.pending) > 0 {
		f = <-a.pending[0]
		a.pending = append(a.pending[:0], a.pending[1:]...)
	} else {
		f.rec, f.err = a.fetch(a.main, i)
		a.next = i + 1
	}
	if f.err == nil {
		a.start()
	}
	return f.rec, f.err
}

// start starts decoding the next batches until depth are pending.
func (a *readAhead) start() {
	if a.next >= a.n || a.depth == 0 || !a.openReaders() {
		return
	}
	for len(a.pending) < a.depth && a.next < a.n {
		ch, i := make(chan fetched, 1), a.next
		a.next++
		go func() {
			fr := <-a.idle
			rec, err := a.fetch(fr, i)
			a.idle <- fr
			ch <- fetched{rec, err}
		}()
		a.pending = append(a.pending, ch)
	}
}

// openReaders makes the decoding goroutines' readers, once; when it cannot, batches are decoded
// by get alone.
func (a *readAhead) openReaders() bool {
	if a.idle != nil {
		return true
	}
	idle := make(chan *ipc.FileReader, a.depth)
	for range a.depth {
		fr, err := a.open()
		if err != nil {
			a.closeReaders()
			a.depth = 0
			return false
		}
		a.readers = append(a.readers, fr)
		idle <- fr
	}
	a.idle = idle
	return true
}

func (a *readAhead) closeReaders() {
	for _, fr := range a.readers {
		fr.Close()
	}
	a.readers = nil
}

// stop waits for the batches being decoded, releases them and closes the decoding goroutines'
// readers; get decodes no more ahead.
func (a *readAhead) stop() {
	for _, ch := range a.pending {
		if f := <-ch; f.rec != nil {
			f.rec.Release()
		}
	}
	a.closeReaders()
	a.pending, a.next, a.depth = nil, a.n, 0
}
