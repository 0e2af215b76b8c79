package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestClusterFigures runs a very short --cluster measurement: a standalone
// broker and a three-broker cluster in child processes, a follower that
// falls behind and catches up, two leader kills. It checks that every
// figure is there and reported, not how fast.
func TestClusterFigures(t *testing.T) {
	tandemtest.Long(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	r := &Runner{
		Sync: true, Dir: t.TempDir(), Seed: 7, Progress: &progress,
		Cluster: true, ClusterCatchUpBytes: 2 << 20, ClusterFailovers: 2,
		ClusterWorkload: Workload{Kind: Produce, RecordSize: 1024, Partitions: 3, Acks: -1, Compression: "none",
			Duration: 300 * time.Millisecond, Runs: 1, Seed: 7},
	}
	rep, err := r.Run(ctx)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Cluster
	if c == nil || c.RF1.Median <= 0 || c.RF3.Median <= 0 || c.RF3MBps.Median <= 0 || c.Ratio() <= 0 {
		t.Fatalf("produce figures missing: %+v", c)
	}
	if c.RF1CPU <= 0 || c.RF3CPU <= 0 || c.RF1Busy <= 0 || c.RF3Busy <= 0 || c.CPUBound() <= 0 {
		t.Fatalf("CPU figures missing: %+v", c)
	}
	if c.CatchUpBytes < 2<<20 || c.CatchUpRecords < (2<<20)/1024 || c.CatchUp <= 0 {
		t.Fatalf("catch-up not measured: %+v", c)
	}
	if len(c.Failovers) != 2 || c.Failovers[0] <= 0 || c.Failovers[1] <= 0 {
		t.Fatalf("failovers %v, want 2", c.Failovers)
	}
	var text, md bytes.Buffer
	rep.WriteText(&text)
	rep.WriteMarkdown(&md, "")
	for _, want := range []string{"RF=3, three brokers", "follower catch-up, 2 MiB behind", "(2 kills)", "CPU bound vs RF=1"} {
		if !strings.Contains(text.String(), want) || !strings.Contains(md.String(), want) {
			t.Errorf("reports lack %q:\n%s", want, text.String())
		}
	}
	if !strings.Contains(md.String(), "## Replication") {
		t.Errorf("markdown lacks the Replication section")
	}
}
