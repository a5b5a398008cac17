package intercept

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
)

// ShimABISymbol is the dynamic symbol every shim of this raw-log format exports. CheckShim refuses
// a library without it: one built from another allocscope version would write logs this reader
// cannot merge, and a library that is no shim at all would record nothing.
const ShimABISymbol = "allocscope_shim_abi_2"

// hostArch is the ELF machine and class of libraries this process's architecture can load.
// It is the zero Machine for an architecture CheckShim does not know, which then skips that check.
var hostArch = map[string]struct {
	machine elf.Machine
	class   elf.Class
}{
	"amd64":   {elf.EM_X86_64, elf.ELFCLASS64},
	"arm64":   {elf.EM_AARCH64, elf.ELFCLASS64},
	"386":     {elf.EM_386, elf.ELFCLASS32},
	"arm":     {elf.EM_ARM, elf.ELFCLASS32},
	"riscv64": {elf.EM_RISCV, elf.ELFCLASS64},
	"ppc64le": {elf.EM_PPC64, elf.ELFCLASS64},
	"s390x":   {elf.EM_S390, elf.ELFCLASS64},
	"loong64": {elf.EM_LOONGARCH, elf.ELFCLASS64},
}[runtime.GOARCH]

// CheckShim reports whether path is a shim this version of allocscope can preload and read: an ELF
// shared object of this machine's architecture whose dynamic symbol table defines ShimABISymbol.
// ld.so silently ignores a preloaded library it cannot use, so without this check a wrong file
// would give an empty trace. Each error is one line that starts with "shim PATH".
func CheckShim(path string) error {
	f, err := os.Open(path)
	if err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err
		}
		return fmt.Errorf("shim %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("shim %s: not an allocscope shim: a directory", path)
	}
	magic := make([]byte, len(elf.ELFMAG))
	if _, err := io.ReadFull(f, magic); err != nil || !bytes.Equal(magic, []byte(elf.ELFMAG)) {
		return fmt.Errorf("shim %s: not an allocscope shim: not an ELF file", path)
	}
	ef, err := elf.NewFile(f)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("shim %s: not an allocscope shim: truncated ELF file", path)
	}
	if err != nil {
		return fmt.Errorf("shim %s: not an allocscope shim: malformed ELF file: %w", path, err)
	}
	defer ef.Close()
	if ef.Type != elf.ET_DYN {
		return fmt.Errorf("shim %s: not an allocscope shim: not a shared library (ELF type %v)", path, ef.Type)
	}
	if hostArch.machine != 0 && (ef.Machine != hostArch.machine || ef.Class != hostArch.class) {
		return fmt.Errorf("shim %s is for %s, this machine is %s", path,
			archName(ef.Machine, ef.Class), archName(hostArch.machine, hostArch.class))
	}
	return checkABISymbol(path, ef)
}

// checkABISymbol fails unless the dynamic symbol table of ef defines ShimABISymbol.
func checkABISymbol(path string, ef *elf.File) error {
	syms, err := ef.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("shim %s: not an allocscope shim: read dynamic symbols: %w", path, err)
	}
	for _, s := range syms {
		if s.Name == ShimABISymbol && s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL {
			return nil
		}
	}
	return fmt.Errorf("shim %s: not an allocscope shim (no symbol %s; built by another allocscope version?)",
		path, ShimABISymbol)
}

// archName names an ELF machine as people do ("x86-64", "aarch64"), with "32-bit " before it for a
// 32-bit class of a machine that is 64-bit by name.
func archName(m elf.Machine, c elf.Class) string {
	names := map[elf.Machine]string{elf.EM_X86_64: "x86-64", elf.EM_AARCH64: "aarch64", elf.EM_386: "x86",
		elf.EM_ARM: "arm", elf.EM_RISCV: "riscv", elf.EM_PPC64: "ppc64", elf.EM_S390: "s390",
		elf.EM_LOONGARCH: "loongarch"}
	name, ok := names[m]
	if !ok {
		name = strings.ToLower(strings.TrimPrefix(m.String(), "EM_"))
	}
	if c == elf.ELFCLASS32 && m != elf.EM_386 && m != elf.EM_ARM {
		return "32-bit " + name
	}
	if c == elf.ELFCLASS64 && (m == elf.EM_386 || m == elf.EM_ARM) {
		return "64-bit " + name
	}
	return name
}
