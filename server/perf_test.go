package server

import (
	"fmt"
	"net"
	"testing"

	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestProducePipelined writes many acks=all produce requests on one
// connection without waiting, as clients with several requests in flight
// do, with a Metadata request among them and a Fetch after them: the
// responses come back in request order, offsets are dense and in request
// order, and the Fetch sees every record (it is handled after the produces
// before it are answered).
func TestProducePipelined(t *testing.T) {
	b := startBroker(t, map[string]string{"tandem.log.sync": "true"})
	createTopic(t, b, "pipe", 2, nil)
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const n = 24
	var reqs []kmsg.Request
	for i := range n {
		pr := kmsg.NewPtrProduceRequest()
		pr.Version, pr.Acks, pr.TimeoutMillis = 9, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "pipe"
		for p := range int32(2) {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = p
			rp.Records = recordbatch.Of(fmt.Sprintf("r%d-p%d-a", i, p), fmt.Sprintf("r%d-p%d-b", i, p))
			rt.Partitions = append(rt.Partitions, rp)
		}
		pr.Topics = append(pr.Topics, rt)
		reqs = append(reqs, pr)
		if i == n/2 {
			mr := kmsg.NewPtrMetadataRequest()
			mr.Version = 9
			reqs = append(reqs, mr)
		}
	}
	fr := kmsg.NewPtrFetchRequest()
	fr.Version, fr.MaxBytes, fr.SessionEpoch = 11, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "pipe"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.PartitionMaxBytes = 1, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	reqs = append(reqs, fr)

	go func() {
		for i, r := range reqs {
			if err := writeRequest(c, r, int32(i), "pipeline"); err != nil {
				t.Errorf("write request %d: %v", i, err)
				return
			}
		}
	}()
	next := [2]int64{}
	for i, r := range reqs {
		resp, err := readResponse(c, r, int32(i))
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		switch resp := resp.(type) {
		case *kmsg.ProduceResponse:
			for _, p := range resp.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.BaseOffset != next[p.Partition] {
					t.Fatalf("response %d partition %d: error %d, base offset %d, want %d", i, p.Partition, p.ErrorCode, p.BaseOffset, next[p.Partition])
				}
				next[p.Partition] += 2
			}
		case *kmsg.FetchResponse:
			p := resp.Topics[0].Partitions[0]
			offsets, values := recordbatch.Values(t, p.RecordBatches)
			if p.HighWatermark != 2*n || len(values) != 2*n || values[2*n-1] != fmt.Sprintf("r%d-p1-b", n-1) || offsets[2*n-1] != 2*n-1 {
				t.Fatalf("fetch after the produces: high watermark %d, %d records", p.HighWatermark, len(values))
			}
		}
	}
}
