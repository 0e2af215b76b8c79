package server

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

// TestProduceOneBatchPerPartition is issue 31's report: a Produce v3+
// carrying several record batches for one partition was accepted; Kafka
// refuses it with INVALID_RECORD, and so does Tandem, leaving the log as
// it was. One batch is fine.
func TestProduceOneBatchPerPartition(t *testing.T) {
	b := startBroker(t, nil)
	tp := createTopic(t, b, "one", 1, nil)
	for _, v := range []int16{3, 9, 11} {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = v, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = "one", tp.ID
		rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: slices.Concat(recordbatch.Of("a", "b"), recordbatch.Of("c"))}}
		req.Topics = append(req.Topics, rt)
		resp := rawRequest(t, b.Addr(), req).(*kmsg.ProduceResponse)
		if got := resp.Topics[0].Partitions[0].ErrorCode; got != kerr.InvalidRecord.Code {
			t.Fatalf("Produce v%d with two batches for one partition: error %v, want INVALID_RECORD", v, kerr.ErrorForCode(got))
		}
		if end := b.engine.Partition(engine.TopicID(tp.ID), 0).Offsets().LogEnd; end != 0 {
			t.Fatalf("after a refused Produce v%d the log ends at %d, want 0", v, end)
		}
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "one"
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: recordbatch.Of("a", "b")}}
	req.Topics = append(req.Topics, rt)
	if got := rawRequest(t, b.Addr(), req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; got != 0 {
		t.Fatalf("one batch: %v", kerr.ErrorForCode(got))
	}
	if end := b.engine.Partition(engine.TopicID(tp.ID), 0).Offsets().LogEnd; end != 2 {
		t.Fatalf("after one batch of two records the log ends at %d", end)
	}
}
