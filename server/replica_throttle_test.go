package server

import (
	"testing"
	"time"
)

func TestParseThrottledReplicas(t *testing.T) {
	for _, tc := range []struct {
		in     string
		ok     bool
		has    [][2]int32
		hasNot [][2]int32
	}{
		{"", true, nil, [][2]int32{{0, 1}}},
		{"*", true, [][2]int32{{0, 1}, {7, 3}}, nil},
		{"0:4", true, [][2]int32{{0, 4}}, [][2]int32{{1, 4}, {0, 3}}},
		{"[0:4, 2:1]", true, [][2]int32{{0, 4}, {2, 1}}, [][2]int32{{2, 4}}},
		{"0-4", false, nil, nil},
		{"0:", false, nil, nil},
		{"a:1", false, nil, nil},
		{"-1:2", false, nil, nil},
		{"0:1,*", false, nil, nil},
	} {
		s, err := parseThrottledReplicas(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v", tc.in, err)
			continue
		}
		for _, pb := range tc.has {
			if !s.has(pb[0], pb[1]) {
				t.Errorf("%q does not throttle %d:%d", tc.in, pb[0], pb[1])
			}
		}
		for _, pb := range tc.hasNot {
			if s.has(pb[0], pb[1]) {
				t.Errorf("%q throttles %d:%d", tc.in, pb[0], pb[1])
			}
		}
		if reason := throttledReplicas(tc.in); (reason == "") != tc.ok {
			t.Errorf("%q: config validation %q", tc.in, reason)
		}
	}
}

// TestReplicaQuota: a second's worth of bytes passes at once; beyond it,
// the quota waits as long as the excess takes at the rate.
func TestReplicaQuota(t *testing.T) {
	var q replicaQuota
	now := time.Unix(1000, 0)
	if w := q.wait(1000, now); w != 0 {
		t.Fatalf("fresh quota waits %v", w)
	}
	q.record(1000, 1000, now)
	if w := q.wait(1000, now); w != 0 {
		t.Fatalf("a second's worth waits %v", w)
	}
	q.record(500, 1000, now)
	if w := q.wait(1000, now); w != 500*time.Millisecond {
		t.Fatalf("500 bytes over at 1000 B/s wait %v, want 500ms", w)
	}
	if w := q.wait(1000, now.Add(500*time.Millisecond)); w != 0 {
		t.Fatalf("after the excess drained: wait %v", w)
	}
	if w := q.wait(1000, now.Add(time.Hour)); w != 0 || q.tokens != 1000 {
		t.Fatalf("an idle quota holds %v tokens (wait %v), want a second's worth", q.tokens, w)
	}
}
