package checker

import (
	"slices"
	"strings"
	"testing"
)

// TestCheck: a value acknowledged and read once at its place passes; one
// not read is lost, one read twice duplicated, one read elsewhere moved.
func TestCheck(t *testing.T) {
	var h History
	h.Acked("ok", Place{0, 0})
	h.Acked("lost", Place{0, 1})
	h.Acked("dup", Place{1, 0})
	h.Acked("moved", Place{2, 5})
	read := []Record{
		{"ok", Place{0, 0}},
		{"dup", Place{1, 0}},
		{"dup", Place{1, 1}},
		{"moved", Place{2, 4}},
		{"unacked", Place{2, 5}}, // a write whose answer was lost may be there
	}
	r := h.Check(read)
	if r.OK() || r.Acked != 4 || r.Read != 5 || len(r.Lost) != 1 || len(r.Duplicated) != 1 || len(r.Moved) != 1 {
		t.Fatalf("report %+v", r)
	}
	if !strings.HasPrefix(r.Lost[0], "lost ") || !strings.HasPrefix(r.Duplicated[0], "dup ") || !strings.HasPrefix(r.Moved[0], "moved ") {
		t.Fatalf("report %+v", r)
	}
	if r := h.Check([]Record{{"ok", Place{0, 0}}, {"lost", Place{0, 1}}, {"dup", Place{1, 0}}, {"moved", Place{2, 5}}}); !r.OK() {
		t.Fatalf("everything read once in place: %v", r)
	}
}

// TestCompareReplicas: replicas that are the same batches pass; one with
// a batch more, on either side, another batch at an offset, or a leader
// epoch going down are named.
func TestCompareReplicas(t *testing.T) {
	b := func(base int64, epoch int32, v string) Batch {
		return Batch{Base: base, Last: base, Epoch: epoch, Raw: []byte(v)}
	}
	log := []Batch{b(0, 1, "a"), b(1, 1, "b"), b(2, 2, "c")}
	node := func(name string, bs []Batch) NodeLog {
		return NodeLog{Node: name, Parts: map[string][]Batch{"t-0": bs}}
	}
	for _, c := range []struct {
		name  string
		other []Batch
		want  string
	}{
		{"same", log, ""},
		{"shorter", log[:2], "3 batches vs 2, the longer one goes on with [2,2] epoch 2"},
		{"longer", append(slices.Clone(log), b(3, 2, "d")), "3 batches vs 4, the longer one goes on with [3,3] epoch 2"},
		{"other bytes", []Batch{b(0, 1, "a"), b(1, 1, "x"), b(2, 2, "c")}, "batch 1: [1,1] epoch 1 vs [1,1] epoch 1 (same bytes false)"},
		{"epoch down", []Batch{b(0, 1, "a"), b(1, 1, "b"), b(2, 2, "c"), b(3, 1, "d")}, "epoch 1 at offset 3 after epoch 2 at 2"},
	} {
		rep := CompareReplicas([]NodeLog{node("n1", log), node("n2", c.other)}, nil)
		got := strings.Join(rep.Problems, "; ")
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
