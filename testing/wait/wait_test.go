package wait

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestUntil: Until returns once the condition holds, and fails with the
// condition's last error when it never does.
func TestUntil(t *testing.T) {
	n := 0
	Until(t, 10*time.Second, func() error {
		if n++; n < 3 {
			return fmt.Errorf("call %d", n)
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}

	rec := &recorder{}
	calls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Until(rec, 50*time.Millisecond, func() error { calls++; return fmt.Errorf("not yet (call %d)", calls) })
	}()
	<-done
	if want := fmt.Sprintf("not yet (call %d)", calls); !rec.failed || !strings.HasSuffix(rec.msg, want) {
		t.Fatalf("a condition that never holds: failed %v with %q, want the last error %q", rec.failed, rec.msg, want)
	}
}

// recorder is a testing.TB whose Fatalf records the failure and ends its
// goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
