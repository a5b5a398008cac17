package trace

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// pickleProto is the PROTO opcode that starts every pickle of protocol 2 or later.
const pickleProto = 0x80

// pickleArg is the kind of argument that follows a pickle opcode.
type pickleArg uint8

const (
	argNone   pickleArg = iota + 1
	argFixed1           // 1-byte argument
	argFixed2
	argFixed4
	argFixed8
	argLen1     // 1-byte length, then that many bytes
	argLen4     // 4-byte little-endian length, then that many bytes
	argLen8     // 8-byte little-endian length, then that many bytes
	argFrame    // 8-byte frame length; the frame's opcodes follow
	argLine     // one newline-terminated line
	argTwoLines // two newline-terminated lines
)

// pickleArgs gives the argument kind of every opcode of protocols 0 to 5.
var pickleArgs = func() (t [256]pickleArg) {
	for _, op := range []byte("(.012NRabdelostu})]\x85\x86\x87\x88\x89\x81\x92\x93\x94\x8f\x90\x91Q\x97\x98") {
		t[op] = argNone
	}
	for _, op := range []byte("Khq\x80\x82") {
		t[op] = argFixed1
	}
	for _, op := range []byte("M\x83") {
		t[op] = argFixed2
	}
	for _, op := range []byte("Jjr\x84") {
		t[op] = argFixed4
	}
	t['G'] = argFixed8
	for _, op := range []byte("UC\x8c\x8a") {
		t[op] = argLen1
	}
	for _, op := range []byte("TXB\x8b") {
		t[op] = argLen4
	}
	for _, op := range []byte("\x8d\x8e\x96") {
		t[op] = argLen8
	}
	t[0x95] = argFrame
	for _, op := range []byte("ILFSVPgp") {
		t[op] = argLine
	}
	for _, op := range []byte("ic") {
		t[op] = argTwoLines
	}
	return t
}()

// scanPickle walks the opcodes of a pickle up to STOP without building any object and checks
// that every length it announces stays within data. The pickle decoder allocates a length's
// worth of bytes before reading them, so this check keeps a corrupt length from exhausting
// memory. Errors give the byte offset of the bad opcode.
func scanPickle(data []byte) error {
	pos := 0
	for pos < len(data) {
		op := data[pos]
		kind := pickleArgs[op]
		if kind == 0 {
			return fmt.Errorf("byte offset %d: unknown pickle opcode 0x%02x", pos, op)
		}
		if op == '.' {
			return nil
		}
		next, err := skipPickleArg(data, pos+1, kind)
		if err != nil {
			return fmt.Errorf("byte offset %d: pickle opcode 0x%02x: %w", pos, op, err)
		}
		pos = next
	}
	return fmt.Errorf("byte offset %d: pickle truncated (no STOP opcode)", len(data))
}

// skipPickleArg returns the offset just past the argument of kind that starts at pos.
func skipPickleArg(data []byte, pos int, kind pickleArg) (int, error) {
	rest := uint64(len(data) - pos)
	need := func(n uint64) (int, error) {
		if n > rest {
			return 0, fmt.Errorf("needs %d bytes, %d left", n, rest)
		}
		return pos + int(n), nil
	}
	switch kind {
	case argNone:
		return pos, nil
	case argFixed1:
		return need(1)
	case argFixed2:
		return need(2)
	case argFixed4:
		return need(4)
	case argFixed8:
		return need(8)
	case argLen1:
		if _, err := need(1); err != nil {
			return 0, err
		}
		n := uint64(data[pos])
		pos++
		rest--
		return need(n)
	case argLen4:
		if _, err := need(4); err != nil {
			return 0, err
		}
		n := int32(binary.LittleEndian.Uint32(data[pos:]))
		if n < 0 {
			return 0, fmt.Errorf("negative length %d", n)
		}
		pos += 4
		rest -= 4
		return need(uint64(n))
	case argLen8, argFrame:
		if _, err := need(8); err != nil {
			return 0, err
		}
		n := binary.LittleEndian.Uint64(data[pos:])
		pos += 8
		rest -= 8
		if n > rest {
			return 0, fmt.Errorf("length %d exceeds the %d bytes left", n, rest)
		}
		if kind == argFrame {
			return pos, nil
		}
		return pos + int(n), nil
	case argLine, argTwoLines:
		lines := 1
		if kind == argTwoLines {
			lines = 2
		}
		for ; lines > 0; lines-- {
			nl := bytes.IndexByte(data[pos:], '\n')
			if nl < 0 {
				return 0, fmt.Errorf("line argument without newline")
			}
			pos += nl + 1
		}
		return pos, nil
	}
	return 0, fmt.Errorf("bad argument kind %d", kind)
}
