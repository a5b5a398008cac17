//go:build race

package intercept

// raceDetector reports whether the tests run under the race detector, which slows the test binary
// and the machine: timing bounds are checked only without it (CI's plain `go test ./...` run).
const raceDetector = true
