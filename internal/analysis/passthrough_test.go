package analysis

import (
	"slices"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// A trace whose program exported allocations of 12,345 bytes by IPC: the recommended pool sends that
// size to CUDA (pass_through_sizes) and is sized without those requests: 4 KiB blocks only, where the
// same trace without the exports needs a class for the 12,345-byte blocks too; the report says why.
func TestExportedSizesPassThrough(t *testing.T) {
	var b builder
	for i := uint64(0); i < 4; i++ {
		b.alloc(0x10000+i*0x10000, 4096, 1000)
		b.alloc(0x800000+i*0x10000, 12345, 1000)
	}
	for i := uint64(0); i < 4; i++ {
		b.free(0x10000+i*0x10000, 1000)
		b.free(0x800000+i*0x10000, 1000)
	}
	analyze := func(exports []uint64) *Report {
		in := Input{Name: "exports", Open: func() (Source, error) {
			return &infoSource{fakeSource{events: b.events, batch: 3}, trace.Info{IPCExportSizes: exports}}, nil
		}}
		r, err := Analyze([]Input{in}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	with, without := analyze([]uint64{12345}), analyze(nil)
	cfg := with.Combined.Config
	if !slices.Equal(cfg.PassThroughSizes, []uint64{12345}) || without.Combined.Config.PassThroughSizes != nil {
		t.Errorf("pass_through_sizes %v and %v, want [12345] and none", cfg.PassThroughSizes, without.Combined.Config.PassThroughSizes)
	}
	if got, all := cfg.PlanBytes(), without.Combined.Config.PlanBytes(); got != 4*4096 || all <= got {
		t.Errorf("plan %d bytes with the exports passed through, %d without; want %d and more", got, all, 4*4096)
	}
	if with.Combined.Requests.Allocs != 8 {
		t.Errorf("statistics count %d allocations, want all 8", with.Combined.Requests.Allocs)
	}
	want := "exports: the program exported device allocations of 12.1 KiB by IPC (cudaIpcGetMemHandle): record " +
		"--pool sends requests of these sizes to CUDA (pass_through_sizes), and the pool's plan leaves them out"
	if !slices.Contains(with.Warnings, want) {
		t.Errorf("warnings %q lack %q", with.Warnings, want)
	}
}
