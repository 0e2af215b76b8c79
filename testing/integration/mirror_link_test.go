package integration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/faultproxy"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestMirrorLongLinkAtScale mirrors 400 partitions of eight topics
// across a 60 ms round trip (a WAN proxy the source advertises, with a
// 4 MiB window: one Linux connection's untuned in-flight bytes) while
// producers keep writing to them, with transactions and every codec,
// the source's leader epochs of a topic jump (the destination fences and
// bumps its own) and another partition has an unclean election (the
// destination truncates at the diverging epoch), then cuts the link and
// restores it: the destination ends with the source's batches byte for
// byte (offsets, epochs, producer state) in every partition.
// Underneath: several fetchers per source broker (one per 20 ms of round
// trip), their fetch sessions, their fetch sizes growing, each round
// written before the last one is durable.
func TestMirrorLongLinkAtScale(t *testing.T) {
	tandemtest.Long(t) // a minute: the full tier only
	wan, err := faultproxy.ListenWAN("", 60*time.Millisecond, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wan.Close() })
	src := startMirrorCluster(t, wan.Addr())
	wan.SetTarget(src.addr())
	dst := startMirrorCluster(t, "")
	const topics, partitions = 8, 50
	for i := range topics {
		createMirrorTopic(t, src, fmt.Sprintf("wide%d", i), partitions)
	}
	produceMixed(t, src, "wide0", 3000)
	createMirrorTopic(t, src, "wide-unclean", 1) // no load: its log is cut below
	produceMixed(t, src, "wide-unclean", 600)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": wan.Addr(), "mirror.topics.include": "wide.*"}); err != nil {
		t.Fatal(err)
	}
	// Load on every topic while the mirror starts, and across the cut.
	var produced atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		cl := src.client(kgo.ProducerLinger(5 * time.Millisecond))
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			recs := make([]*kgo.Record, 200)
			for j := range recs {
				k, v, _ := genRecord(10_000_000 + i*200 + j)
				recs[j] = &kgo.Record{Topic: fmt.Sprintf("wide%d", (i+j)%topics), Key: k, Value: v}
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				done <- err
				return
			}
			produced.Add(int64(len(recs)))
		}
	}()
	waitFor(t, 2*time.Minute, "every topic to be mirrored", func() bool {
		for i := range topics {
			if dst.topic(fmt.Sprintf("wide%d", i)) == nil {
				return false
			}
		}
		return true
	})
	// Source epochs jump while the load runs: SLE above the
	// destination's, which fences and bumps.
	for p := range int32(partitions) {
		sp := src.partition("wide2", p)
		if _, err := src.b.Metadata().BumpLeaderEpoch(ctx, src.topic("wide2").ID, p, sp.Offsets().LeaderEpoch+30); err != nil {
			t.Fatal(err)
		}
	}
	// An unclean election: the source loses a tail the destination has,
	// and a new epoch writes other records at the same offsets.
	caughtUp(t, src, dst, "m", "wide-unclean", time.Minute)
	up := src.partition("wide-unclean", 0)
	if err := up.Truncate(up.Offsets().LogEnd - 40); err != nil {
		t.Fatal(err)
	}
	if _, err := src.b.Metadata().BumpLeaderEpoch(ctx, src.topic("wide-unclean").ID, 0, up.Offsets().LeaderEpoch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the unclean source's epoch bump", func() bool { return up.EpochAt(up.Offsets().LogEnd) > 0 })
	for i := range 5 {
		if err := produceOne(t, src, "wide-unclean", 0, fmt.Sprintf("after the unclean election %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	wan.Down()
	time.Sleep(2 * time.Second)
	wan.Up()
	time.Sleep(3 * time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("produce to the source: %v", err)
	}
	if produced.Load() == 0 {
		t.Fatal("nothing produced under the mirror")
	}
	produceMixed(t, src, "wide1", 3000) // transactions across the end
	for i := range topics {
		caughtUp(t, src, dst, "m", fmt.Sprintf("wide%d", i), 2*time.Minute)
	}
	caughtUp(t, src, dst, "m", "wide-unclean", time.Minute)
	sameLog(t, "wide-unclean-0 after the unclean election", up, dst.partition("wide-unclean", 0))
	bumped := 0
	for p := range int32(partitions) {
		sp := src.partition("wide2", p)
		se := sp.EpochAt(sp.Offsets().LogEnd - 1) // the newest batch's
		if se >= 30 {
			bumped++
		}
		if de := dst.partition("wide2", p).Offsets().LeaderEpoch; de <= se {
			t.Errorf("wide2-%d: destination leader epoch %d, not above its newest mirrored batch's %d", p, de, se)
		}
	}
	if bumped == 0 {
		t.Fatal("no batch of the bumped source epochs was mirrored: nothing was fenced")
	}
	for i := range topics {
		name := fmt.Sprintf("wide%d", i)
		for p := range int32(partitions) {
			sameLog(t, fmt.Sprintf("%s-%d", name, p), src.partition(name, p), dst.partition(name, p))
		}
	}
	if f := wan.Forwarded(); f[1] == 0 {
		t.Fatalf("the WAN proxy carried nothing back: %v", f)
	}
	// Three fetchers for a 60 ms round trip, each with its own requests.
	var sb strings.Builder
	dst.b.WritePrometheus(&sb)
	fetchers := 0
	for line := range strings.Lines(sb.String()) {
		if strings.HasPrefix(line, "tandem_mirror_fetch_requests_total{") && !strings.HasSuffix(strings.TrimSpace(line), " 0") {
			fetchers++
		}
	}
	if fetchers < 3 {
		t.Fatalf("%d fetchers sent requests over a 60 ms round trip, want 3 or more", fetchers)
	}
}
