package server_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// logBytes returns the bytes of a broker's batches of topic-partition,
// read through the engine: what its segment files hold.
func logBytes(t *testing.T, b *server.Broker, topic string, partition int32) int64 {
	t.Helper()
	top := b.Metadata().Image().Topics[topic]
	ep := b.Engine().Partition(top.ID, partition)
	if ep == nil {
		t.Fatalf("%s-%d is not hosted", topic, partition)
	}
	var n int64
	for off := ep.Offsets().LogStart; ; {
		res, err := ep.Fetch(off, 1<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Batches) == 0 {
			return n
		}
		for _, bt := range res.Batches {
			n += int64(len(bt))
			h, err := engineHeader(bt)
			if err != nil {
				t.Fatal(err)
			}
			off = h + 1
		}
	}
}

func produceN(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, n int) {
	t.Helper()
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: 0, Value: fmt.Appendf(nil, "v%04d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
}

// TestDescribeLogDirs: a broker answers its data dir with the size of
// each partition it hosts (the bytes of its batches), an empty partition
// with 0, the disk's figures, and only the partitions asked for.
func TestDescribeLogDirs(t *testing.T) {
	dir := t.TempDir()
	b := tandemtest.StartInProcessIn(t, dir, nil)
	ctx := ctxFor(t, time.Minute)
	cl := tandemtest.Client(t, b.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "full"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "empty"); err != nil {
		t.Fatal(err)
	}
	produceN(t, ctx, cl, "full", 30)

	all, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	d, ok := all[1][abs]
	if len(all) != 1 || len(all[1]) != 1 || !ok || d.Err != nil {
		t.Fatalf("log dirs %+v, want broker 1's %s", all, abs)
	}
	if d.TotalBytes <= 0 || d.UsableBytes <= 0 || d.UsableBytes > d.TotalBytes {
		t.Fatalf("disk: total %d, usable %d", d.TotalBytes, d.UsableBytes)
	}
	want := map[string]map[int32]int64{
		"full":  {0: logBytes(t, b, "full", 0), 1: 0},
		"empty": {0: 0},
	}
	if want["full"][0] == 0 {
		t.Fatal("no bytes produced")
	}
	for topic, parts := range want {
		for p, size := range parts {
			got, ok := d.Topics.Lookup(topic, p)
			if !ok || got.Size != size {
				t.Fatalf("%s-%d: %+v (listed %v), want size %d", topic, p, got, ok, size)
			}
		}
	}
	if n := len(d.Topics["full"]) + len(d.Topics["empty"]); n != 3 {
		t.Fatalf("%d partitions described, want 3: %+v", n, d.Topics)
	}

	some, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{"full": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if ts := some[1][abs].Topics; len(ts) != 1 || len(ts["full"]) != 1 || ts["full"][0].Size != want["full"][0] {
		t.Fatalf("full-0 alone: %+v", ts)
	}
}

// TestClusterDescribeLogDirs: in a cluster each broker describes the
// partitions it holds a replica of, and every replica, once caught up, has
// the leader's size.
func TestClusterDescribeLogDirs(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 2, nil, "dirs"); err != nil {
		t.Fatal(err)
	}
	produceN(t, ctx, cl, "dirs", 30)
	var replicas []int32
	c.WaitFor("both replicas in the ISR", func(img *metadata.Image) bool {
		p := img.Topics["dirs"].Partitions[0]
		replicas = p.Replicas
		return len(p.ISR) == 2
	})
	leader := c.Leader("dirs", 0)
	size := logBytes(t, c.Broker(leader).Broker(), "dirs", 0)
	deadline := time.Now().Add(time.Minute)
	for {
		all, err := adm.DescribeAllLogDirs(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var hosts []int32
		same := len(all) == 3
		for id, dirs := range all {
			for _, d := range dirs {
				if p, ok := d.Topics.Lookup("dirs", 0); ok {
					hosts = append(hosts, id)
					same = same && p.Size == size
				}
			}
		}
		slices.Sort(hosts)
		want := slices.Sorted(slices.Values(replicas))
		if !slices.Equal(hosts, want) {
			t.Fatalf("dirs-0 described on %v, replicas %v", hosts, want)
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicas' sizes never matched the leader's %d: %+v", size, all)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
