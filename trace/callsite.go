package trace

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"path"
	"slices"
	"strings"
)

// Frame is one frame of a stack: a Python frame (File ends in .py, Line set) or a C++ one.
type Frame struct {
	Function string
	File     string
	Line     int64
}

// Callsite is the code that made an event, where the trace knows it: the stack PyTorch recorded
// with the snapshot (innermost frame first) and a label for people.
type Callsite struct {
	Label  string
	Frames []Frame
}

// callsiteTag marks an Event.Callsite that names a recorded stack rather than a return address
// (user-space return addresses stay below 1<<63).
const callsiteTag = 1 << 63

// callsites interns the stacks of one trace, by the Event.Callsite value they get.
type callsites map[uint64]*Callsite

// callsiteSeed seeds the hash of stacks: Event.Callsite values of stacks hold within one process.
var callsiteSeed = maphash.MakeSeed()

// stackID is the Event.Callsite value of frames.
func stackID(frames []Frame) uint64 {
	var h maphash.Hash
	h.SetSeed(callsiteSeed)
	var line [8]byte
	for _, f := range frames {
		h.WriteString(f.Function)
		h.WriteByte(0)
		h.WriteString(f.File)
		binary.LittleEndian.PutUint64(line[:], uint64(f.Line))
		h.Write(line[:])
	}
	return h.Sum64() | callsiteTag
}

// intern returns the Event.Callsite of frames, keeping the stack (a copy of frames) the first time
// it is seen: the caller may reuse frames.
func (c callsites) intern(frames []Frame) uint64 {
	id := stackID(frames)
	if _, ok := c[id]; !ok {
		kept := slices.Clone(frames)
		c[id] = &Callsite{Label: callsiteLabel(kept), Frames: kept}
	}
	return id
}

// Callsite names the code behind an event's Callsite value in process pid: the stack a PyTorch
// snapshot recorded, or, for a return address in a trace with modules (Info.Modules), the function
// and (with debug information) the file and line, read from the module's ELF file on this machine.
// ok is false when nothing names it.
func (r *Reader) Callsite(pid uint32, id uint64) (Callsite, bool) {
	if c := r.callsites[id]; c != nil {
		return *c, true
	}
	if r.symbols == nil && len(r.info.Modules) > 0 {
		r.symbols = newSymbolizer(r.info.Modules)
	}
	if r.symbols != nil && id != 0 {
		if c := r.symbols.name(pid, id); c != nil {
			return *c, true
		}
	}
	return Callsite{}, false
}

// allocatorFrame reports whether f belongs to the allocator or the stack capture rather than to
// the code that asked for memory.
func allocatorFrame(f Frame) bool {
	for _, s := range []string{"CachingAllocator", "unwind", "CapturedTraceback", "gather_with_cpp",
		"_record_memory_history", "memory_snapshot"} {
		if strings.Contains(f.Function, s) || strings.Contains(f.File, s) {
			return true
		}
	}
	return false
}

// callsiteLabel names a stack for people: the innermost Python frame outside torch itself, else
// the innermost Python frame, else the innermost C++ frame past the allocator, templates and
// arguments dropped.
func callsiteLabel(frames []Frame) string {
	var py, torchPy, cpp *Frame
	for i := range frames {
		f := &frames[i]
		switch {
		case strings.HasSuffix(f.File, ".py") && !strings.Contains(f.File, "/torch/"):
			if py == nil {
				py = f
			}
		case strings.HasSuffix(f.File, ".py"):
			if torchPy == nil {
				torchPy = f
			}
		case cpp == nil && !allocatorFrame(*f) && f.Function != "":
			cpp = f
		}
	}
	switch {
	case py != nil:
		return fmt.Sprintf("%s (%s:%d)", py.Function, path.Base(py.File), py.Line)
	case torchPy != nil:
		return fmt.Sprintf("%s (%s:%d)", torchPy.Function, path.Base(torchPy.File), torchPy.Line)
	case cpp != nil:
		return shortFunction(cpp.Function)
	}
	return "?"
}

// shortFunction drops a C++ name's template arguments, parameters and return type.
func shortFunction(name string) string {
	name = withoutClones(name)
	var b strings.Builder
	depth := 0
	for _, r := range name {
		switch {
		case r == '<' || r == '(':
			depth++
		case r == '>' || r == ')':
			depth = max(depth-1, 0)
		case depth == 0:
			b.WriteRune(r)
		}
	}
	s := strings.TrimSpace(b.String())
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		s = s[i+1:]
	}
	return s
}
