package trace

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/nlpodyssey/gopickle/types"
)

// fastUnpickle decodes the pickle in data into the same values as gopickle's Unpickler
// (*types.Dict, *types.List, *types.Tuple, string, int, float64, bool, nil), for the opcodes
// that Python's pickler emits for plain containers and scalars (protocols 2 to 5). It works on
// the bytes in place, keeps the memo in a slice and allocates little per object. ok is false
// for anything it does not handle exactly as gopickle would (other opcodes, malformed
// structure, memo gaps, data straddling a frame): the caller then decodes with gopickle, which
// gives the same value or the same error as before.
//
// memos sizes the memo at first. Lists built by one APPENDS of dicts only (the
// "frames" of trace entries, made of memoized frame dicts) share their storage with an earlier
// list of the same dicts; the storage is never written in place and its capacity is its length,
// so a later APPEND to either list copies it first.
func fastUnpickle(data []byte, memos int) (root any, ok bool) {
	defer func() {
		if recover() != nil {
			root, ok = nil, false
		}
	}()
	u := unpickler{data: data, frameEnd: -1, stack: make([]any, 0, 64), marks: make([]int, 0, 16),
		memo: make([]any, 0, max(min(memos, len(data)), 16)), shared: map[string]types.List{}}
	for u.pos < len(data) {
		if u.frameEnd >= 0 && u.pos >= u.frameEnd {
			u.frameEnd = -1
		}
		op := data[u.pos]
		u.next = u.pos + 1
		if !u.step(op) {
			return nil, false
		}
		if u.stopped {
			return u.root, true
		}
		u.pos = u.next
	}
	return nil, false
}

// unpickler is fastUnpickle's state: the pickle, where it is in it, and its pickle machine's stack,
// marks and memo.
type unpickler struct {
	data     []byte
	pos      int // the opcode being decoded
	next     int // the byte after the opcode's arguments read so far
	frameEnd int // end of the current frame, -1 when outside one
	stack    []any
	marks    []int
	memo     []any
	shared   map[string]types.List // list storage by its dicts' addresses (see fastUnpickle)
	key      []byte                // dictsKey's buffer
	root     any                   // the value STOP returned
	stopped  bool                  // STOP came
}

// step decodes the opcode op at u.pos and its arguments, by its family's handler; it returns false
// for what fastUnpickle does not handle as gopickle would.
func (u *unpickler) step(op byte) bool {
	switch op {
	case 0x80:
		return u.proto(op)
	case 0x95:
		return u.frame(op)
	case '.':
		return u.stop(op)
	case '(':
		return u.mark(op)
	case '0':
		return u.pop(op)
	case '1':
		return u.popMarkOp(op)
	case '2':
		return u.dup(op)
	case '}', ']', ')': // EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE
		return u.empty(op)
	case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
		return u.tupleN(op)
	case 't', 'l', 'd': // TUPLE, LIST, DICT
		return u.fromMark(op)
	case 'a':
		return u.appendOne(op)
	case 'e':
		return u.appends(op)
	case 's':
		return u.setItem(op)
	case 'u':
		return u.setItems(op)
	case 'N', 0x88, 0x89: // NONE, NEWTRUE, NEWFALSE
		return u.constant(op)
	case 'J', 'K', 'M': // BININT, BININT1, BININT2
		return u.binInt(op)
	case 0x8a:
		return u.long1(op)
	case 'G':
		return u.binFloat(op)
	case 0x8c, 'X', 0x8d: // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
		return u.unicode(op)
	case 0x94:
		return u.memoize(op)
	case 'q', 'r': // BINPUT, LONG_BINPUT
		return u.put(op)
	case 'h', 'j': // BINGET, LONG_BINGET
		return u.get(op)
	}
	return false
}

// take returns the n bytes at u.next and moves u.next past them; ok is false when they run past
// the data or straddle the end of the current frame (gopickle: "pickle exhausted before end of
// frame").
func (u *unpickler) take(n int) (b []byte, ok bool) {
	start := u.next
	end := start + n
	if n < 0 || end > len(u.data) || end < start {
		return nil, false
	}
	if u.frameEnd >= 0 && u.pos < u.frameEnd && end > u.frameEnd {
		return nil, false
	}
	u.next = end
	return u.data[start:end], true
}

// takeUint returns the little-endian unsigned integer of width bytes (1, 2, 4 or 8) at u.next.
func (u *unpickler) takeUint(width int) (uint64, bool) {
	b, ok := u.take(width)
	if !ok {
		return 0, false
	}
	switch width {
	case 1:
		return uint64(b[0]), true
	case 2:
		return uint64(binary.LittleEndian.Uint16(b)), true
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), true
	}
	return binary.LittleEndian.Uint64(b), true
}

// base is the index in the stack of the first item above the innermost mark.
func (u *unpickler) base() int {
	if len(u.marks) == 0 {
		return 0
	}
	return u.marks[len(u.marks)-1]
}

// above reports whether the stack holds at least n items above the innermost mark.
func (u *unpickler) above(n int) bool { return len(u.stack)-u.base() >= n }

