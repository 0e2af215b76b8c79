package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// KIP-848 consumer groups and KIP-932 share groups against the built
// binary, with clients of two families: franz-go's KIP-848 consumer and
// share consumer, librdkafka's (kcat's) classic consumer.

// startKgo848 is startKgo with the consumer protocol of KIP-848: the
// broker assigns the partitions.
func startKgo848(t *testing.T, addr, group, topic string, c *collector) groupMember {
	return runKgo(t, addr, group, topic, c, kgo.ServerSideBalancer())
}

// TestGroupFranzGo848 runs the group scenario (members leave, others take
// over, new members resume at the committed offsets) with KIP-848.
func TestGroupFranzGo848(t *testing.T) { runGroupScenario(t, startKgo848) }

// startShare starts a franz-go share consumer that accepts every record;
// stop sends the acknowledgements not sent yet as it leaves the group.
func startShare(t *testing.T, addr, group, topic string, c *collector) *kgoMember {
	cl := tandemtest.Client(t, addr, kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	m := &kgoMember{cl: cl, done: make(chan struct{}), quit: cancel}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				c.add(r.Value)
				r.Ack(kgo.AckAccept)
			})
		}
	}()
	return m
}

// setShareReset makes a share group start at the beginning of the log.
func setShareReset(t *testing.T, addr, group string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	v := "earliest"
	req.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeGroupConfig, ResourceName: group,
		Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "share.auto.offset.reset", Value: &v}}}}
	resp, err := req.RequestWith(context.Background(), tandemtest.Client(t, addr))
	if err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("set share.auto.offset.reset: %v %+v", err, resp)
	}
}

// shareStarts sums a share group's start offsets.
func shareStarts(t *testing.T, addr, group string) int64 {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	req.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: group}}
	resp, err := req.RequestWith(context.Background(), tandemtest.Client(t, addr))
	if err != nil || resp.Groups[0].ErrorCode != 0 {
		t.Fatalf("DescribeShareGroupOffsets: %v %+v", err, resp)
	}
	var sum int64
	for _, tt := range resp.Groups[0].Topics {
		for _, p := range tt.Partitions {
			sum += max(p.StartOffset, 0)
		}
	}
	return sum
}

// TestGroupsAllKinds: one topic read at the same time by a KIP-848
// consumer group (franz-go), a share group (franz-go's share consumer)
// and a classic group (kcat): each group gets every record, the broker
// lists and describes each with its type, and the share group's start
// offsets reach the log end once everything is accepted.
func TestGroupsAllKinds(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir(), groupArgs...)
	const topic, n = "all", 2000
	tandemtest.CreateTopic(t, p.Addr, topic, numPartitions)
	setShareReset(t, p.Addr, "kinds-share")
	produceValues(t, p.Addr, topic, 0, n)

	consumer, share, classic := &collector{seen: map[string]int{}}, &collector{seen: map[string]int{}}, &collector{seen: map[string]int{}}
	var stops []func()
	for range 2 {
		stops = append(stops, startKgo848(t, p.Addr, "kinds-consumer", topic, consumer).stop,
			startShare(t, p.Addr, "kinds-share", topic, share).stop,
			startKcat(t, p.Addr, "kinds-classic", topic, classic).stop)
	}
	for name, c := range map[string]*collector{"consumer": consumer, "share": share, "classic": classic} {
		eventually(t, "the "+name+" group to read every record", func() bool { return c.has(0, n) })
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(tandemtest.Client(t, p.Addr))
	eventually(t, "three groups listed with their types", func() bool {
		listed, err := adm.ListGroups(ctx)
		return err == nil && listed["kinds-consumer"].GroupType == "consumer" && listed["kinds-share"].GroupType == "share" &&
			listed["kinds-classic"].GroupType == "classic" && listed["kinds-consumer"].State == "Stable"
	})
	cg, err := adm.DescribeConsumerGroups(ctx, "kinds-consumer")
	if err != nil || cg["kinds-consumer"].Err != nil || len(cg["kinds-consumer"].Members) != 2 {
		t.Fatalf("ConsumerGroupDescribe: %v %+v", err, cg)
	}
	sg, err := adm.DescribeShareGroups(ctx, "kinds-share")
	if err != nil || sg["kinds-share"].Err != nil || len(sg["kinds-share"].Members) != 2 {
		t.Fatalf("ShareGroupDescribe: %v %+v", err, sg)
	}
	dg, err := adm.DescribeGroups(ctx, "kinds-classic", "kinds-consumer")
	if err != nil || dg["kinds-classic"].Err != nil || dg["kinds-consumer"].ProtocolType != "consumer" || len(dg["kinds-consumer"].Members) != 2 {
		t.Fatalf("DescribeGroups: %v %+v", err, dg)
	}
	var wg sync.WaitGroup
	for _, stop := range stops {
		wg.Add(1)
		go func() { defer wg.Done(); stop() }()
	}
	wg.Wait()
	eventually(t, "the share group's start offsets to reach the log end", func() bool { return shareStarts(t, p.Addr, "kinds-share") == n })
}

