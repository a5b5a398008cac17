package trace

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"

	"github.com/allocscope/allocscope/internal/buildid"
)

// Module is one executable mapping of a file in a recorded process (from /proc/PID/maps), which
// names the code at a callsite: the function, and the file and line where the file has debug
// information.
type Module struct {
	PID    uint32 `json:"pid"`
	Start  uint64 `json:"start"`
	End    uint64 `json:"end"`
	Offset uint64 `json:"offset"` // file offset of Start
	Path   string `json:"path"`
	// BuildID is the file's GNU build ID (hex) when it was recorded; analyze names nothing in a
	// file found at Path with another one (rebuilt since).
	BuildID string `json:"build_id,omitempty"`
}

// symbolizer names return addresses with the recorded modules and their ELF files, reading each
// file once. A file that is gone or unreadable names nothing.
type symbolizer struct {
	mu      sync.Mutex
	modules map[uint32][]Module // by pid, sorted by Start
	files   map[string]*elfInfo // by path; nil when unreadable
	names   map[[2]uint64]*Callsite
	// Why callsites got no function name, each callsite counted once: by the path of its module,
	// that file missing, rebuilt since the recording or without symbols; outside is the callsites
	// in no recorded module.
	missing, rebuilt, stripped map[string]int
	outside                    int
}

// elfInfo is what naming needs of one ELF file.
type elfInfo struct {
	buildID string
	loads   []elf.ProgHeader // PT_LOAD headers
	syms    []elf.Symbol     // functions, by address
	dw      *dwarf.Data      // nil without debug information
}

func newSymbolizer(mods []Module) *symbolizer {
	s := &symbolizer{modules: map[uint32][]Module{}, files: map[string]*elfInfo{}, names: map[[2]uint64]*Callsite{},
		missing: map[string]int{}, rebuilt: map[string]int{}, stripped: map[string]int{}}
	for _, m := range mods {
		s.modules[m.PID] = append(s.modules[m.PID], m)
	}
	for _, ms := range s.modules {
		slices.SortFunc(ms, func(a, b Module) int { return cmp.Compare(a.Start, b.Start) })
	}
	return s
}

// name returns the callsite of a return address in process pid, or nil.
func (s *symbolizer) name(pid uint32, addr uint64) *Callsite {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [2]uint64{uint64(pid), addr}
	if c, ok := s.names[key]; ok {
		return c
	}
	var c *Callsite
	ms := s.modules[pid]
	if i, _ := slices.BinarySearchFunc(ms, addr+1, func(m Module, a uint64) int { return cmp.Compare(m.Start, a) }); i > 0 {
		if m := ms[i-1]; addr < m.End {
			c = s.inModule(m, addr-m.Start+m.Offset)
		} else {
			s.outside++
		}
	} else {
		s.outside++
	}
	s.names[key] = c
	return c
}

// inModule names the code at file offset off of m's file.
func (s *symbolizer) inModule(m Module, off uint64) *Callsite {
	f, ok := s.files[m.Path]
	if !ok {
		f = readELF(m.Path)
		s.files[m.Path] = f
	}
	if f == nil {
		s.missing[m.Path]++
		return nil
	}
	if m.BuildID != "" && f.buildID != m.BuildID { // rebuilt since the recording: its names would lie
		s.rebuilt[m.Path]++
		return &Callsite{Label: fmt.Sprintf("%s+%#x (rebuilt since)", filepath.Base(m.Path), off),
			Frames: []Frame{{File: filepath.Base(m.Path)}}}
	}
	pc, ok := f.vaddr(off)
	if !ok {
		return nil
	}
	pc-- // a return address: the call is the instruction before it
	fr := Frame{File: filepath.Base(m.Path)}
	var into uint64 // the return address's offset into its function
	if i, _ := slices.BinarySearchFunc(f.syms, pc+1, func(sym elf.Symbol, a uint64) int { return cmp.Compare(sym.Value, a) }); i > 0 {
		if sym := f.syms[i-1]; pc < sym.Value+max(sym.Size, 1) {
			fr.Function, into = cloneBase(sym.Name), pc+1-sym.Value
		}
	}
	label := fmt.Sprintf("%s+%#x (%s)", fr.Function, into, fr.File)
	if file, line, ok := f.line(pc); ok {
		fr.File, fr.Line = file, int64(line)
		label = fmt.Sprintf("%s (%s:%d)", fr.Function, filepath.Base(file), line)
	} else if fr.Function == "" {
		label = fmt.Sprintf("%s+%#x", fr.File, off)
		s.stripped[m.Path]++
	}
	return &Callsite{Label: label, Frames: []Frame{fr}}
}

