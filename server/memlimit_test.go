package server

import (
	"os"
	"runtime/debug"
	"testing"
	"time"
)

// TestMemoryLimitFollowsPartitions: a broker that owns the process's
// soft memory limit sets it to 3/4 of its memory budget and
// partitionMemory for each partition it hosts, as topics come and go.
// The budget alone was the limit, below the live heap of 50,000
// partitions, and the collector then ran without pause.
func TestMemoryLimitFollowsPartitions(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: the broker leaves the limit alone")
	}
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	b := startBroker(t, map[string]string{"tandem.memory.budget": "67108864"})
	b.SetProcessMemoryLimit()
	want := func(partitions int64) {
		t.Helper()
		limit := int64(48<<20) + partitionMemory*partitions
		deadline := time.Now().Add(10 * time.Second)
		for debug.SetMemoryLimit(-1) != limit && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := debug.SetMemoryLimit(-1); got != limit {
			t.Fatalf("limit %d with %d partitions hosted, want %d", got, partitions, limit)
		}
	}
	base := int64(b.engine.Len()) // the broker's own topics, if any yet
	want(base)
	createTopic(t, b, "t", 12, nil)
	want(base + 12)
	createTopic(t, b, "u", 3, nil)
	want(base + 15)
}
