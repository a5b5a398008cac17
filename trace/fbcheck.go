package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The Arrow IPC file's footer and each message's metadata are flatbuffers. arrow-go trusts
// their vector lengths and sizes Go slices by them, so a corrupt length can make it allocate
// far more memory than the machine has (a fatal error, not a recoverable panic), and a cyclic
// field list makes it recurse without end. fbCheck walks the parts of the Arrow flatbuffer
// schema (File.fbs, Schema.fbs, Message.fbs) that arrow-go reads and checks every offset and
// vector length against the buffer before arrow-go sees it.

const (
	fbMaxDepth  = 32      // nesting of fields
	fbMaxTables = 1 << 16 // tables visited in one buffer
)

var errFlatbuffer = errors.New("corrupt flatbuffer")

type fbCheck struct {
	b      []byte
	tables int
}

type fbTable struct {
	c     *fbCheck
	pos   int // table start
	vt    int // vtable start
	vtLen int // vtable length in bytes
}

func (c *fbCheck) fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errFlatbuffer, fmt.Sprintf(format, args...))
}

func (c *fbCheck) u32(pos int) (int, error) {
	if pos < 0 || pos+4 > len(c.b) {
		return 0, c.fail("offset %d outside %d bytes", pos, len(c.b))
	}
	return int(binary.LittleEndian.Uint32(c.b[pos:])), nil
}

// root returns the root table of the buffer.
func (c *fbCheck) root() (fbTable, error) {
	off, err := c.u32(0)
	if err != nil {
		return fbTable{}, err
	}
	return c.table(off)
}

func (c *fbCheck) table(pos int) (fbTable, error) {
	c.tables++
	if c.tables > fbMaxTables {
		return fbTable{}, c.fail("more than %d tables", fbMaxTables)
	}
	soff, err := c.u32(pos)
	if err != nil {
		return fbTable{}, err
	}
	vt := pos - int(int32(uint32(soff)))
	if vt < 0 || vt+4 > len(c.b) {
		return fbTable{}, c.fail("vtable at %d outside %d bytes", vt, len(c.b))
	}
	vtLen := int(binary.LittleEndian.Uint16(c.b[vt:]))
	objLen := int(binary.LittleEndian.Uint16(c.b[vt+2:]))
	if vtLen < 4 || vtLen%2 != 0 || vt+vtLen > len(c.b) || pos+objLen > len(c.b) {
		return fbTable{}, c.fail("bad vtable at %d", vt)
	}
	return fbTable{c: c, pos: pos, vt: vt, vtLen: vtLen}, nil
}

// field returns the absolute position of field slot, or 0 when the field is absent.
func (t fbTable) field(slot int) int {
	e := 4 + 2*slot
	if e+2 > t.vtLen {
		return 0
	}
	off := int(binary.LittleEndian.Uint16(t.c.b[t.vt+e:]))
	if off == 0 {
		return 0
	}
	return t.pos + off
}

// target follows the offset stored in field slot; ok is false when the field is absent.
func (t fbTable) target(slot int) (pos int, ok bool, err error) {
	f := t.field(slot)
	if f == 0 {
		return 0, false, nil
	}
	off, err := t.c.u32(f)
	if err != nil {
		return 0, false, err
	}
	return f + off, true, nil
}

func (t fbTable) child(slot int) (fbTable, bool, error) {
	pos, ok, err := t.target(slot)
	if !ok || err != nil {
		return fbTable{}, false, err
	}
	c, err := t.c.table(pos)
	return c, err == nil, err
}

// vector checks the vector in field slot and returns the position of its first element and
// its length.
func (t fbTable) vector(slot, elemSize int) (start, n int, err error) {
	pos, ok, err := t.target(slot)
	if !ok || err != nil {
		return 0, 0, err
	}
	if n, err = t.c.u32(pos); err != nil {
		return 0, 0, err
	}
	if uint64(n)*uint64(elemSize) > uint64(len(t.c.b)-pos-4) {
		return 0, 0, t.c.fail("vector of %d × %d bytes at %d overruns %d bytes", n, elemSize, pos, len(t.c.b))
	}
	return pos + 4, n, nil
}

// tables calls f for each table of the vector of tables in field slot.
func (t fbTable) tables(slot int, f func(fbTable) error) error {
	start, n, err := t.vector(slot, 4)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		p := start + 4*i
		off, _ := t.c.u32(p)
		child, err := t.c.table(p + off)
		if err != nil {
			return err
		}
		if err := f(child); err != nil {
			return err
		}
	}
	return nil
}

func (t fbTable) str(slot int) error {
	_, _, err := t.vector(slot, 1)
	return err
}

func (t fbTable) u8(slot int) byte {
	f := t.field(slot)
	if f == 0 || f >= len(t.c.b) {
		return 0
	}
	return t.c.b[f]
}

func checkKeyValues(t fbTable, slot int) error {
	return t.tables(slot, func(kv fbTable) error {
		if err := kv.str(0); err != nil {
			return err
		}
		return kv.str(1)
	})
}

// checkFooter checks an Arrow file footer (File.fbs: Footer).
func checkFooter(b []byte) error {
	c := &fbCheck{b: b}
	footer, err := c.root()
	if err != nil {
		return err
	}
	if schema, ok, err := footer.child(1); err != nil {
		return err
	} else if ok {
		if err := checkSchemaTable(schema); err != nil {
			return err
		}
	}
	const blockSize = 24
	if _, _, err := footer.vector(2, blockSize); err != nil {
		return err
	}
	if _, _, err := footer.vector(3, blockSize); err != nil {
		return err
	}
	return checkKeyValues(footer, 4)
}

