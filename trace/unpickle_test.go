package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/nlpodyssey/gopickle/pickle"
)

// gopickleLoad decodes data with gopickle, as the importer did before fastUnpickle.
func gopickleLoad(data []byte) (root any, err error) {
	err = catch(func() (err error) {
		u := pickle.NewUnpickler(bytes.NewReader(data))
		root, err = u.Load()
		return err
	})
	return root, err
}

func snapshotPickles(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	for _, glob := range []string{"../testdata/torch/*.pickle.*", fixtures + "/*.pickle*"} {
		paths, _ := filepath.Glob(glob)
		for _, p := range paths {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := f.Stat()
			data, err := readSnapshotBytes(f, st.Size())
			f.Close()
			if err != nil {
				t.Fatal(p, err)
			}
			out[p] = data
		}
	}
	return out
}

// TestFastUnpickleMatchesGopickle checks that the fast decoder handles every snapshot of the
// test data and gives exactly gopickle's values.
func TestFastUnpickleMatchesGopickle(t *testing.T) {
	for p, data := range snapshotPickles(t) {
		got, ok := fastUnpickle(data, 0)
		if !ok {
			t.Errorf("%s: fast decoder gave up", p)
			continue
		}
		want, err := gopickleLoad(data)
		if err != nil {
			t.Errorf("%s: gopickle: %v", p, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: fast decoder differs from gopickle", p)
		}
	}
}

// FuzzFastUnpickle checks that whenever the fast decoder accepts a pickle, gopickle decodes it
// to the same value.
func FuzzFastUnpickle(f *testing.F) {
	addSeeds(f, "snapshot_small.pickle", "snapshot_old_proto2.pickle", "not_a_snapshot.pickle")
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := fastUnpickle(data, 0)
		if !ok {
			return
		}
		want, err := gopickleLoad(data)
		if err != nil {
			t.Fatalf("fast decoder accepted what gopickle rejects: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fast decoder gave %#v, gopickle %#v", got, want)
		}
	})
}
