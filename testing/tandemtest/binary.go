// Package tandemtest starts Tandem brokers for tests: the built binary as a
// child process (StartProcess), or in-process (StartInProcess), and speaks
// the raw Kafka protocol to them (Dial).
package tandemtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// build is the binary built once per test process.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Main runs the tests of a package that uses BuildBinary and removes the
// built binary afterwards. Call it from TestMain: os.Exit(tandemtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	return code
}

// BuildBinary returns the path of the tandem binary, built with `go build`
// once per test process. TANDEM_BINARY, if set, names a prebuilt binary to
// use instead.
func BuildBinary(t testing.TB) string {
	t.Helper()
	Long(t)
	build.once.Do(func() {
		if p := os.Getenv("TANDEM_BINARY"); p != "" {
			build.path, build.err = filepath.Abs(p)
			return
		}
		build.dir, build.err = os.MkdirTemp("", "tandem-bin-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "tandem")
		cmd := exec.Command("go", "build", "-o", build.path, "github.com/tandem-kafka/tandem/cmd/tandem")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/tandem: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// Long marks a test of the full tier only: the quick tier (`make check`,
// `go test -short ./...`) skips it. Tests that run the built binary are
// long (BuildBinary calls Long), and so are the few in-process tests that
// take tens of seconds; `make test` runs them all.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("full tier only (make test); the quick tier, go test -short, skips it")
	}
}
