package engine

import (
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/engine/wake"
)

// TestWaiter: one waiter watching two partitions is woken by an append
// to either, once; a partition drops the waiters of fetches that stopped
// waiting, so that an idle partition watched round after round keeps at
// most one; closing the engine wakes the waiters.
func TestWaiter(t *testing.T) {
	e := openTest(t, nil)
	a := mkPart(t, e, DefaultLogConfig())
	b, err := e.Create("t", testID, 1, DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := wake.NewWaiter()
	a.Watch(w, false)
	b.Watch(w, false)
	select {
	case <-w.C():
		t.Fatal("woken before anything moved")
	default:
	}
	appendOK(t, a, OriginClient, mkBatch(t, batchOpts{}, kv("k", "v")))
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("an append to a watched partition did not wake the waiter")
	}

	// Rounds of a fetch that stop waiting (their deadline): b, idle,
	// keeps only the live one.
	for range 100 {
		w := wake.NewWaiter()
		b.Watch(w, false)
		w.Wake()
	}
	live := wake.NewWaiter()
	b.Watch(live, false)
	b.mu.Lock()
	n := len(b.waiters)
	b.mu.Unlock()
	if n != 1 {
		t.Fatalf("an idle partition holds %d waiters after 100 finished fetches, want 1", n)
	}
	e.Close()
	select {
	case <-live.C():
	case <-time.After(10 * time.Second):
		t.Fatal("closing the engine did not wake the waiter")
	}
	late := wake.NewWaiter()
	b.Watch(late, true)
	select {
	case <-late.C():
	default:
		t.Fatal("a waiter registered after the close is not woken")
	}
}
