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
	var (
		stack    = make([]any, 0, 64)
		marks    = make([]int, 0, 16)
		memo     = make([]any, 0, max(min(memos, len(data)), 16))
		shared   = map[string]types.List{} // list storage by its dicts' addresses
		key      []byte
		pos      = 0
		frameEnd = -1 // end of the current frame, -1 when outside one
	)
	// arg returns the n bytes after the opcode at pos, checking the frame boundary.
	arg := func(n int) ([]byte, bool) {
		start := pos + 1
		end := start + n
		if n < 0 || end > len(data) || end < start {
			return nil, false
		}
		if frameEnd >= 0 && pos < frameEnd && end > frameEnd {
			return nil, false // gopickle: "pickle exhausted before end of frame"
		}
		return data[start:end], true
	}
	popMark := func() ([]any, bool) {
		if len(marks) == 0 {
			return nil, false
		}
		m := marks[len(marks)-1]
		marks = marks[:len(marks)-1]
		items := stack[m:]
		stack = stack[:m]
		return items, true
	}
	// top is the index in stack of the first item above the innermost mark.
	base := func() int {
		if len(marks) == 0 {
			return 0
		}
		return marks[len(marks)-1]
	}
	for pos < len(data) {
		if frameEnd >= 0 && pos >= frameEnd {
			frameEnd = -1
		}
		op := data[pos]
		next := pos + 1
		switch op {
		case 0x80: // PROTO
			b, ok := arg(1)
			if !ok || b[0] > 5 {
				return nil, false
			}
			next += 1
		case 0x95: // FRAME
			b, ok := arg(8)
			if !ok || frameEnd >= 0 {
				return nil, false
			}
			n := binary.LittleEndian.Uint64(b)
			next += 8
			if n > uint64(len(data)-next) {
				return nil, false
			}
			frameEnd = next + int(n)
		case '.': // STOP
			if len(stack) <= base() {
				return nil, false
			}
			return stack[len(stack)-1], true
		case '(': // MARK
			marks = append(marks, len(stack))
		case '}': // EMPTY_DICT
			d := types.Dict{} // SETITEMS sizes it
			stack = append(stack, &d)
		case ']': // EMPTY_LIST
			l := types.List{}
			stack = append(stack, &l)
		case ')': // EMPTY_TUPLE
			stack = append(stack, types.NewTupleFromSlice([]any{}))
		case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
			n := int(op-0x85) + 1
			if len(stack)-base() < n {
				return nil, false
			}
			items := make([]any, n)
			copy(items, stack[len(stack)-n:])
			stack = stack[:len(stack)-n]
			stack = append(stack, types.NewTupleFromSlice(items))
		case 't', 'l', 'd': // TUPLE, LIST, DICT
			items, ok := popMark()
			if !ok {
				return nil, false
			}
			switch op {
			case 't':
				stack = append(stack, types.NewTupleFromSlice(append([]any{}, items...)))
			case 'l':
				stack = append(stack, types.NewListFromSlice(append([]any{}, items...)))
			case 'd':
				if len(items)%2 != 0 {
					return nil, false
				}
				d := make(types.Dict, 0, max(len(items)/2, 4))
				for i := 0; i < len(items); i += 2 {
					d = append(d, types.DictEntry{Key: items[i], Value: items[i+1]})
				}
				stack = append(stack, &d)
			}
		case 'a': // APPEND
			if len(stack)-base() < 2 {
				return nil, false
			}
			l, ok := stack[len(stack)-2].(*types.List)
			if !ok {
				return nil, false
			}
			*l = append(*l, stack[len(stack)-1])
			stack = stack[:len(stack)-1]
		case 'e': // APPENDS
			items, ok := popMark()
			if !ok || len(stack) <= base() {
				return nil, false
			}
			l, ok := stack[len(stack)-1].(*types.List)
			if !ok {
				return nil, false
			}
			if len(*l) == 0 && len(items) > 0 && len(items) <= maxSharedList {
				if key, ok = dictsKey(key[:0], items); ok {
					if s, found := shared[string(key)]; found {
						*l = s
						break
					}
					s := make(types.List, len(items))
					copy(s, items)
					shared[string(key)] = s
					*l = s
					break
				}
			}
			if len(*l) == 0 && cap(*l) < len(items) {
				*l = make(types.List, 0, len(items)) // most lists come in one APPENDS
			}
			*l = append(*l, items...)
		case 's': // SETITEM
			if len(stack)-base() < 3 {
				return nil, false
			}
			d, ok := stack[len(stack)-3].(*types.Dict)
			if !ok {
				return nil, false
			}
			*d = append(*d, types.DictEntry{Key: stack[len(stack)-2], Value: stack[len(stack)-1]})
			stack = stack[:len(stack)-2]
		case 'u': // SETITEMS
			items, ok := popMark()
			if !ok || len(stack) <= base() || len(items)%2 != 0 {
				return nil, false
			}
			d, ok := stack[len(stack)-1].(*types.Dict)
			if !ok {
				return nil, false
			}
			if len(*d) == 0 && cap(*d) < len(items)/2 {
				*d = make(types.Dict, 0, len(items)/2) // most dicts come in one SETITEMS
			}
			for i := 0; i < len(items); i += 2 {
				*d = append(*d, types.DictEntry{Key: items[i], Value: items[i+1]})
			}
		case 'N':
			stack = append(stack, nil)
		case 0x88:
			stack = append(stack, true)
		case 0x89:
			stack = append(stack, false)
		case 'J': // BININT
			b, ok := arg(4)
			if !ok {
				return nil, false
			}
			stack = append(stack, int(int32(binary.LittleEndian.Uint32(b))))
			next += 4
		case 'K': // BININT1
			b, ok := arg(1)
			if !ok {
				return nil, false
			}
			stack = append(stack, int(b[0]))
			next += 1
		case 'M': // BININT2
			b, ok := arg(2)
			if !ok {
				return nil, false
			}
			stack = append(stack, int(binary.LittleEndian.Uint16(b)))
			next += 2
		case 0x8a: // LONG1
			b, ok := arg(1)
			if !ok {
				return nil, false
			}
			n := int(b[0])
			if n == 0 || n > 8 {
				return nil, false
			}
			next += 1
			pos++ // arg reads after pos+1
			b, ok = arg(n)
			pos--
			if !ok {
				return nil, false
			}
			next += n
			var ux, mask uint64
			for i := n - 1; i >= 0; i-- {
				ux = ux<<8 | uint64(b[i])
				mask = mask<<8 | 0xff
			}
			if b[n-1]&0x80 != 0 {
				stack = append(stack, -(int(^ux&mask) + 1))
			} else {
				stack = append(stack, int(ux))
			}
		case 'G': // BINFLOAT
			b, ok := arg(8)
			if !ok {
				return nil, false
			}
			stack = append(stack, math.Float64frombits(binary.BigEndian.Uint64(b)))
			next += 8
		case 0x8c, 'X', 0x8d: // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
			width := 1
			switch op {
			case 'X':
				width = 4
			case 0x8d:
				width = 8
			}
			b, ok := arg(width)
			if !ok {
				return nil, false
			}
			var n uint64
			switch width {
			case 1:
				n = uint64(b[0])
			case 4:
				n = uint64(binary.LittleEndian.Uint32(b))
			case 8:
				n = binary.LittleEndian.Uint64(b)
			}
			if n > uint64(len(data)) {
				return nil, false
			}
			next += width
			pos += width
			b, ok = arg(int(n))
			pos -= width
			if !ok {
				return nil, false
			}
			stack = append(stack, string(b))
			next += int(n)
		case 0x94: // MEMOIZE
			if len(stack) <= base() {
				return nil, false
			}
			memo = append(memo, stack[len(stack)-1])
		case 'q', 'r': // BINPUT, LONG_BINPUT
			width := 1
			if op == 'r' {
				width = 4
			}
			b, ok := arg(width)
			if !ok || len(stack) <= base() {
				return nil, false
			}
			i := int(b[0])
			if width == 4 {
				i = int(binary.LittleEndian.Uint32(b))
			}
			next += width
			switch {
			case i < len(memo):
				memo[i] = stack[len(stack)-1]
			case i == len(memo):
				memo = append(memo, stack[len(stack)-1])
			default:
				return nil, false // a gap: gopickle's map memo would count differently
			}
		case 'h', 'j': // BINGET, LONG_BINGET
			width := 1
			if op == 'j' {
				width = 4
			}
			b, ok := arg(width)
			if !ok {
				return nil, false
			}
			i := int(b[0])
			if width == 4 {
				i = int(binary.LittleEndian.Uint32(b))
			}
			if i >= len(memo) {
				return nil, false
			}
			stack = append(stack, memo[i])
			next += width
		case '0': // POP
			if len(stack) <= base() {
				return nil, false
			}
			stack = stack[:len(stack)-1]
		case '1': // POP_MARK
			if _, ok := popMark(); !ok {
				return nil, false
			}
		case '2': // DUP
			if len(stack) <= base() {
				return nil, false
			}
			stack = append(stack, stack[len(stack)-1])
		default:
			return nil, false
		}
		pos = next
	}
	return nil, false
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
