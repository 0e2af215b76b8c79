package raftmeta

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// TestPartitionBudget: the budget counts what the image hosts, refuses
// counts before assignment, and refuses an assignment that piles onto one
// broker although the cluster as a whole has room.
func TestPartitionBudget(t *testing.T) {
	img := &metadata.Image{Brokers: map[int32]metadata.Broker{1: {ID: 1}, 2: {ID: 2}}, Topics: map[string]*metadata.Topic{
		"t": {Name: "t", Partitions: []metadata.Partition{{Replicas: []int32{1, 2}}, {Replicas: []int32{2, 1}}}},
	}}
	b := newPartitionBudget(img, PartitionLimits{PerRequest: 6, PerBroker: 5})
	if b.total != 4 || b.hosted[1] != 2 || b.hosted[2] != 2 {
		t.Fatalf("counted %d replicas, %v", b.total, b.hosted)
	}
	wantCode(t, b.check("x", 7, 1, 2), kerr.InvalidPartitions)     // more than a request may add
	wantCode(t, b.check("x", 4, 2, 2), kerr.PolicyViolation)       // 8 replicas, room for 6
	wantCode(t, b.check("x", 1<<40, 1, 2), kerr.InvalidPartitions) // no overflow
	if err := b.check("x", 3, 1, 2); err != nil {
		t.Fatal(err)
	}
	wantCode(t, b.add("x", [][]int32{{1}, {1}, {1}, {1}}), kerr.PolicyViolation) // broker 1 would host 6
	if b.total != 4 || b.added != 0 {
		t.Fatalf("a refused assignment was counted: total %d, added %d", b.total, b.added)
	}
	if err := b.add("x", [][]int32{{1}, {2}, {1}}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, b.check("y", 4, 1, 2), kerr.PolicyViolation) // 3 + 4 > 6 per request
	if err := b.check("y", 3, 1, 2); err != nil {
		t.Fatal(err)
	}
	wantCode(t, b.add("y", [][]int32{{2}, {2}, {2}}), kerr.PolicyViolation) // broker 2 would host 6
	if err := (PartitionLimits{}).CheckCount("z", DefaultMaxPartitionsPerRequest); err != nil {
		t.Fatalf("the default per-request limit refused %d partitions: %v", DefaultMaxPartitionsPerRequest, err)
	}
}
