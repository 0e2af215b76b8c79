package mirror

import (
	"testing"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// TestByReason: a refused failover names each reason once, with the
// partitions it holds for (an unreachable source printed the same text,
// MIRROR_SOURCE_UNAVAILABLE's description included, once per partition
// and again for the error itself).
func TestByReason(t *testing.T) {
	down := "source cluster a:1 unreachable (a fetch from broker 2): connection refused: " + mirrorproto.ErrMirrorSourceUnavailable.Error()
	got := byReason([]string{
		"orders-0: " + down,
		"orders-1: " + down + " (since 2026-12-05T06:16:15Z)",
		"orders-2 has no leader",
		"audit-0: " + down,
		"audit-1: lag 3",
	})
	want := "orders-0, orders-1, audit-0: source cluster a:1 unreachable (a fetch from broker 2): connection refused; orders-2 has no leader; audit-1: lag 3"
	if got != want {
		t.Fatalf("byReason:\n got %s\nwant %s", got, want)
	}
}
