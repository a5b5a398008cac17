package sizeclass

import (
	"slices"
	"testing"
)

// fourSizes: 512 B ×10 (4 live at peak), 1 KiB ×10 (4), 4 KiB ×6 (2), 5 KiB ×5 (2).
var fourSizes = []Size{{5120, 5, 2}, {512, 10, 4}, {4096, 6, 2}, {1024, 10, 4}}

func TestChooseKnownSizes(t *testing.T) {
	p := Choose(fourSizes, MaxThreshold, 0)
	// Peak bytes 24576: 1% is 245 B, so only k = 4 (no waste) passes the rule.
	if p.K != 4 || !slices.Equal(p.Classes, []uint64{512, 1024, 4096, 5120}) || p.DistinctSizes != 4 {
		t.Fatalf("plan = %+v", p)
	}
	want := []Waste{
		{K: 1, PeakWaste: 4*4608 + 4*4096 + 2*1024, TotalWaste: 10*4608 + 10*4096 + 6*1024},
		// k = 2: {1 KiB, 5 KiB}: 512 B → 1 KiB (4 at peak, 10 in all), 4 KiB → 5 KiB (2, 6).
		{K: 2, PeakWaste: 4*512 + 2*1024, TotalWaste: 10*512 + 6*1024},
		// k = 3: {1 KiB, 4 KiB, 5 KiB} beats {512 B, 1 KiB, 5 KiB} on the mixed objective
		// (0.3306×512 < 0.1734×1024).
		{K: 3, PeakWaste: 4 * 512, TotalWaste: 10 * 512},
		{K: 4},
	}
	for i, w := range want {
		got := p.Curve[i]
		if got.K != w.K || got.PeakWaste != w.PeakWaste || got.TotalWaste != w.TotalWaste {
			t.Errorf("curve[%d] = %+v, want %+v", i, got, w)
		}
	}
}

func TestChooseForcedAndAligned(t *testing.T) {
	p := Choose(fourSizes, MaxThreshold, 2)
	if p.K != 2 || !slices.Equal(p.Classes, []uint64{1024, 5120}) || !p.Forced {
		t.Fatalf("forced plan = %+v", p)
	}
	// Exact sizes are aligned to 512 B; waste is measured against the exact sizes; sizes above
	// the threshold are left to the arena.
	p = Choose([]Size{{100, 1, 1}, {500, 1, 1}, {700, 3, 0}, {1 << 20, 9, 9}}, 4096, 0)
	if !slices.Equal(p.Classes, []uint64{512, 1024}) || p.DistinctSizes != 2 {
		t.Fatalf("plan = %+v", p)
	}
	if w := p.Curve[p.K-1]; w.PeakWaste != 412+12 || w.TotalWaste != 412+12+3*324 {
		t.Errorf("waste = %+v", w)
	}
}

// BenchmarkChoose measures the DP at its largest: 2048 distinct sizes (every multiple of 512 B
// up to 1 MiB), k up to 32.
func BenchmarkChoose(b *testing.B) {
	var sizes []Size
	for s := uint64(512); s <= MaxThreshold; s += 512 {
		sizes = append(sizes, Size{Bytes: s, Count: s % 7 * 3, AtPeak: s % 5})
	}
	for b.Loop() {
		Choose(sizes, MaxThreshold, 0)
	}
}
