package intercept

import (
	"encoding/binary"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/poolactivity"
)

// The control file's pool counters: one of an older shim, 12 counters long, reads with the newer
// counters 0; one of this shim's reads the reasons requests went to CUDA (log.h's enum pool_pass
// order), the pools not made, the first error and the sum of pool peaks.
func TestReadControlPoolCounters(t *testing.T) {
	counters := make([]uint64, 4+controlPoolCounters)
	for i := range counters {
		counters[i] = uint64(i)
	}
	write := func(n int) string {
		dir := t.TempDir()
		b := make([]byte, 8*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(b[8*i:], counters[i])
		}
		if err := os.WriteFile(filepath.Join(dir, controlFileName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	old, err := readControl(write(4 + controlPoolCountersV1))
	if err != nil {
		t.Fatal(err)
	}
	if p := old.pool; p == nil || p.PassedThrough != 8 || p.StreamsApart != 15 || p.PassedBy != nil ||
		p.PoolsNotMade != 0 || p.FirstNotMadeError != 0 || p.PeakReservedSumBytes != 0 {
		t.Errorf("older control file: %+v; want passed 8, streams apart 15, no newer counters", p)
	}
	cur, err := readControl(write(len(counters)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"no_pool": 16, "no_context": 17, "capture": 18, "signal": 19, "full": 20,
		"retired": 21, "excluded": 22, "other": 23}
	if p := cur.pool; p == nil || !maps.Equal(p.PassedBy, want) || p.PoolsNotMade != 24 || p.FirstNotMadeError != 25 ||
		p.PeakReservedSumBytes != 26 {
		t.Errorf("control file: %+v; want passed by %v, 24 pools not made, first error 25, peaks summed 26", p, want)
	}
}

// log.h's enum pool_pass names poolactivity.PassReasons in their order, and struct pool_counters has
// controlPoolCounters counters.
func TestControlLayoutMatchesLogH(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("shim", "log.h"))
	if err != nil {
		t.Fatal(err)
	}
	enum := regexp.MustCompile(`(?s)enum pool_pass \{(.*?)\};`).FindSubmatch(src)
	var names []string
	for _, m := range regexp.MustCompile(`\bPASS_([A-Z_]+)`).FindAllSubmatch(enum[1], -1) {
		names = append(names, strings.ToLower(string(m[1])))
	}
	if want := append(slices.Clone(poolactivity.PassReasons), "reasons"); !slices.Equal(names, want) || len(poolactivity.PassReasons) != controlPassReasons {
		t.Errorf("enum pool_pass names %v, want %v (%d reasons)", names, want, controlPassReasons)
	}
	body := regexp.MustCompile(`(?s)struct pool_counters \{(.*?)\};`).FindSubmatch(src)[1]
	n := len(regexp.MustCompile(`(?m)^\s*uint64_t \w+;`).FindAll(body, -1)) +
		len(regexp.MustCompile(`(?m)^\s*uint64_t \w+\[PASS_REASONS\];`).FindAll(body, -1))*controlPassReasons
	if n != controlPoolCounters {
		t.Errorf("struct pool_counters has %d counters, want %d", n, controlPoolCounters)
	}
}
