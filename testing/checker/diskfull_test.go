package checker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestClusterDiskFull: the disk of a partition's leader fills up. Its
// leadership moves to another in-sync replica (as when a Kafka broker's
// log directory goes offline), so acks=all writes to every partition go
// on; once space is freed it rejoins every ISR. Nothing acknowledged is
// lost.
func TestClusterDiskFull(t *testing.T) {
	tandemtest.Long(t)
	c := tandemtest.StartProcCluster(t, 3, map[string]string{"min.insync.replicas": "2"})
	fill := onTmpfs(t, c.Broker(3))
	if fill == nil {
		t.Skip("needs a tmpfs (root)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seeds := kgo.SeedBrokers(c.Addrs()...)
	admCl := tandemtest.Client(t, c.Addrs()[0], seeds)
	const topic = "filled"
	// Partition 0 is led by broker 3: the first replica of an assignment
	// leads.
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	rt.ReplicaAssignment = []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{3, 1, 2}}}
	req.Topics = append(req.Topics, rt)
	cresp, err := req.RequestWith(ctx, admCl)
	if err == nil && cresp.Topics[0].ErrorCode != 0 {
		err = kerr.ErrorForCode(cresp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatal(err)
	}
	const led = int32(0)
	c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool { return ps[led].Leader == 3 && len(ps[led].ISR) == 3 })

	var h checker.History
	cl := tandemtest.Client(t, c.Addrs()[0], seeds, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(30*time.Second))
	produce := func(what string, n int) {
		t.Helper()
		for i := range n {
			v := fmt.Sprintf("%s-%d", what, i)
			r := &kgo.Record{Partition: led, Value: []byte(v)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("%s: produce %s to partition %d: %v", what, v, led, err)
			}
			h.Acked(v, checker.Place{Partition: r.Partition, Offset: r.Offset})
		}
	}
	produce("before", 100)
	fill(true)
	// The leadership moves: writes to the same partition are acknowledged
	// by the other two replicas.
	moved := c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool {
		return ps[led].Leader != 3 && ps[led].Leader > 0
	})
	produce("full", 100)
	// Every broker's /healthz says so.
	if body := healthz(t, c.Broker(1)); !strings.Contains(body, "broker 3's disk is full") {
		t.Errorf("broker 1's /healthz while broker 3's disk is full:\n%s", body)
	}
	fill(false)
	c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool { return slices.Contains(ps[led].ISR, 3) })
	produce("freed", 100)

	read, err := checker.ReadAll(ctx, topic, seeds)
	if err != nil {
		t.Fatal(err)
	}
	if rep := h.Check(read); !rep.OK() || rep.Acked != 300 {
		t.Fatal(rep)
	}
	t.Logf("partition %d: leader 3 -> %d while broker 3's disk was full; back in the ISR after", led, moved[led].Leader)
}

func healthz(t *testing.T, b *tandemtest.Proc) string {
	t.Helper()
	resp, err := http.Get("http://" + b.HTTPAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
