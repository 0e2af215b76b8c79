// Package fetchwire writes a Fetch response whose record batches go to
// the socket from the engine's segment files (with sendfile on plain TCP
// connections), never copied into the response.
package fetchwire

import (
	"encoding/binary"
	"io"
	"net"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
)

// Response is a Fetch response whose record batches go to the socket
// from the engine's segment files, without being copied into the response
// (with sendfile on plain TCP connections): the kmsg fields hold
// everything else; RecordBatches stay empty.
type Response struct {
	*kmsg.FetchResponse
	// Records[i][j] are the record batches of Topics[i].Partitions[j]
	// (nil: none). The response owns them: WriteFrame closes them.
	Records [][]*engine.Records
}

// AppendTo flattens the response into one buffer, for callers that need
// one. It releases the records.
func (r *Response) AppendTo(dst []byte) []byte {
	defer r.Release()
	for _, s := range r.encode(nil) {
		if s.recs == nil {
			dst = append(dst, s.b...)
			continue
		}
		start := len(dst)
		var err error
		if dst, err = s.recs.AppendTo(dst); err != nil {
			// A file cut under the read: zeros keep the length the frame
			// announces, and the client's CRC check refuses the batch.
			dst = append(dst[:start], make([]byte, s.recs.Len())...)
		}
	}
	return dst
}

func (r *Response) WriteFrame(w io.Writer, head []byte) (int64, error) {
	defer r.Release()
	segs := r.encode(head)
	var size int64
	for _, s := range segs {
		if s.recs != nil {
			size += int64(s.recs.Len())
		} else {
			size += int64(len(s.b))
		}
	}
	binary.BigEndian.PutUint32(segs[0].b, uint32(size-4))
	var (
		written int64
		pending net.Buffers
	)
	flush := func() error {
		n, err := pending.WriteTo(w)
		written += n
		pending = nil
		return err
	}
	for _, s := range segs {
		if s.recs == nil {
			pending = append(pending, s.b)
			continue
		}
		if err := flush(); err != nil {
			return written, err
		}
		n, err := s.recs.WriteTo(w)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, flush()
}

func (r *Response) Release() {
	for _, t := range r.Records {
		for _, recs := range t {
			recs.Close()
		}
	}
	r.Records = nil
}

// frameSeg is a part of an encoded frame: encoded fields, or records.
type frameSeg struct {
	b    []byte
	recs *engine.Records
}

// segs builds a frame out of one growing buffer of encoded fields and
// records spliced in between.
type segs struct {
	b    []byte
	mark int // start of the fields not yet cut into a segment
	out  []frameSeg
	cuts [][2]int
}

func (v *segs) splice(recs *engine.Records) {
	if recs.Len() == 0 {
		return
	}
	v.cuts = append(v.cuts, [2]int{v.mark, len(v.b)})
	v.out = append(v.out, frameSeg{recs: recs})
	v.mark = len(v.b)
}

func (v *segs) done() []frameSeg {
	v.cuts = append(v.cuts, [2]int{v.mark, len(v.b)})
	out := make([]frameSeg, 0, 2*len(v.cuts))
	for i, c := range v.cuts {
		if c[1] > c[0] || len(out) == 0 {
			out = append(out, frameSeg{b: v.b[c[0]:c[1]:c[1]]})
		}
		if i < len(v.out) {
			out = append(out, v.out[i])
		}
	}
	return out
}

// encode encodes the response as kmsg's FetchResponse.AppendTo does, for
// versions 4 to 18, except that records are never null (an empty
// partition has zero-length records, as Kafka sends and librdkafka needs)
// and NodeEndpoints are never sent; a partition's unknown tags (Tandem's
// MirrorLeaderEpoch, tag 1279) follow tags 0 and 1.
func (r *Response) encode(head []byte) []frameSeg {
	v := r.Version
	flex := v >= 12
	arrayLen := func(b []byte, n int) []byte {
		if flex {
			return kbin.AppendCompactArrayLen(b, n)
		}
		return kbin.AppendArrayLen(b, n)
	}
	w := &segs{b: head}
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
			b = appendFetchPartitionHead(b, v, p)
			var recs *engine.Records
			if i < len(r.Records) && j < len(r.Records[i]) {
				recs = r.Records[i][j]
			}
			n := len(p.RecordBatches) + recs.Len()
			if flex {
				b = kbin.AppendUvarint(b, uint32(n)+1)
			} else {
				b = kbin.AppendInt32(b, int32(n))
			}
			b = append(b, p.RecordBatches...)
			w.b = b
			w.splice(recs)
			b = w.b
			if flex {
				b = appendFetchPartitionTags(b, p)
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

// appendFetchPartitionHead appends a partition of a version v response up
// to its records: index, error, offsets, aborted transactions, preferred
// read replica.
func appendFetchPartitionHead(b []byte, v int16, p *kmsg.FetchResponseTopicPartition) []byte {
	flex := v >= 12
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
	return b
}

// appendFetchPartitionTags appends a partition's tagged fields (flexible
// versions): DivergingEpoch (tag 0) and CurrentLeader (tag 1) when set,
// then its unknown tags.
func appendFetchPartitionTags(b []byte, p *kmsg.FetchResponseTopicPartition) []byte {
	diverging := p.DivergingEpoch.Epoch != -1 || p.DivergingEpoch.EndOffset != -1
	leader := p.CurrentLeader.LeaderID != -1 || p.CurrentLeader.LeaderEpoch != -1
	tags := p.UnknownTags.Len() // MirrorLeaderEpoch (tag 1279), after ours
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
	return p.UnknownTags.AppendEach(b)
}