// top is the item on top of the stack.
func (u *unpickler) top() any { return u.stack[len(u.stack)-1] }

// push puts v on the stack.
func (u *unpickler) push(v any) bool {
	u.stack = append(u.stack, v)
	return true
}

// popMark removes the innermost mark and returns the items above it, which it takes off the stack
// (the slice stays valid until the next push).
func (u *unpickler) popMark() ([]any, bool) {
	if len(u.marks) == 0 {
		return nil, false
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := u.stack[m:]
	u.stack = u.stack[:m]
	return items, true
}

// proto decodes PROTO: protocols up to 5.
func (u *unpickler) proto(byte) bool {
	b, ok := u.take(1)
	return ok && b[0] <= 5
}

// frame decodes FRAME: the frame's length, which must fit in the data; frames do not nest.
func (u *unpickler) frame(byte) bool {
	if u.frameEnd >= 0 {
		return false
	}
	n, ok := u.takeUint(8)
	if !ok || n > uint64(len(u.data)-u.next) {
		return false
	}
	u.frameEnd = u.next + int(n)
	return true
}

// stop decodes STOP: the value on top of the stack is the pickle's.
func (u *unpickler) stop(byte) bool {
	if !u.above(1) {
		return false
	}
	u.root, u.stopped = u.top(), true
	return true
}

// mark decodes MARK.
func (u *unpickler) mark(byte) bool {
	u.marks = append(u.marks, len(u.stack))
	return true
}

// pop decodes POP.
func (u *unpickler) pop(byte) bool {
	if !u.above(1) {
		return false
	}
	u.stack = u.stack[:len(u.stack)-1]
	return true
}

// popMarkOp decodes POP_MARK.
func (u *unpickler) popMarkOp(byte) bool {
	_, ok := u.popMark()
	return ok
}

// dup decodes DUP.
func (u *unpickler) dup(byte) bool {
	if !u.above(1) {
		return false
	}
	return u.push(u.top())
}

// empty decodes EMPTY_DICT, EMPTY_LIST and EMPTY_TUPLE. A dict is sized by the SETITEMS that fills it.
func (u *unpickler) empty(op byte) bool {
	switch op {
	case '}':
		d := types.Dict{}
		return u.push(&d)
	case ']':
		l := types.List{}
		return u.push(&l)
	}
	return u.push(types.NewTupleFromSlice([]any{}))
}

// tupleN decodes TUPLE1, TUPLE2 and TUPLE3.
func (u *unpickler) tupleN(op byte) bool {
	n := int(op-0x85) + 1
	if !u.above(n) {
		return false
	}
	items := make([]any, n)
	copy(items, u.stack[len(u.stack)-n:])
	u.stack = u.stack[:len(u.stack)-n]
	return u.push(types.NewTupleFromSlice(items))
}

// fromMark decodes TUPLE, LIST and DICT: a container of the items above the innermost mark.
func (u *unpickler) fromMark(op byte) bool {
	items, ok := u.popMark()
	if !ok {
		return false
	}
	switch op {
	case 't':
		return u.push(types.NewTupleFromSlice(append([]any{}, items...)))
	case 'l':
		return u.push(types.NewListFromSlice(append([]any{}, items...)))
	}
	if len(items)%2 != 0 {
		return false
	}
	d := make(types.Dict, 0, max(len(items)/2, 4))
	for i := 0; i < len(items); i += 2 {
		d = append(d, types.DictEntry{Key: items[i], Value: items[i+1]})
	}
	return u.push(&d)
}

// appendOne decodes APPEND: the top item appended to the list below it.
func (u *unpickler) appendOne(byte) bool {
	if !u.above(2) {
		return false
	}
	l, ok := u.stack[len(u.stack)-2].(*types.List)
	if !ok {
		return false
	}
	*l = append(*l, u.top())
	u.stack = u.stack[:len(u.stack)-1]
	return true
}

// appends decodes APPENDS: the items above the innermost mark appended to the list below it.
func (u *unpickler) appends(byte) bool {
	items, ok := u.popMark()
	if !ok || !u.above(1) {
		return false
	}
	l, ok := u.top().(*types.List)
	if !ok {
		return false
	}
	if len(*l) == 0 && len(items) > 0 && len(items) <= maxSharedList && u.share(l, items) {
		return true
	}
	if len(*l) == 0 && cap(*l) < len(items) {
		*l = make(types.List, 0, len(items)) // most lists come in one APPENDS
	}
	*l = append(*l, items...)
	return true
}

// share makes the empty list l hold items, dicts only, in storage shared with every list of the
// same dicts (see fastUnpickle); it returns false, changing nothing, when items are not all dicts.
func (u *unpickler) share(l *types.List, items []any) bool {
	key, ok := dictsKey(u.key[:0], items)
	u.key = key
	if !ok {
		return false
	}
	if s, found := u.shared[string(key)]; found {
		*l = s
		return true
	}
	s := make(types.List, len(items))
	copy(s, items)
	u.shared[string(key)] = s
	*l = s
	return true
}

// setItem decodes SETITEM: the top two items, a key and its value, added to the dict below them.
func (u *unpickler) setItem(byte) bool {
	if !u.above(3) {
		return false
	}
	d, ok := u.stack[len(u.stack)-3].(*types.Dict)
	if !ok {
		return false
	}
	*d = append(*d, types.DictEntry{Key: u.stack[len(u.stack)-2], Value: u.top()})
	u.stack = u.stack[:len(u.stack)-2]
	return true
}

// setItems decodes SETITEMS: the key and value pairs above the innermost mark added to the dict
// below it.
func (u *unpickler) setItems(byte) bool {
	items, ok := u.popMark()
	if !ok || !u.above(1) || len(items)%2 != 0 {
		return false
	}
	d, ok := u.top().(*types.Dict)
	if !ok {
		return false
	}
	if len(*d) == 0 && cap(*d) < len(items)/2 {
		*d = make(types.Dict, 0, len(items)/2) // most dicts come in one SETITEMS
	}
	for i := 0; i < len(items); i += 2 {
		*d = append(*d, types.DictEntry{Key: items[i], Value: items[i+1]})
	}
	return true
}

// constant decodes NONE, NEWTRUE and NEWFALSE.
func (u *unpickler) constant(op byte) bool {
	switch op {
	case 'N':
		return u.push(nil)
	case 0x88:
		return u.push(true)
	}
	return u.push(false)
}

// binInt decodes BININT (signed, 4 bytes), BININT1 and BININT2 (unsigned, 1 and 2 bytes).
func (u *unpickler) binInt(op byte) bool {
	switch op {
	case 'K':
		b, ok := u.take(1)
		return ok && u.push(int(b[0]))
	case 'M':
		b, ok := u.take(2)
		return ok && u.push(int(binary.LittleEndian.Uint16(b)))
	}
	b, ok := u.take(4)
	return ok && u.push(int(int32(binary.LittleEndian.Uint32(b))))
}

// long1 decodes LONG1 of 1 to 8 bytes: a little-endian two's complement integer.
func (u *unpickler) long1(byte) bool {
	n, ok := u.takeUint(1)
	if !ok || n == 0 || n > 8 {
		return false
	}
	b, ok := u.take(int(n))
	if !ok {
		return false
	}
	var ux, mask uint64
	for i := len(b) - 1; i >= 0; i-- {
		ux = ux<<8 | uint64(b[i])
		mask = mask<<8 | 0xff
	}
	if b[len(b)-1]&0x80 != 0 {
		return u.push(-(int(^ux&mask) + 1))
	}
	return u.push(int(ux))
}

// binFloat decodes BINFLOAT: a big-endian float64.
func (u *unpickler) binFloat(byte) bool {
	b, ok := u.take(8)
	if !ok {
		return false
	}
	return u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
}

// unicode decodes SHORT_BINUNICODE, BINUNICODE and BINUNICODE8: a string after its length of 1,
// 4 and 8 bytes.
func (u *unpickler) unicode(op byte) bool {
	width := 1
	switch op {
	case 'X':
		width = 4
	case 0x8d:
		width = 8
	}
	n, ok := u.takeUint(width)
	if !ok || n > uint64(len(u.data)) {
		return false
	}
	b, ok := u.take(int(n))
	if !ok {
		return false
	}
	return u.push(string(b))
}

// memoize decodes MEMOIZE: the top item is the memo's next.
func (u *unpickler) memoize(byte) bool {
	if !u.above(1) {
		return false
	}
	u.memo = append(u.memo, u.top())
	return true
}

// put decodes BINPUT and LONG_BINPUT: the top item stored at an index of the memo, which must be
// one already used or the next (a gap would make gopickle's map memo count differently).
func (u *unpickler) put(op byte) bool {
	i, ok := u.memoIndex(op == 'r')
	if !ok || !u.above(1) {
		return false
	}
	switch {
	case i < uint64(len(u.memo)):
		u.memo[i] = u.top()
	case i == uint64(len(u.memo)):
		u.memo = append(u.memo, u.top())
	default:
		return false
	}
	return true
}

// get decodes BINGET and LONG_BINGET: the memo's item at an index pushed.
func (u *unpickler) get(op byte) bool {
	i, ok := u.memoIndex(op == 'j')
	if !ok || i >= uint64(len(u.memo)) {
		return false
	}
	return u.push(u.memo[i])
}

// memoIndex reads a memo index of 4 bytes when long, else of 1.
func (u *unpickler) memoIndex(long bool) (uint64, bool) {
	width := 1
	if long {
		width = 4
	}
	b, ok := u.take(width)
	if !ok {
		return 0, false
	}
	if long {
		return uint64(binary.LittleEndian.Uint32(b)), true
	}
	return uint64(b[0]), true
}

// maxSharedList bounds the lists whose storage fastUnpickle shares.
const maxSharedList = 512

// dictsKey appends the addresses of items to key; ok is false unless all items are dicts.
func dictsKey(key []byte, items []any) ([]byte, bool) {
	for _, it := range items {
		d, ok := it.(*types.Dict)
		if !ok {
			return key, false
		}
		key = binary.LittleEndian.AppendUint64(key, uint64(uintptr(unsafe.Pointer(d))))
	}
	return key, true
}
