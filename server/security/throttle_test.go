package security

import (
	"fmt"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/testing/fakeclock"
)

func newTestThrottle(delay time.Duration) (*Throttle, *fakeclock.Clock) {
	clk := fakeclock.New(time.Unix(1_000_000, 0))
	t := NewThrottle(delay)
	t.now = clk.Now
	return t, clk
}

// TestAuthThrottleGuessing: with Kafka's default delay, guessing 300
// passwords one after the other takes minutes; guessing them in parallel
// gets most attempts refused unchecked; a user's success and a quiet spell
// clear the failures; 0 turns it off.
func TestAuthThrottleGuessing(t *testing.T) {
	th, clk := newTestThrottle(100 * time.Millisecond)
	start := clk.Now()
	for i := range 300 {
		wait, err := th.Admit("10.0.0.1", "alice")
		if err != nil {
			t.Fatalf("sequential attempt %d refused: %v", i, err)
		}
		clk.Advance(wait + time.Millisecond) // the attempt waits its slot, then fails
		th.Failed("10.0.0.1", "alice")
	}
	if took := clk.Now().Sub(start); took < 5*time.Minute {
		t.Fatalf("300 sequential guesses took %v, want minutes", took)
	} else {
		t.Logf("300 sequential guesses take %v", took.Round(time.Second))
	}

	// 300 connections at once, from a new address, against a user with
	// no failures yet: a handful are checked, the rest refused unchecked.
	th, clk = newTestThrottle(100 * time.Millisecond)
	th.Succeeded("10.0.0.2", "dave") // a client that authenticated before the attack
	checked := 0
	for range 300 {
		if _, err := th.Admit("10.0.0.2", "bob"); err == nil {
			checked++
			th.Failed("10.0.0.2", "bob")
		}
	}
	if checked > 20 {
		t.Fatalf("%d of 300 parallel guesses were checked", checked)
	}
	// Spraying users from that address is throttled as much.
	if _, err := th.Admit("10.0.0.2", "erin"); err == nil {
		t.Fatal("another user from the guessing address is not throttled")
	}
	// dave, trusted from that address, and carol elsewhere are not slowed
	// down by the guessing.
	for _, a := range [][2]string{{"10.0.0.2", "dave"}, {"10.0.0.3", "carol"}} {
		if wait, err := th.Admit(a[0], a[1]); err != nil || wait != 0 {
			t.Fatalf("%s from %s waits %v (%v)", a[1], a[0], wait, err)
		}
	}
	// bob from elsewhere still waits for bob's slots.
	if wait, err := th.Admit("10.0.0.4", "bob"); err == nil && wait == 0 {
		t.Fatal("bob's failures do not slow down bob from another address")
	}
	// A quiet spell of 600 delays clears the failures.
	clk.Advance(61 * time.Second)
	if wait, err := th.Admit("10.0.0.2", "bob"); err != nil || wait != 0 {
		t.Fatalf("after a quiet minute: waits %v (%v)", wait, err)
	}

	// Memory is bounded whatever the number of users tried.
	for i := range 3 * maxThrottledKeys {
		th.Failed("10.0.0.5", fmt.Sprintf("u%d", i))
		th.Succeeded("10.0.0.6", fmt.Sprintf("u%d", i))
	}
	if len(th.keys) > maxThrottledKeys || len(th.trusted) > maxThrottledKeys {
		t.Fatalf("%d keys, %d trusted remembered", len(th.keys), len(th.trusted))
	}

	off, _ := newTestThrottle(0)
	for range 100 {
		off.Failed("10.0.0.1", "alice")
		if wait, err := off.Admit("10.0.0.1", "alice"); err != nil || wait != 0 {
			t.Fatalf("throttling with delay 0: %v %v", wait, err)
		}
	}
}
