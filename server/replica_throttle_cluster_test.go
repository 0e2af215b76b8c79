package server_test

import (
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestReassignFollowerThrottle moves a partition of 4 MB to a new replica
// whose broker has follower.replication.throttled.rate set and whose
// topic names every replica (*) in follower.replication.throttled.replicas:
// the new replica holds no more than the rate allows over the window (a
// second's burst and one fetch of a second's worth on top), and once the
// throttle is removed the move completes with every byte.
func TestReassignFollowerThrottle(t *testing.T) {
	tandemtest.Long(t)
	testReassignThrottle(t, "follower")
}

// TestReassignLeaderThrottle: the same with the leader's throttle,
// leader.replication.throttled.rate on the old replica and the new one
// named as partition:broker in leader.replication.throttled.replicas.
func TestReassignLeaderThrottle(t *testing.T) {
	tandemtest.Long(t)
	testReassignThrottle(t, "leader")
}

func testReassignThrottle(t *testing.T, side string) {
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, 3*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.ProducerBatchMaxBytes(100_000))
	adm := kadm.NewClient(cl)
	const topic = "throttled"
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for range 400 {
		value := make([]byte, 10_000) // random, so that compression leaves 4 MB
		rand.Read(value)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Value: value})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	from := c.Leader(topic, 0)
	to := from%3 + 1
	want := logBytes(t, c.Broker(from).Broker(), topic, 0)

	const rate = 400_000
	set := func(res kadm.AlterConfigsResponses, err error) {
		t.Helper()
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = fmt.Errorf("%s: %w %s", r.Name, r.Err, r.ErrMessage)
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Kafka's validation of the list applies.
	if res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "follower.replication.throttled.replicas", Value: kmsg.StringPtr("0-1")}}, topic); err == nil && res[0].Err == nil {
		t.Fatal("a malformed follower.replication.throttled.replicas was accepted")
	}
	rateKey, replicasKey := side+".replication.throttled.rate", side+".replication.throttled.replicas"
	throttler, replicas := to, "*"
	if side == "leader" {
		throttler, replicas = from, fmt.Sprintf("0:%d", to)
	}
	set(adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: rateKey, Value: kmsg.StringPtr(fmt.Sprint(rate))}}, throttler))
	set(adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: replicasKey, Value: kmsg.StringPtr(replicas)}}, topic))
	described, err := adm.DescribeBrokerConfigs(ctx, throttler)
	if err != nil {
		t.Fatal(err)
	}
	if dc, err := described.On(fmt.Sprint(throttler), nil); err != nil || !slices.ContainsFunc(dc.Configs, func(c kadm.Config) bool {
		return c.Key == rateKey && c.MaybeValue() == fmt.Sprint(rate)
	}) {
		t.Fatalf("broker %d does not describe %s as %d: %v", throttler, rateKey, rate, err)
	}
	c.WaitFor("the throttle configs", func(img *metadata.Image) bool {
		return img.Topics[topic].Configs[replicasKey] == replicas && img.NodeConfigs[throttler][rateKey] != ""
	})

	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, 0, []int32{to})
	start := time.Now()
	if res, err := adm.AlterPartitionAssignments(ctx, req); err != nil || res[topic][0].Err != nil {
		t.Fatalf("reassign: %v %+v", err, res)
	}
	time.Sleep(3 * time.Second)
	got := int64(0)
	if ep := c.Broker(to).Broker().Engine().Partition(c.Image().Topics[topic].ID, 0); ep != nil {
		got = logBytes(t, c.Broker(to).Broker(), topic, 0)
	}
	window := time.Since(start).Seconds()
	// A second's worth at the start, and one fetch at the end: a second's
	// worth, or a batch (at most 100 kB here) beyond it, as fetches return
	// at least one batch.
	bound := int64(float64(rate)*window) + 2*rate + 100_000
	t.Logf("%s throttle: new replica: %d of %d bytes after %.1fs at %d B/s (bound %d)", side, got, want, window, rate, bound)
	if got > bound || got >= want {
		t.Fatalf("the throttled new replica holds %d bytes after %.1fs, more than %d at %d B/s", got, window, bound, rate)
	}

	var sb strings.Builder
	c.Broker(throttler).Broker().WritePrometheus(&sb)
	if family := fmt.Sprintf(`tandem_server_replication_throttled_bytes_total{side=%q} `, side); !strings.Contains(sb.String(), family) || strings.Contains(sb.String(), family+"0\n") {
		t.Fatalf("broker %d counted no throttled bytes on the %s side", throttler, side)
	}

	set(adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: rateKey}}, throttler))
	c.WaitFor("the move done", func(img *metadata.Image) bool {
		p := img.Topics[topic].Partitions[0]
		return slices.Equal(p.Replicas, []int32{to}) && len(p.AddingReplicas) == 0
	})
	if n := logBytes(t, c.Broker(to).Broker(), topic, 0); n != want {
		t.Fatalf("after the move the new replica holds %d bytes, want %d", n, want)
	}
}
