package bench

import "testing"

// The cost table sets the destination's CPU per GB against the produce at
// the maximum and against the e2e workload of the same records (a produce
// at the same offered rate with one reader), and leaves the e2e cells
// empty for workloads not offered at that rate.
func TestCostTableAgainstE2E(t *testing.T) {
	w := Workload{RecordSize: 1024, Partitions: 6, Acks: -1, Compression: "none"}
	e2e, mirror, rtt := w, w, w
	e2e.Kind, mirror.Kind, rtt.Kind = EndToEnd, Mirror, MirrorRTT
	rep := &Report{Results: []Result{
		{Workload: e2e, Target: "tandem", Latency: &Latency{OfferedRecsPerSec: 1000}, CPUSecPerGB: 3.2},
		{Workload: mirror, Target: "tandem", CPUSecPerGB: 1.6, Mirror: &MirrorLag{SrcCPUSecPerGB: 2, ProduceCPUSecPerGB: 2}},
		{Workload: rtt, Target: "tandem", CPUSecPerGB: 4, Mirror: &MirrorLag{SrcCPUSecPerGB: 2, ProduceCPUSecPerGB: 2}},
	}}
	tab := rep.costTable()
	if len(tab.rows) != 2 {
		t.Fatalf("%d rows, want 2: %v", len(tab.rows), tab.rows)
	}
	col := func(name string) int {
		for i, h := range tab.head {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %q in %v", name, tab.head)
		return -1
	}
	for _, c := range []struct {
		row                             int
		produce, e2eCPU, destinationE2E string
	}{
		{0, "0.80", "3.20", "0.50"},
		{1, "2.00", "-", "-"},
	} {
		r := tab.rows[c.row]
		if got := r[col("destination/produce")]; got != c.produce {
			t.Errorf("row %d destination/produce %s, want %s", c.row, got, c.produce)
		}
		if got := r[col("Tandem e2e CPU s/GB, same rate")]; got != c.e2eCPU {
			t.Errorf("row %d e2e CPU %s, want %s", c.row, got, c.e2eCPU)
		}
		if got := r[col("destination/e2e")]; got != c.destinationE2E {
			t.Errorf("row %d destination/e2e %s, want %s", c.row, got, c.destinationE2E)
		}
	}
}
