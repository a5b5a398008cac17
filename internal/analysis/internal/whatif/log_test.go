package whatif

import (
	"testing"

	"github.com/allocscope/allocscope/internal/requests"
)

// decoded returns the request log of src, held in memory, closed when the test ends.
func decoded(tb testing.TB, src requests.Source) *requests.Log {
	tb.Helper()
	l, _, err := requests.Decode(src, nil, "")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}
