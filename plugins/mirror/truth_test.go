package mirror

import (
	"testing"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// TestWithLeaderView: a partition cut off from its source is FAILED in
// every view, with one reason per mirror when the mirror cannot use its
// source (not each leader's own dial error: a three-broker destination
// printed two notes for one dead source); a paused partition stays
// PAUSED, and a partition the mirror set FAILED keeps its own reason.
func TestWithLeaderView(t *testing.T) {
	mirrorErr := "source cluster a:9092 unreachable"
	part := func(state, reason string) mirrorproto.PartitionDetail {
		return mirrorproto.PartitionDetail{State: state, Reason: reason, SourceOffset: 10, DestinationOffset: 10}
	}
	for _, c := range []struct {
		name              string
		pd, rd            mirrorproto.PartitionDetail
		led, cut, failed  bool
		wantState, reason string
	}{
		{"led here, mirror failed", part("MIRRORING", "dial b:9092 refused"), mirrorproto.PartitionDetail{}, false, true, true, "FAILED", mirrorErr},
		{"led elsewhere, mirror failed", part("MIRRORING", ""), part("FAILED", "dial c:9092 refused"), true, false, true, "FAILED", mirrorErr},
		{"led elsewhere, its source leader gone", part("MIRRORING", ""), part("FAILED", "source partition has no leader"), true, false, false, "FAILED", "source partition has no leader"},
		{"paused, mirror failed", part("PAUSED", ""), mirrorproto.PartitionDetail{}, false, false, true, "PAUSED", mirrorErr},
		{"set FAILED by the mirror", part("FAILED", "diverged"), mirrorproto.PartitionDetail{}, false, false, true, "FAILED", "diverged"},
		{"copying", part("MIRRORING", ""), part("MIRRORING", ""), true, false, false, "MIRRORING", ""},
	} {
		var errp *string
		if c.failed {
			errp = &mirrorErr
		}
		got := withLeaderView(c.pd, c.rd, c.led, c.cut, c.failed, errp)
		if got.State != c.wantState || got.Reason != c.reason {
			t.Errorf("%s: %s %q, want %s %q", c.name, got.State, got.Reason, c.wantState, c.reason)
		}
		if c.failed && got.State != "FAILED" && !got.SourceStale {
			t.Errorf("%s: the mirror cannot use its source, yet the source end is not stale", c.name)
		}
	}
}
