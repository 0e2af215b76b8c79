package replication

import (
	"testing"
	"time"
)

// TestReplicaQuota: a second's worth of bytes passes at once; beyond it,
// the quota waits as long as the excess takes at the rate.
func TestReplicaQuota(t *testing.T) {
	var q Quota
	now := time.Unix(1000, 0)
	if w := q.Wait(1000, now); w != 0 {
		t.Fatalf("fresh quota waits %v", w)
	}
	q.Record(1000, 1000, now)
	if w := q.Wait(1000, now); w != 0 {
		t.Fatalf("a second's worth waits %v", w)
	}
	q.Record(500, 1000, now)
	if w := q.Wait(1000, now); w != 500*time.Millisecond {
		t.Fatalf("500 bytes over at 1000 B/s wait %v, want 500ms", w)
	}
	if w := q.Wait(1000, now.Add(500*time.Millisecond)); w != 0 {
		t.Fatalf("after the excess drained: wait %v", w)
	}
	if w := q.Wait(1000, now.Add(time.Hour)); w != 0 || q.tokens != 1000 {
		t.Fatalf("an idle quota holds %v tokens (wait %v), want a second's worth", q.tokens, w)
	}
}
