package uuid

import (
	"encoding/json"
	"testing"
)

func TestTextRoundTrip(t *testing.T) {
	u := Random()
	b, err := json.Marshal(map[UUID]UUID{u: u})
	if err != nil {
		t.Fatal(err)
	}
	var back map[UUID]UUID
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back[u] != u || len(back) != 1 {
		t.Fatalf("%s came back as %v (json %s)", u, back, b)
	}
	var v UUID
	if err := v.UnmarshalText([]byte("abc")); err == nil {
		t.Error("a short UUID parsed")
	}
	if err := v.UnmarshalText([]byte("zz" + u.String()[2:])); err == nil {
		t.Error("a UUID with non-hex digits parsed")
	}
}

func TestRandom(t *testing.T) {
	seen := map[UUID]bool{}
	for range 1000 {
		u := Random()
		if u.IsZero() || seen[u] || u.Base64()[0] == '-' || u[6]>>4 != 4 || u[8]>>6 != 2 {
			t.Fatalf("Random gave %s (%s)", u, u.Base64())
		}
		seen[u] = true
	}
}
