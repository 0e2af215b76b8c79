// Package wait holds the one polling helper of the in-process tests: wait
// until a condition holds, for what a test cannot be told about directly,
// such as a background goroutine finishing, a coordinator loading its
// partition or a group settling after a rebalance.
//
// A test that waits for a deadline inside the code under test (a session
// lifetime, a cache's eviction order) moves a fake clock past it instead
// of polling. The package imports only the standard library, so that the
// in-package tests of any package (server, engine/coord) can use it
// without an import cycle through testing/tandemtest.
package wait

import (
	"testing"
	"time"
)

// Until calls cond until it returns nil and fails t with cond's last error
// if timeout passes first. It polls every 5 ms at first, backing off to
// every 100 ms, so that a quick condition is seen quickly and a slow one
// is not hammered.
func Until(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v: %v", timeout, err)
		}
		time.Sleep(pause)
	}
}
