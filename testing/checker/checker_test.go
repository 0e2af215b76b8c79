package checker

import (
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
