package groups

import (
	"fmt"
	"testing"

	"github.com/tandem-kafka/tandem/internal/uuid"
)

func topicIDn(n byte) uuid.UUID { return uuid.UUID{n} }

// input builds an assignor input: topics t1..tn with the given partition
// counts, and members subscribed to every topic.
func input(members []string, parts ...int32) *assignInput {
	in := &assignInput{topics: map[uuid.UUID]*assignTopic{}}
	var ids []uuid.UUID
	for i, n := range parts {
		id := topicIDn(byte(i + 1))
		in.topics[id] = &assignTopic{id: id, name: fmt.Sprintf("t%d", i+1), partitions: n}
		ids = append(ids, id)
	}
	for _, m := range members {
		in.members = append(in.members, assignMember{id: m, topics: ids})
	}
	return in
}

// check verifies that every partition is assigned exactly once.
func check(t *testing.T, in *assignInput, out map[string]assignment) map[string]int {
	t.Helper()
	owner := map[tpid]string{}
	counts := map[string]int{}
	for m, a := range out {
		for id, ps := range a {
			for _, p := range ps {
				if o, dup := owner[tpid{id, p}]; dup {
					t.Fatalf("partition %v-%d assigned to %s and %s", id, p, o, m)
				}
				owner[tpid{id, p}] = m
				counts[m]++
			}
		}
	}
	for id, at := range in.topics {
		for p := range at.partitions {
			if _, ok := owner[tpid{id, p}]; !ok {
				t.Fatalf("partition %s-%d unassigned", at.name, p)
			}
		}
	}
	return counts
}

func TestAssignUniformBalanced(t *testing.T) {
	in := input([]string{"a", "b", "c"}, 4, 3)
	counts := check(t, in, assignUniform(in))
	for m, n := range counts {
		if n < 2 || n > 3 {
			t.Errorf("%s has %d partitions, want 2 or 3", m, n)
		}
	}
}

// A new member takes partitions from the others, which keep the rest:
// only what must move moves.
func TestAssignUniformSticky(t *testing.T) {
	in := input([]string{"a", "b"}, 6)
	first := assignUniform(in)
	in = input([]string{"a", "b", "c"}, 6)
	in.members[0].prev, in.members[1].prev = first["a"], first["b"]
	second := assignUniform(in)
	counts := check(t, in, second)
	moved := 0
	for _, m := range []string{"a", "b"} {
		for id, ps := range first[m] {
			for _, p := range ps {
				if !second[m].has(id, p) {
					moved++
				}
			}
		}
	}
	if moved != 2 || counts["c"] != 2 {
		t.Errorf("moved %d partitions, c has %d; want 2 and 2 (first %v, second %v)", moved, counts["c"], first, second)
	}
}

// With racks known, each member gets the partitions whose replica is in
// its rack, balance permitting.
func TestAssignRackAware(t *testing.T) {
	for name, assign := range map[string]func(*assignInput) map[string]assignment{"uniform": assignUniform, "range": assignRange} {
		in := input([]string{"a", "b"}, 4)
		tp := in.topics[topicIDn(1)]
		tp.racks = [][]string{{"r2"}, {"r1"}, {"r2"}, {"r1"}}
		in.members[0].rack, in.members[1].rack = "r1", "r2"
		out := assign(in)
		check(t, in, out)
		if !out["a"].has(tp.id, 1) || !out["a"].has(tp.id, 3) || !out["b"].has(tp.id, 0) || !out["b"].has(tp.id, 2) {
			t.Errorf("%s: %v, want a (r1) with 1,3 and b (r2) with 0,2", name, out)
		}
	}
}

func TestAssignRange(t *testing.T) {
	in := input([]string{"a", "b", "c"}, 7)
	out := assignRange(in)
	check(t, in, out)
	id := topicIDn(1)
	for m, want := range map[string][]int32{"a": {0, 1, 2}, "b": {3, 4}, "c": {5, 6}} {
		if fmt.Sprint(out[m][id]) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", m, out[m][id], want)
		}
	}
}

// Members subscribed to different topics get only what they subscribed to.
func TestAssignHeterogeneous(t *testing.T) {
	in := input([]string{"a", "b"}, 2, 2)
	in.members[1].topics = in.members[1].topics[1:] // b only reads t2
	for name, assign := range map[string]func(*assignInput) map[string]assignment{"uniform": assignUniform, "range": assignRange} {
		out := assign(in)
		check(t, in, out)
		if len(out["b"][topicIDn(1)]) != 0 || len(out["a"][topicIDn(1)]) != 2 {
			t.Errorf("%s: %v", name, out)
		}
	}
}

// Share groups: every partition to at least one member; with more
// members than partitions, members share them.
func TestAssignShare(t *testing.T) {
	in := input([]string{"a", "b", "c"}, 2)
	out := assignShare(in)
	id := topicIDn(1)
	seen := map[int32]int{}
	for _, m := range []string{"a", "b", "c"} {
		if len(out[m][id]) != 1 {
			t.Errorf("%s: %v, want one partition", m, out[m])
		}
		for _, p := range out[m][id] {
			seen[p]++
		}
	}
	if seen[0] == 0 || seen[1] == 0 {
		t.Errorf("partitions not all assigned: %v", out)
	}
	in = input([]string{"a", "b"}, 5)
	check(t, in, assignShare(in))
}
