package poolactivity

import (
	"reflect"
	"testing"
)

// The JSON of an activity decodes to the same activity; nil and empty are none.
func TestJSONRoundTrip(t *testing.T) {
	a := &Activity{Syncs: 3, SyncNs: 41000, Reservations: 2, Barriers: 1, PeakReservedBytes: 3 << 30,
		PassedBy: map[string]int64{"capture": 4, "full": 1}, IdleReleases: 2, IdleReleasedBytes: 4 << 20}
	raw := a.JSON()
	const want = `{"syncs":3,"sync_ns":41000,"reservations":2,"fallbacks":0,"passed_through":0,"events":0,` +
		`"stream_waits":0,"host_waits":0,"peak_reserved_bytes":3221225472,"ipc_exports":0,"barriers":1,` +
		`"passed_by":{"capture":4,"full":1},"idle_releases":2,"idle_released_bytes":4194304}`
	if string(raw) != want {
		t.Errorf("JSON %s\nwant %s", raw, want)
	}
	got, err := Decode(raw)
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Errorf("Decode = %+v, %v; want %+v", got, err, a)
	}
	if raw := (*Activity)(nil).JSON(); raw != nil {
		t.Errorf("nil activity: JSON %q, want nil", raw)
	}
	if got, err := Decode(nil); got != nil || err != nil {
		t.Errorf("Decode(nil) = %+v, %v; want nil, nil", got, err)
	}
}

// Decode refuses an unknown field, a negative count, more barriers than synchronizations and a
// pass reason that is none, each with one line that says what.
func TestDecodeErrors(t *testing.T) {
	for raw, want := range map[string]string{
		`{"syncs":1,"lost":2}`:                  `json: unknown field "lost"`,
		`{"syncs":1,"fallbacks":-2}`:            `negative count, or more barriers than syncs, in {"syncs":1,"fallbacks":-2}`,
		`{"syncs":1,"barriers":2}`:              `negative count, or more barriers than syncs, in {"syncs":1,"barriers":2}`,
		`{"passed_by":{"full":1,"bored":2}}`:    `passed_by: "bored" 2 is not a reason and count`,
		`{"passed_by":{"capture":-1,"full":1}}`: `passed_by: "capture" -1 is not a reason and count`,
		`{"syncs":"three"}`:                     `json: cannot unmarshal string into Go struct field Activity.syncs of type int64`,
	} {
		if got, err := Decode([]byte(raw)); got != nil || err == nil || err.Error() != want {
			t.Errorf("Decode(%s) = %+v, %v; want %s", raw, got, err, want)
		}
	}
}

// PeakReservedTotal is the summed peak, or the largest pool's for a recorder without the sum.
func TestPeakReservedTotal(t *testing.T) {
	if got := (&Activity{PeakReservedBytes: 5, PeakReservedSumBytes: 12}).PeakReservedTotal(); got != 12 {
		t.Errorf("with the sum: %d, want 12", got)
	}
	if got := (&Activity{PeakReservedBytes: 5}).PeakReservedTotal(); got != 5 {
		t.Errorf("without the sum: %d, want 5", got)
	}
}