// TestShareKill9: records a share consumer accepted are acknowledged
// durably: after kill -9 of the broker none of them is delivered again,
// while records released, and records acquired but not acknowledged when
// the broker died, are delivered again (at least once).
func TestShareKill9(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir(), groupArgs...)
	const topic, group, n = "sk", "sk-share", 600
	tandemtest.CreateTopic(t, p.Addr, topic, 1)
	setShareReset(t, p.Addr, group)
	produceValues(t, p.Addr, topic, 0, n)

	accepted := map[string]bool{}
	cl := tandemtest.Client(t, p.Addr, kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(accepted) < n/2 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(accepted) < n/2 {
				accepted[string(r.Value)] = true
				r.Ack(kgo.AckAccept)
			} else {
				r.Ack(kgo.AckRelease)
			}
		})
	}
	if err := cl.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	// Another member acquires records and the broker dies before it
	// acknowledges them.
	raw := tandemtest.Client(t, p.Addr)
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = group, "raw", []string{topic}
	hbr, err := hb.RequestWith(ctx, raw)
	if err != nil || hbr.ErrorCode != 0 || hbr.Assignment == nil {
		t.Fatalf("ShareGroupHeartbeat: %v %+v", err, hbr)
	}
	f := kmsg.NewPtrShareFetchRequest()
	f.GroupID, f.MemberID = kmsg.StringPtr(group), kmsg.StringPtr("raw")
	f.MaxWaitMillis, f.MinBytes, f.MaxBytes, f.MaxRecords, f.BatchSize = 1000, 1, 1<<20, 100, 100
	f.Topics = []kmsg.ShareFetchRequestTopic{{TopicID: hbr.Assignment.TopicPartitions[0].TopicID,
		Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0, PartitionMaxBytes: 1 << 20}}}}
	fr, err := f.RequestWith(ctx, raw)
	if err != nil || fr.ErrorCode != 0 || len(fr.Topics) == 0 || len(fr.Topics[0].Partitions[0].AcquiredRecords) == 0 {
		t.Fatalf("ShareFetch: %v %+v", err, fr)
	}
	p.Kill9()
	p.Restart()

	c := &collector{seen: map[string]int{}}
	m := startShare(t, p.Addr, group, topic, c)
	defer m.stop()
	eventually(t, "every record not accepted to be delivered", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.seen) >= n-len(accepted)
	})
	time.Sleep(500 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	for v := range c.seen {
		if accepted[v] {
			t.Errorf("%s was accepted before kill -9 and delivered again", v)
		}
	}
	for i := range n {
		if v := groupValue(i); !accepted[v] && c.seen[v] == 0 {
			t.Errorf("%s was never delivered", v)
		}
	}
}
