package cutover

import (
	"strings"
	"testing"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// The set's name is the same whatever order the topics were named in,
// and its decider is the first topic's partition 0: every partition of
// the set must agree on both without asking each other.
func TestSetAndDecider(t *testing.T) {
	set := SetOf([]string{"orders", "audit", "payments"})
	if set != "audit,orders,payments" {
		t.Fatalf("SetOf = %q", set)
	}
	if d := Decider(set); d != (topicPartition{Topic: "audit", Partition: 0}) {
		t.Fatalf("Decider(%q) = %v", set, d)
	}
}

func TestReasonAndReport(t *testing.T) {
	st := mirrorstate.NewPartitionState()
	st.State = mirrorstate.Stopping
	if r := Reason(st); r != "" {
		t.Fatalf("no cut: Reason = %q", r)
	}
	st.Cut = mirrorstate.Cut{Set: "a,b", At: -1}
	if r := Reason(st); !strings.Contains(r, "waiting until every partition's fetcher let go") {
		t.Fatalf("undecided: Reason = %q", r)
	}
	if tm, records, ms := Report(st); tm != 0 || records != 0 || ms != 0 {
		t.Fatalf("undecided: Report = %d %d %d", tm, records, ms)
	}
	st.Cut = mirrorstate.Cut{Set: "a,b", At: 10, Time: 1_700_000_000_000, Records: 3, Ms: 250}
	want := "consistent cut at 2023-11-14T22:13:20Z: 3 record(s), 250 ms of record time, beyond it moved to the divergence quarantine"
	if r := Reason(st); r != want {
		t.Fatalf("decided: Reason = %q, want %q", r, want)
	}
	if tm, records, ms := Report(st); tm != 1_700_000_000_000 || records != 3 || ms != 250 {
		t.Fatalf("decided: Report = %d %d %d", tm, records, ms)
	}
	st.State = mirrorstate.Mirroring
	if r := Reason(st); r != "" {
		t.Fatalf("mirroring: Reason = %q", r)
	}
}
