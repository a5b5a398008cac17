// Package buildid reads the GNU build ID of an ELF file: record notes it beside each recorded
// module (trace.Module.BuildID), and package trace checks it before naming code from a file found
// on the machine that analyzes the trace.
package buildid

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io"
)

// Of returns the GNU build ID (hex) of the ELF file at path: "" when the file cannot be read or
// has none.
func Of(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return OfFile(f)
}

// OfFile returns the GNU build ID (hex) of f, read from its NT_GNU_BUILD_ID note; "" when it has
// none.
func OfFile(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(p.Open(), 1<<16))
		if err != nil {
			continue
		}
		if id := gnuBuildIDNote(data, f.ByteOrder, p.Align); id != "" {
			return id
		}
	}
	return ""
}

// gnuBuildIDNote finds the "GNU" note of type 3 (NT_GNU_BUILD_ID) among the notes in data.
func gnuBuildIDNote(data []byte, order binary.ByteOrder, align uint64) string {
	a := uint64(4) // notes are padded to 4 bytes, or to 8 in a segment aligned to 8
	if align == 8 {
		a = 8
	}
	pad := func(n uint64) uint64 {
		if n > 1<<32 {
			return 1 << 62 // past any data: the caller stops
		}
		return (n + a - 1) &^ (a - 1)
	}
	for len(data) >= 12 {
		nameSize, descSize, typ := uint64(order.Uint32(data)), uint64(order.Uint32(data[4:])), order.Uint32(data[8:])
		nameEnd := 12 + pad(nameSize)
		descEnd := nameEnd + pad(descSize)
		if nameEnd > uint64(len(data)) || nameEnd+descSize > uint64(len(data)) {
			return ""
		}
		if typ == 3 && nameSize == 4 && len(data) >= 16 && string(data[12:15]) == "GNU" {
			return hex.EncodeToString(data[nameEnd : nameEnd+descSize])
		}
		if descEnd >= uint64(len(data)) {
			return ""
		}
		data = data[descEnd:]
	}
	return ""
}
