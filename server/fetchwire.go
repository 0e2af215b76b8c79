package server

import (
	"net"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchResponse is a Fetch response whose record batches go to the socket
// as the engine's own slices, in one vectored write, instead of being
// copied into a contiguous response: consumers at the head read batches
// that the engine keeps in memory, and the broker never touches their
// bytes. The kmsg fields hold everything else; RecordBatches stay empty.
type fetchResponse struct {
	*kmsg.FetchResponse
	// batches[i][j] are the record batches of Topics[i].Partitions[j].
	batches [][][][]byte
}

// vectored is a response that encodes itself as several buffers.
type vectored interface {
	// appendBuffers encodes the body after head (the frame header).
	appendBuffers(head []byte) net.Buffers
}

// AppendTo flattens the response into one buffer, for callers that need one.
func (r *fetchResponse) AppendTo(dst []byte) []byte {
	for _, b := range r.appendBuffers(nil) {
		dst = append(dst, b...)
	}
	return dst
}

// bufs builds net.Buffers out of one growing buffer of encoded fields and
// external slices spliced in between.
type bufs struct {
	b    []byte
	mark int     // start of the fields not yet cut into a segment
	segs [][]int // [start, end) of b, or {-1, i} for ext[i]
	ext  [][]byte
}

func (v *bufs) splice(ext []byte) {
	if len(ext) == 0 {
		return
	}
	v.segs = append(v.segs, []int{v.mark, len(v.b)}, []int{-1, len(v.ext)})
	v.ext = append(v.ext, ext)
	v.mark = len(v.b)
}

func (v *bufs) done() net.Buffers {
	v.segs = append(v.segs, []int{v.mark, len(v.b)})
	out := make(net.Buffers, 0, len(v.segs))
	for _, s := range v.segs {
		switch {
		case s[0] < 0:
			out = append(out, v.ext[s[1]])
		case s[1] > s[0] || len(out) == 0:
			out = append(out, v.b[s[0]:s[1]:s[1]])
		}
	}
	return out
}

// appendBuffers encodes the response as kmsg's FetchResponse.AppendTo does,
// for versions 4 to 18, except that records are never null (an empty
// partition has zero-length records, as Kafka sends and librdkafka needs)
// and NodeEndpoints are never sent.
func (r *fetchResponse) appendBuffers(head []byte) net.Buffers {
	v := r.Version
	flex := v >= 12
	arrayLen := func(b []byte, n int) []byte {
		if flex {
			return kbin.AppendCompactArrayLen(b, n)
		}
		return kbin.AppendArrayLen(b, n)
	}
	w := &bufs{b: head}
	b := head
	if v >= 1 {
		b = kbin.AppendInt32(b, r.ThrottleMillis)
	}
	if v >= 7 {
		b = kbin.AppendInt16(b, r.ErrorCode)
		b = kbin.AppendInt32(b, r.SessionID)
	}
	b = arrayLen(b, len(r.Topics))
	for i := range r.Topics {
		t := &r.Topics[i]
		switch {
		case v >= 13:
			b = kbin.AppendUuid(b, t.TopicID)
		case flex:
			b = kbin.AppendCompactString(b, t.Topic)
		default:
			b = kbin.AppendString(b, t.Topic)
		}
		b = arrayLen(b, len(t.Partitions))
		for j := range t.Partitions {
			p := &t.Partitions[j]
			b = kbin.AppendInt32(b, p.Partition)
			b = kbin.AppendInt16(b, p.ErrorCode)
			b = kbin.AppendInt64(b, p.HighWatermark)
			if v >= 4 {
				b = kbin.AppendInt64(b, p.LastStableOffset)
			}
			if v >= 5 {
				b = kbin.AppendInt64(b, p.LogStartOffset)
			}
			if v >= 4 {
				a := p.AbortedTransactions
				if flex {
					b = kbin.AppendCompactNullableArrayLen(b, len(a), a == nil)
				} else {
					b = kbin.AppendNullableArrayLen(b, len(a), a == nil)
				}
				for _, at := range a {
					b = kbin.AppendInt64(b, at.ProducerID)
					b = kbin.AppendInt64(b, at.FirstOffset)
					if flex {
						b = append(b, 0)
					}
				}
			}
			if v >= 11 {
				b = kbin.AppendInt32(b, p.PreferredReadReplica)
			}
			var batches [][]byte
			if i < len(r.batches) && j < len(r.batches[i]) {
				batches = r.batches[i][j]
			}
			n := len(p.RecordBatches)
			for _, bt := range batches {
				n += len(bt)
			}
			if flex {
				b = kbin.AppendUvarint(b, uint32(n)+1)
			} else {
				b = kbin.AppendInt32(b, int32(n))
			}
			b = append(b, p.RecordBatches...)
			w.b = b
			for _, bt := range batches {
				w.splice(bt)
			}
			b = w.b
			if flex {
				diverging := p.DivergingEpoch.Epoch != -1 || p.DivergingEpoch.EndOffset != -1
				leader := p.CurrentLeader.LeaderID != -1 || p.CurrentLeader.LeaderEpoch != -1
				tags := 0
				for _, set := range []bool{diverging, leader} {
					if set {
						tags++
					}
				}
				b = kbin.AppendUvarint(b, uint32(tags))
				if diverging { // tag 0: epoch int32, end offset int64, no tags
					b = append(b, 0, 13)
					b = kbin.AppendInt32(b, p.DivergingEpoch.Epoch)
					b = kbin.AppendInt64(b, p.DivergingEpoch.EndOffset)
					b = append(b, 0)
				}
				if leader { // tag 1: leader id int32, leader epoch int32, no tags
					b = append(b, 1, 9)
					b = kbin.AppendInt32(b, p.CurrentLeader.LeaderID)
					b = kbin.AppendInt32(b, p.CurrentLeader.LeaderEpoch)
					b = append(b, 0)
				}
			}
		}
		if flex {
			b = append(b, 0) // topic tags
		}
	}
	if flex {
		b = append(b, 0) // response tags
	}
	w.b = b
	return w.done()
}
