package mirrorstate

import "testing"

// TestTransitions checks State.CanMove against the KIP's transitions, for
// every pair of states: each pair the table lists is allowed, staying in
// a state and falling to FAILED are always allowed, and every other pair
// is refused.
func TestTransitions(t *testing.T) {
	allowed := []struct {
		from State
		to   []State
		why  string
	}{
		{Unknown, []State{Preparing, Mirroring, Paused, Stopping, Stopped}, "a partition with no state starts, or takes what another broker wrote"},
		{Preparing, []State{Mirroring, Pausing, Stopping}, "truncated to the source: mirroring; or paused or failed over first"},
		{Mirroring, []State{EpochFencing, Pausing, Stopping, Preparing}, "a source epoch above ours fences; a divergence prepares again"},
		{EpochFencing, []State{Mirroring, Pausing, Stopping}, "the bump is done"},
		{Pausing, []State{Paused, Stopping}, "the fetcher let go"},
		{Paused, []State{Mirroring, Stopping}, "resumed, or failed over while paused"},
		{Stopping, []State{Stopped}, "a failover only finishes"},
		{Stopped, []State{Preparing}, "the topic is added to a mirror again (failback)"},
		{Failed, []State{Preparing, Stopping}, "resumed or added again, or failed over"},
	}
	listed := map[[2]State]bool{}
	for _, a := range allowed {
		for _, to := range a.to {
			listed[[2]State{a.from, to}] = true
			if !a.from.CanMove(to) {
				t.Errorf("%s → %s refused, but the KIP allows it: %s", a.from, to, a.why)
			}
		}
	}
	for from := Unknown; from <= Failed; from++ {
		for to := Unknown; to <= Failed; to++ {
			want := listed[[2]State{from, to}] || from == to || to == Failed
			if got := from.CanMove(to); got != want {
				t.Errorf("%s → %s: CanMove %v, want %v", from, to, got, want)
			}
		}
	}
	// The refusals that keep two writers apart, by name.
	for _, r := range [][2]State{{Stopping, Mirroring}, {Stopping, EpochFencing}, {Stopped, Mirroring}, {Paused, EpochFencing}, {Stopping, Preparing}} {
		if r[0].CanMove(r[1]) {
			t.Errorf("%s → %s allowed", r[0], r[1])
		}
	}
}

func TestStateNames(t *testing.T) {
	for s, want := range map[State]string{Unknown: "UNKNOWN", Preparing: "PREPARING", Mirroring: "MIRRORING", EpochFencing: "EPOCH_FENCING",
		Pausing: "PAUSING", Paused: "PAUSED", Stopping: "STOPPING", Stopped: "STOPPED", Failed: "FAILED", 42: "UNKNOWN", -1: "UNKNOWN"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d) is %q, want %q", s, got, want)
		}
	}
}