func readELF(path string) *elfInfo {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	info := &elfInfo{buildID: buildid.OfFile(f)}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			info.loads = append(info.loads, p.ProgHeader)
		}
	}
	syms, _ := f.Symbols()
	dyn, _ := f.DynamicSymbols()
	for _, sym := range append(syms, dyn...) {
		if elf.ST_TYPE(sym.Info) == elf.STT_FUNC && sym.Value != 0 {
			info.syms = append(info.syms, sym)
		}
	}
	slices.SortFunc(info.syms, func(a, b elf.Symbol) int { return cmp.Compare(a.Value, b.Value) })
	info.dw, _ = f.DWARF()
	return info
}

// vaddr turns a file offset into the address the file's code was linked at.
func (f *elfInfo) vaddr(off uint64) (uint64, bool) {
	for _, p := range f.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// line returns the source file and line of pc, from the file's debug information.
func (f *elfInfo) line(pc uint64) (string, int, bool) {
	if f.dw == nil {
		return "", 0, false
	}
	r := f.dw.Reader()
	cu, err := r.SeekPC(pc)
	if err != nil || cu == nil {
		return "", 0, false
	}
	lr, err := f.dw.LineReader(cu)
	if err != nil || lr == nil {
		return "", 0, false
	}
	var e dwarf.LineEntry
	if err := lr.SeekPC(pc, &e); err != nil || e.File == nil {
		return "", 0, false
	}
	return e.File.Name, e.Line, true
}

// cloneBase drops the suffix a compiler gives a specialised copy of a function
// ("leak.isra.0", "f.constprop.3", "g.part.1", "h.cold"): people know it by its name. A C++ name
// is demangled, without its parameters ("c10::cuda::CUDACachingAllocator::malloc").
func cloneBase(name string) string {
	if strings.HasPrefix(name, "_Z") {
		name = demangle.Filter(name, demangle.NoParams, demangle.NoTemplateParams)
	}
	name = withoutClones(name)
	for _, marker := range []string{".isra.", ".constprop.", ".part.", ".lto_priv.", ".cold"} {
		if i := strings.Index(name, marker); i > 0 {
			name = name[:i]
		}
	}
	return name
}

// withoutClones drops the clone notes that a demangler writes after a specialised copy's name
// ("at::foo(int) [clone .isra.0] [clone .cold]" is "at::foo(int)"), which would otherwise cut the
// name at their space.
func withoutClones(name string) string {
	for {
		trimmed := strings.TrimRight(name, " ")
		i := strings.LastIndex(trimmed, " [clone ")
		if i < 0 || !strings.HasSuffix(trimmed, "]") {
			return trimmed
		}
		name = trimmed[:i]
	}
}

// CallsiteProblem says in one line why callsites of the trace have no function name, and what to
// do about it: "" when every callsite Callsite was asked for so far was named. unnamed is the
// number of callsites for which Callsite returned false, which only the caller knows of a trace
// without modules.
func (r *Reader) CallsiteProblem(unnamed int) string {
	if r.symbols == nil {
		if unnamed == 0 {
			return ""
		}
		return fmt.Sprintf("%d callsites are bare return addresses: the trace has no module map (an older record "+
			"wrote it); record the program again with a current record, which writes one, to name them", unnamed)
	}
	return r.symbols.problem()
}

// problem says why callsites got no function name, most callsites first; "" when all got one.
func (s *symbolizer) problem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, why := range []struct {
		files map[string]int
		what  string
	}{{s.missing, "not on this machine: run analyze where the program was recorded"},
		{s.rebuilt, "rebuilt since the recording: run analyze on the recorded build"},
		{s.stripped, "without symbols: install its debug symbols, or build it with -g and without -s"}} {
		if n, files := fileCounts(why.files); n > 0 {
			parts = append(parts, fmt.Sprintf("%d in %s, %s", n, files, why.what))
		}
	}
	if s.outside > 0 {
		parts = append(parts, fmt.Sprintf("%d outside the recorded modules (JIT-compiled or unloaded code)", s.outside))
	}
	if len(parts) == 0 {
		return ""
	}
	return "callsites without a function name: " + strings.Join(parts, "; ")
}

// fileCounts sums the callsites of files and names the file with the most ("libx.so", or
// "libx.so and 2 more files").
func fileCounts(files map[string]int) (int, string) {
	n, top := 0, ""
	for path, k := range files {
		n += k
		if top == "" || k > files[top] || (k == files[top] && path < top) {
			top = path
		}
	}
	if len(files) > 1 {
		return n, fmt.Sprintf("%s and %d more files", top, len(files)-1)
	}
	return n, top
}
