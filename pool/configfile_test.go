package pool

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
)

func TestLoadConfigTestdata(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) != 6 {
		t.Fatalf("testdata: %v, %v", files, err)
	}
	for _, f := range files {
		cfg, err := LoadConfig(f)
		if err != nil {
			t.Fatalf("LoadConfig: %v", err)
		}
		a, err := New(cfg, poolsim.NewUpstream(0, 0))
		if err != nil {
			t.Fatalf("%s: New: %v", f, err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := LoadConfig("testdata/sizeclass.json")
	sc := cfg.SizeClass
	if len(sc.Classes) != 4 || sc.Classes[3] != (Class{1 << 20, 16}) || sc.ArenaBytes != 256<<20 ||
		cfg.Prediction.PeakReservedBytes != 301989888 || cfg.Equivalents.PyTorchAllocConf != "expandable_segments:True" {
		t.Fatalf("sizeclass.json decoded as %+v", cfg)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	cases := []struct{ name, data, want string }{
		{"syntax", `{"version": 1, "policy" "raw"}`,
			`line 1 col 25: invalid character '"' after object key`},
		{"type", "{\n  \"version\": 1,\n  \"policy\": \"sizeclass\",\n  \"size_class\": {\"classes\": [{\"size_bytes\": \"big\"}]}\n}",
			`line 4 col 45: size_class.classes.size_bytes: cannot use string as uint64`},
		{"negative", "{\"version\": 1,\n\"alignment_bytes\": -1}",
			`line 2 col 20: alignment_bytes: cannot use number -1 as uint64`},
		{"unknown field", `{"version": 1, "policy": "raw", "colour": 3}`,
			`line 1 col 33: unknown field "colour"`},
		{"truncated", "{\"version\": 1,\n", `line 1 col 15: unexpected end of file`},
		{"empty", " \n", `empty file`},
		{"trailing", `{"version":1,"policy":"raw"} {}`, `line 1 col 30: data after the config object`},
		{"version", `{"version": 2, "policy": "raw"}`, `version: 2 is not supported (this build reads version 1)`},
		{"policy", `{"version": 1, "policy": "tlsf"}`,
			`policy: "tlsf" is not one of ["sizeclass" "bestfit" "pytorch" "stream-ordered" "raw"]`},
		{"alignment", `{"version": 1, "policy": "raw", "alignment_bytes": 3}`, `alignment_bytes: 3 is not a power of two`},
		{"small alignment", `{"version": 1, "policy": "raw", "alignment_bytes": 64}`, `alignment_bytes: 64 is below 256, cudaMalloc's alignment`},
		{"pass-through 0", `{"version": 1, "policy": "raw", "pass_through_sizes": [4096, 0]}`, `pass_through_sizes[1]: 0 is not a request size`},
		{"pass-through twice", `{"version": 1, "policy": "raw", "pass_through_sizes": [4096, 512, 4096]}`,
			`pass_through_sizes[2]: 4096 is there twice`},
		{"pass-through many", `{"version": 1, "policy": "raw", "pass_through_sizes": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`,
			`pass_through_sizes: 17 sizes, at most 16`},
		{"too many slots", `{"version": 1, "policy": "sizeclass", "size_class": {"classes": [{"size_bytes": 512, "slots": 4194000}, {"size_bytes": 1024, "slots": 305}]}}`,
			`size_class.classes[1].slots: 4194305 slots in all exceed the limit of 4194304 (the pool's bookkeeping must stay under 1 GiB of host memory)`},
		{"too many grow slots", `{"version": 1, "policy": "sizeclass", "size_class": {"grow_slots": 4194305, "classes": [{"size_bytes": 512}]}}`,
			`size_class.grow_slots: 4194305 exceeds the limit of 4194304`},
		{"no size_class", `{"version": 1, "policy": "sizeclass"}`, `size_class: required for policy "sizeclass"`},
		{"descending", `{"version": 1, "policy": "sizeclass", "size_class": {"classes": [{"size_bytes": 1024}, {"size_bytes": 512}]}}`,
			`size_class.classes[1].size_bytes: 512 is not above the previous class's 1024 (classes must be strictly ascending)`},
		{"unaligned class", `{"version": 1, "policy": "sizeclass", "size_class": {"classes": [{"size_bytes": 1000}]}}`,
			`size_class.classes[0].size_bytes: 1000 is not a multiple of alignment_bytes 512`},
		{"zero class", `{"version": 1, "policy": "sizeclass", "size_class": {"classes": [{"size_bytes": 0}]}}`,
			`size_class.classes[0].size_bytes: must be above 0`},
		{"arena vs initial", `{"version": 1, "policy": "sizeclass", "size_class": {"arena_bytes": 4096}, "best_fit": {"initial_bytes": 512}}`,
			`size_class.arena_bytes: 4096 differs from best_fit.initial_bytes 512 (set the arena's size here and leave initial_bytes 0)`},
		{"maximum", `{"version": 1, "policy": "bestfit", "best_fit": {"initial_bytes": 4096, "maximum_bytes": 1024}}`,
			`best_fit.maximum_bytes: 1024 is below initial_bytes 4096`},
		{"fit", `{"version": 1, "policy": "bestfit", "best_fit": {"fit": "worst"}}`,
			`best_fit.fit: "worst" is not one of ["best" "best-aged"]`},
		{"arena fit", `{"version": 1, "policy": "sizeclass", "size_class": {"arena_fit": "first"}}`,
			`size_class.arena_fit: "first" is not one of ["best" "best-aged"]`},
		{"max split", `{"version": 1, "policy": "pytorch", "pytorch": {"max_split_size_mb": 10}}`,
			`pytorch.max_split_size_mb: 10 is below PyTorch's minimum of 20`},
		{"divisions", `{"version": 1, "policy": "pytorch", "pytorch": {"roundup_power2_divisions": 6}}`,
			`pytorch.roundup_power2_divisions: 6 is not a power of two up to 1048576`},
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "pool.json")
	for _, c := range cases {
		if err := os.WriteFile(path, []byte(c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(path)
		if err == nil || err.Error() != path+": "+c.want {
			t.Errorf("%s: err = %v\nwant %s: %s", c.name, err, path, c.want)
		}
	}
	_, err := LoadConfig(filepath.Join(dir, "missing.json"))
	if want := "read pool config: open " + dir + "/missing.json: no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("missing file: err = %v, want %s", err, want)
	}
}

func TestConfigSaveRoundTrip(t *testing.T) {
	cfg, err := LoadConfig("testdata/sizeclass.json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip changed the config:\n%+v\n%+v", back, cfg)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "{\n  \"version\": 1,\n  \"policy\": \"sizeclass\",\n  \"alignment_bytes\": 512,\n") {
		t.Fatalf("saved file starts %q", data[:80])
	}
	bad := Config{Version: 1, Policy: "nope"}
	badPath := filepath.Join(t.TempDir(), "bad.json")
	err = bad.Save(badPath)
	if want := "save " + badPath + `: policy: "nope" is not one of ["sizeclass" "bestfit" "pytorch" "stream-ordered" "raw"]`; err == nil || err.Error() != want {
		t.Fatalf("Save of an invalid config: %v", err)
	}
	if _, err := os.Stat(badPath); !os.IsNotExist(err) {
		t.Fatalf("Save of an invalid config left a file: %v", err)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := New(Config{Version: 1, Policy: PolicyRaw, Alignment: 48}, poolsim.NewUpstream(0, 0))
	if err == nil || err.Error() != "pool config: alignment_bytes: 48 is not a power of two" {
		t.Fatalf("err = %v", err)
	}
	if _, err := New(Config{Version: 1, Policy: PolicyRaw}, nil); err == nil || err.Error() != "new pool: nil upstream" {
		t.Fatalf("err = %v", err)
	}
	up := poolsim.NewUpstream(1*mib, 0)
	cfg := Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{ArenaBytes: 2 * mib}}
	_, err = New(cfg, up)
	want := "new sizeclass pool: reserve the planned 2097152 bytes: reserve 2097152 bytes from upstream: reserve 2097152 bytes with 0 of 1048576 held: out of memory"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

// FuzzLoadConfig feeds arbitrary bytes to LoadConfig's parser: it must never panic, its errors
// must name the file, and whatever it accepts must validate, build, and survive a
// Save/LoadConfig round trip unchanged.
func FuzzLoadConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"version": 1, "policy" "raw"}`))
	f.Add([]byte(`{"version": 1, "policy": "pytorch", "pytorch": {"expandable_segments": true}} x`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parseConfig("in.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "in.json: ") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line naming the file: %q", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
		if buildable(cfg) {
			up := poolsim.NewUpstream(0, 0)
			a, err := New(cfg, up)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if err := a.Close(); err != nil || up.Stats().ReservedBytes != 0 {
				t.Fatalf("Close: %v, %+v", err, up.Stats())
			}
		}
		out := filepath.Join(dir, "out.json")
		if err := cfg.Save(out); err != nil {
			t.Fatalf("Save: %v", err)
		}
		back, err := LoadConfig(out)
		if err != nil || !reflect.DeepEqual(back, cfg) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, back, cfg)
		}
	})
}

// buildable reports whether New on cfg stays cheap enough for a fuzz iteration.
func buildable(cfg Config) bool {
	if cfg.SizeClass == nil {
		return true
	}
	slots := cfg.SizeClass.GrowSlots
	for _, c := range cfg.SizeClass.Classes {
		slots += c.Slots
	}
	if pg := cfg.SizeClass.ArenaPaging; pg != nil && cfg.SizeClass.ArenaBytes/pg.PageBytes >= 1<<16 {
		return false
	}
	return slots < 1<<16
}

func TestAlignUp(t *testing.T) {
	for _, c := range []struct{ n, align, want uint64 }{
		{0, DefaultAlignment, 0},
		{1, DefaultAlignment, 512},
		{512, DefaultAlignment, 512},
		{513, DefaultAlignment, 1024},
		{1000, DefaultAlignment, 1024},
		{3<<20 + 1, 2 << 20, 4 << 20},
		{1, 1, 1},
		{7, 3, 9}, // not a power of two: a division
		{9, 3, 9},
		{1<<40 + 1, 1e9, 1100000000000},
		{1<<64 - 1, 512, 0}, // wraps, as n + align - 1 does
	} {
		if got := AlignUp(c.n, c.align); got != c.want {
			t.Errorf("AlignUp(%d, %d) = %d, want %d", c.n, c.align, got, c.want)
		}
	}
}
