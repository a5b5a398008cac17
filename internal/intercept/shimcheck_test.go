package intercept

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// buildLib compiles the C source src into the shared library dir/name with $CC (else cc).
func buildLib(t *testing.T, dir, name, src string) string {
	t.Helper()
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := strings.Fields(os.Getenv("CC"))
	if len(cc) == 0 {
		cc = []string{"cc"}
	}
	lib := filepath.Join(dir, name)
	args := append(cc[1:len(cc):len(cc)], "-shared", "-fPIC", "-o", lib, c)
	if out, err := exec.Command(cc[0], args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc[0], strings.Join(args, " "), err, out)
	}
	return lib
}

// CheckShim accepts exactly the ELF shared libraries of this machine that define
// allocscope_shim_abi_2, and names what is wrong with anything else in one line.
func TestCheckShim(t *testing.T) {
	dir := t.TempDir()
	good := buildLib(t, dir, "good.so", "int allocscope_shim_abi_2;\nint f(void) { return 1; }\n")
	old := buildLib(t, dir, "old.so", "int allocscope_shim_abi_1;\nint f(void) { return 1; }\n")
	// A library that only refers to the symbol (an undefined dynamic symbol) does not define it.
	user := buildLib(t, dir, "user.so", "extern int allocscope_shim_abi_2;\nint f(void) { return allocscope_shim_abi_2; }\n")
	text := filepath.Join(dir, "notes.txt")
	writeTestFile(t, text, []byte("not a library\n"))
	short := filepath.Join(dir, "short.so")
	writeTestFile(t, short, []byte(elf.ELFMAG))
	foreign := filepath.Join(dir, "foreign.so")
	foreignArch, hostName := foreignMachine(t)
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint16(b[18:], uint16(foreignArch.machine)) // e_machine
	writeTestFile(t, foreign, b)
	self, err := os.Executable() // a Go test binary: an executable, not a shared library
	if err != nil {
		t.Fatal(err)
	}
	selfType := elfType(t, self)
	missing := filepath.Join(dir, "missing.so")
	tests := []struct{ path, want string }{
		{good, ""},
		{old, "shim " + old + ": not an allocscope shim (no symbol allocscope_shim_abi_2; built by another allocscope version?)"},
		{user, "shim " + user + ": not an allocscope shim (no symbol allocscope_shim_abi_2; built by another allocscope version?)"},
		{text, "shim " + text + ": not an allocscope shim: not an ELF file"},
		{short, "shim " + short + ": not an allocscope shim: truncated ELF file"},
		{dir, "shim " + dir + ": not an allocscope shim: a directory"},
		{missing, "shim " + missing + ": no such file or directory"},
		{foreign, "shim " + foreign + " is for " + foreignArch.name + ", this machine is " + hostName},
	}
	if selfType == elf.ET_EXEC {
		tests = append(tests, struct{ path, want string }{self,
			"shim " + self + ": not an allocscope shim: not a shared library (ELF type ET_EXEC)"})
	}
	for _, tc := range tests {
		err := CheckShim(tc.path)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckShim(%s) = %q, want %q", filepath.Base(tc.path), got, tc.want)
		}
	}
	if err := CheckShim(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CheckShim(missing) = %v, want an fs.ErrNotExist", err)
	}
}

// foreignMachine returns an architecture other than this machine's, and this machine's name.
func foreignMachine(t *testing.T) (foreign struct {
	machine elf.Machine
	name    string
}, host string) {
	switch runtime.GOARCH {
	case "amd64":
		foreign.machine, foreign.name, host = elf.EM_AARCH64, "aarch64", "x86-64"
	case "arm64":
		foreign.machine, foreign.name, host = elf.EM_X86_64, "x86-64", "aarch64"
	default:
		t.Skipf("no foreign architecture chosen for %s", runtime.GOARCH)
	}
	return foreign, host
}

func elfType(t *testing.T, path string) elf.Type {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Type
}

func writeTestFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