func checkSchemaTable(s fbTable) error {
	if err := s.tables(1, func(f fbTable) error { return checkField(f, 1) }); err != nil {
		return err
	}
	if err := checkKeyValues(s, 2); err != nil {
		return err
	}
	_, _, err := s.vector(3, 8)
	return err
}

// Type union tags of Schema.fbs whose tables hold offsets.
const (
	fbTypeTimestamp = 10
	fbTypeUnion     = 14
)

func checkField(f fbTable, depth int) error {
	if depth > fbMaxDepth {
		return f.c.fail("fields nested deeper than %d", fbMaxDepth)
	}
	if err := f.str(0); err != nil {
		return err
	}
	typ, ok, err := f.child(3)
	if err != nil {
		return err
	}
	if ok {
		switch f.u8(2) {
		case fbTypeTimestamp:
			err = typ.str(1)
		case fbTypeUnion:
			_, _, err = typ.vector(1, 4)
		}
		if err != nil {
			return err
		}
	}
	if dict, ok, err := f.child(4); err != nil {
		return err
	} else if ok {
		if _, _, err := dict.child(1); err != nil {
			return err
		}
	}
	if err := f.tables(5, func(ch fbTable) error { return checkField(ch, depth+1) }); err != nil {
		return err
	}
	return checkKeyValues(f, 6)
}

// Message header union tags of Message.fbs.
const (
	fbHeaderSchema          = 1
	fbHeaderDictionaryBatch = 2
	fbHeaderRecordBatch     = 3
)

// checkMessage checks one IPC message's flatbuffer (Message.fbs: Message).
func checkMessage(b []byte) error {
	c := &fbCheck{b: b}
	msg, err := c.root()
	if err != nil {
		return err
	}
	if err := checkKeyValues(msg, 4); err != nil {
		return err
	}
	header, ok, err := msg.child(2)
	if err != nil || !ok {
		return err
	}
	switch msg.u8(1) {
	case fbHeaderSchema:
		return checkSchemaTable(header)
	case fbHeaderDictionaryBatch:
		data, ok, err := header.child(1)
		if err != nil || !ok {
			return err
		}
		return checkRecordBatchTable(data)
	case fbHeaderRecordBatch:
		return checkRecordBatchTable(header)
	}
	return nil
}

func checkRecordBatchTable(rb fbTable) error {
	const fieldNodeSize, bufferSize = 16, 16
	if _, _, err := rb.vector(1, fieldNodeSize); err != nil {
		return err
	}
	if _, _, err := rb.vector(2, bufferSize); err != nil {
		return err
	}
	if _, _, err := rb.child(3); err != nil {
		return err
	}
	_, _, err := rb.vector(4, 8)
	return err
}

// arrowBlock is one Block of the footer: where a message lies in the file.
type arrowBlock struct {
	offset  int64
	metaLen int32
	bodyLen int64
}

// footerBlocks returns the footer's dictionary and record batch blocks; b must have passed
// checkFooter.
func footerBlocks(b []byte) (dicts, batches []arrowBlock) {
	c := &fbCheck{b: b}
	footer, _ := c.root()
	read := func(slot int) []arrowBlock {
		start, n, _ := footer.vector(slot, 24)
		out := make([]arrowBlock, n)
		for i := range out {
			p := b[start+24*i:]
			out[i] = arrowBlock{int64(binary.LittleEndian.Uint64(p)), int32(binary.LittleEndian.Uint32(p[8:])), int64(binary.LittleEndian.Uint64(p[16:]))}
		}
		return out
	}
	return read(2), read(3)
}

// readFooter returns the footer flatbuffer of an Arrow file of size bytes whose end magic
// has been checked.
func readFooter(in io.ReaderAt, size int64) ([]byte, error) {
	var tail [4]byte
	pos := size - int64(len(arrowMagic)) - 4
	if _, err := in.ReadAt(tail[:], pos); err != nil {
		return nil, fmt.Errorf("byte offset %d: %w", pos, err)
	}
	n := int64(int32(binary.LittleEndian.Uint32(tail[:])))
	if n <= 0 || n > pos-8 {
		return nil, fmt.Errorf("byte offset %d: bad Arrow footer length %d", pos, n)
	}
	b := make([]byte, n)
	if _, err := in.ReadAt(b, pos-n); err != nil {
		return nil, fmt.Errorf("byte offset %d: %w", pos-n, err)
	}
	if err := checkFooter(b); err != nil {
		return nil, fmt.Errorf("byte offset %d: Arrow footer: %w", pos-n, err)
	}
	return b, nil
}

// checkBlockMessage reads and checks the metadata of the message in blk.
func checkBlockMessage(in io.ReaderAt, size int64, blk arrowBlock) error {
	if blk.offset < 0 || blk.metaLen < 8 || blk.offset > size || int64(blk.metaLen) > size-blk.offset {
		return fmt.Errorf("byte offset %d: message of %d bytes outside the file", blk.offset, blk.metaLen)
	}
	meta := make([]byte, blk.metaLen)
	if _, err := in.ReadAt(meta, blk.offset); err != nil {
		return fmt.Errorf("byte offset %d: %w", blk.offset, err)
	}
	fb := meta[4:]
	if binary.LittleEndian.Uint32(meta) == 0xFFFFFFFF { // continuation marker, then the length
		fb = meta[8:]
	}
	if err := checkMessage(fb); err != nil {
		return fmt.Errorf("byte offset %d: message: %w", blk.offset, err)
	}
	return nil
}
