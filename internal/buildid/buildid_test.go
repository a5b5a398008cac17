package buildid

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// gnuBuildIDNote finds the build ID among a file's notes: after another note, with 4-byte padding.
func TestGNUBuildIDNote(t *testing.T) {
	le := binary.LittleEndian
	note := func(name string, typ uint32, desc []byte) []byte {
		b := le.AppendUint32(nil, uint32(len(name)+1))
		b = le.AppendUint32(b, uint32(len(desc)))
		b = le.AppendUint32(b, typ)
		b = append(b, name...)
		b = append(b, 0)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		b = append(b, desc...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	data := append(note("GNU", 1, []byte{0, 0, 0, 0, 2, 0, 0, 0}), note("GNU", 3, []byte{0xde, 0xad, 0xbe, 0xef, 0x01})...)
	if got := gnuBuildIDNote(data, le, 4); got != "deadbeef01" {
		t.Errorf("build ID %q, want deadbeef01", got)
	}
	if got := gnuBuildIDNote(data[:len(data)-4], le, 4); got != "" {
		t.Errorf("cut note: %q, want none", got)
	}
	if got := gnuBuildIDNote(note("Go", 4, []byte("x")), le, 4); got != "" {
		t.Errorf("Go note: %q, want none", got)
	}
}

// FuzzGNUBuildIDNote: any note bytes give an ID or nothing, never a panic.
func FuzzGNUBuildIDNote(f *testing.F) {
	f.Add([]byte{4, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 1, 2, 0, 0}, uint64(4))
	f.Add([]byte{}, uint64(8))
	f.Fuzz(func(t *testing.T, data []byte, align uint64) {
		gnuBuildIDNote(data, binary.LittleEndian, align%64)
	})
}

// Of reads the build ID the linker wrote (one given on its command line), and gives "" for a file
// that is missing or is no ELF file.
func TestOf(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "main")
	if out, err := exec.Command("cc", "-o", exe, src, "-Wl,--build-id=0xdeadbeef01").CombinedOutput(); err != nil {
		t.Skipf("no C compiler that takes --build-id: %v: %s", err, out)
	}
	if got := Of(exe); got != "deadbeef01" {
		t.Errorf("Of(%s) = %q, want deadbeef01", exe, got)
	}
	if got := Of(src); got != "" {
		t.Errorf("Of of a C source = %q, want none", got)
	}
	if got := Of(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("Of of a missing file = %q, want none", got)
	}
}
