package keys

import (
	"bytes"
	"testing"
)

// TestLayout pins the bytes of each kind of key: data dirs written by one
// version are read by the next, so a change here is a format change.
func TestLayout(t *testing.T) {
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	part := []byte{0, 0, 0, 7}
	data := append(append([]byte{0x02, 'D'}, id[:]...), part...)
	for _, c := range []struct {
		name      string
		got, want []byte
	}{
		{"version", Version, []byte{0x02, 'V'}},
		{"state", State(id, 7), append(append([]byte{0x02, 'P'}, id[:]...), part...)},
		{"index", Index(id, 7, 258), append(append(bytes.Clone(data), 'I'), 0, 0, 0, 0, 0, 0, 1, 2)},
		{"recovery", Recovery(id, 7), append(bytes.Clone(data), 'R')},
		{"epoch", Epoch(id, 7, 3), append(append(bytes.Clone(data), 'E'), 0, 0, 0, 3)},
		{"aborted entry", AbortedEntry(id, 7, 1, 2), append(append(bytes.Clone(data), 'A'), 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2)},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s key %x, want %x", c.name, c.got, c.want)
		}
	}
	if got := Suffix64(Index(id, 7, 258)); got != 258 {
		t.Errorf("Suffix64 %d, want 258", got)
	}
	if got := Suffix32(Epoch(id, 7, 3)); got != 3 {
		t.Errorf("Suffix32 %d, want 3", got)
	}
	if end := PrefixEnd([]byte{1, 0xff}); !bytes.Equal(end, []byte{2}) {
		t.Errorf("PrefixEnd(01ff) %x, want 02", end)
	}
	if end := PrefixEnd([]byte{0xff}); end != nil {
		t.Errorf("PrefixEnd(ff) %x, want none", end)
	}
}
