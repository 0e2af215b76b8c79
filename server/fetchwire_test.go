package server

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchResponseEncoding checks the vectored encoder against kmsg's for
// every served Fetch version, with batches split across slices.
func TestFetchResponseEncoding(t *testing.T) {
	batchA, batchB := makeBatch("a", "b"), makeBatch("c")
	for v := int16(4); v <= 18; v++ {
		want := kmsg.NewPtrFetchResponse()
		want.Version, want.ThrottleMillis, want.ErrorCode, want.SessionID = v, 7, 0, 1234
		got := &fetchResponse{FetchResponse: kmsg.NewPtrFetchResponse()}
		*got.FetchResponse = *want

		for ti, name := range []string{"one", "two"} {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = name, [16]byte{byte(ti + 1)}
			var parts [][][]byte
			for pi := range 3 {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.HighWatermark, p.LastStableOffset, p.LogStartOffset = int32(pi), 10, 9, 1
				var batches [][]byte
				switch pi {
				case 0: // two batches
					batches = [][]byte{batchA, batchB}
					p.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{{ProducerID: 5, FirstOffset: 3}}
				case 1: // an error with tags
					p.ErrorCode = 74
					p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = 1, 3
					p.DivergingEpoch.Epoch, p.DivergingEpoch.EndOffset = 2, 8
				}
				parts = append(parts, batches)
				rt.Partitions = append(rt.Partitions, p)
			}
			gt := rt
			gt.Partitions = append([]kmsg.FetchResponseTopicPartition(nil), rt.Partitions...)
			for pi := range rt.Partitions {
				rt.Partitions[pi].RecordBatches = bytes.Join(parts[pi], nil)
				if rt.Partitions[pi].RecordBatches == nil {
					rt.Partitions[pi].RecordBatches = []byte{}
				}
			}
			want.Topics = append(want.Topics, rt)
			got.Topics = append(got.Topics, gt)
			got.batches = append(got.batches, parts)
		}
		if w, g := want.AppendTo(nil), got.AppendTo(nil); !bytes.Equal(w, g) {
			t.Fatalf("v%d: encodings differ\nkmsg: %x\nours: %x", v, w, g)
		}
		bufs := got.appendBuffers([]byte("head"))
		if !bytes.HasPrefix(bufs[0], []byte("head")) || len(bufs) < 3 {
			t.Fatalf("v%d: %d buffers, first %q", v, len(bufs), bufs[0])
		}
	}
}
