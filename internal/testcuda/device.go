package testcuda

import "testing"

// OpenDevice0 opens CUDA device 0 with open (cuda.Open, passed in so that this package, which the
// CUDA backend's own tests import, does not import the backend) and closes it when the test ends;
// it ends the test when the device does not open. It is for the tests that run on a real GPU
// (build tag cuda).
func OpenDevice0[B interface{ Close() error }](t testing.TB, open func(device int) (B, error)) B {
	t.Helper()
	b, err := open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}
