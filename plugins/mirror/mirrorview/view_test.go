package mirrorview

import (
	"testing"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
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
		got := WithLeaderView(c.pd, c.rd, c.led, c.cut, c.failed, errp)
		if got.State != c.wantState || got.Reason != c.reason {
			t.Errorf("%s: %s %q, want %s %q", c.name, got.State, got.Reason, c.wantState, c.reason)
		}
		if c.failed && got.State != "FAILED" && !got.SourceStale {
			t.Errorf("%s: the mirror cannot use its source, yet the source end is not stale", c.name)
		}
	}
}

// TestMirrorState: a mirror's state from its partitions' as every view
// shows it.
func TestMirrorState(t *testing.T) {
	pd := func(states ...mirrorstate.State) []mirrorproto.PartitionDetail {
		var out []mirrorproto.PartitionDetail
		for _, s := range states {
			out = append(out, mirrorproto.PartitionDetail{State: s.String()})
		}
		return out
	}
	for _, c := range []struct {
		failed bool
		parts  []mirrorproto.PartitionDetail
		want   mirrorstate.State
	}{
		{false, nil, mirrorstate.Mirroring},
		{true, nil, mirrorstate.Failed},
		{true, pd(mirrorstate.Stopped, mirrorstate.Stopped), mirrorstate.Stopped},
		{false, pd(mirrorstate.Stopped, mirrorstate.Paused), mirrorstate.Paused},
		{false, pd(mirrorstate.Paused, mirrorstate.Mirroring), mirrorstate.Mirroring},
		{true, pd(mirrorstate.Paused), mirrorstate.Failed},
	} {
		if got := MirrorState(c.failed, c.parts); got != c.want.String() {
			t.Errorf("MirrorState(%v, %v) = %s, want %s", c.failed, c.parts, got, c.want)
		}
	}
}

// TestDestinationHealth: a partition without a leader, one whose ISR is
// below min.insync.replicas (the topic's, else the default passed in),
// and a healthy one.
func TestDestinationHealth(t *testing.T) {
	img := &metadata.Image{}
	img.Mirrors = map[string]*metadata.Mirror{"m": {Name: "m", Topics: map[string]metadata.MirrorTopic{"a": {}, "b": {}}}}
	img.Topics = map[string]*metadata.Topic{
		"a": {Name: "a", Partitions: []metadata.Partition{{Leader: -1, Replicas: []int32{1, 2}}, {Leader: 1, ISR: []int32{1}, Replicas: []int32{1, 2}}}},
		"b": {Name: "b", Configs: map[string]string{"min.insync.replicas": "1"}, Partitions: []metadata.Partition{{Leader: 2, ISR: []int32{2}}}},
	}
	got := DestinationCounts(img, "m", 2)
	if got[HealthNoLeader] != 1 || got[HealthUnderMinISR] != 1 || got[HealthOK] != 1 {
		t.Fatalf("counts %v", got)
	}
	if s := DestinationIssue(img, img.Topics["a"], 1, 2); s == "" {
		t.Error("an ISR of 1 below min.insync.replicas 2 is no issue")
	}
	if s := DestinationIssue(img, img.Topics["b"], 0, 2); s != "" {
		t.Errorf("the topic's min.insync.replicas 1: %q", s)
	}
}
