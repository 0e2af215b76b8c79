package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/klauspost/compress/snappy"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rec is a test record; a nil key or value is null.
type rec struct {
	key, val []byte
	tsDelta  int64
}

func kv(k, v string) rec {
	r := rec{key: []byte(k)}
	if v != "" {
		r.val = []byte(v)
	}
	return r
}

// encodeRecords encodes records with kmsg.Record, the way clients do.
func encodeRecords(recs []rec) []byte {
	var out []byte
	for i, r := range recs {
		kr := kmsg.Record{TimestampDelta64: r.tsDelta, OffsetDelta: int32(i), Key: r.key, Value: r.val}
		body := kr.AppendTo(nil) // with Length 0: recompute it
		kr.Length = int32(len(body) - 1)
		out = kr.AppendTo(out)
	}
	return out
}

type batchOpts struct {
	codec    int8
	pid      int64
	epoch    int16
	seq      int32
	baseTs   int64
	attrs    int16
	rawSnap  bool // snappy: raw block instead of xerial framing
	payload  []byte
	count    int32 // overrides the record count
	lastDelt int32 // overrides lastOffsetDelta when count is set
}

// mkBatch builds a valid magic-2 batch (base offset 0) with kmsg.RecordBatch.
func mkBatch(t testing.TB, o batchOpts, recs ...rec) []byte {
	t.Helper()
	payload := o.payload
	if payload == nil {
		payload = encodeRecords(recs)
	}
	if o.codec == recordbatch.CodecSnappy && o.rawSnap {
		payload = snappy.Encode(nil, payload)
	} else if o.codec != recordbatch.CodecNone {
		var err error
		if payload, err = recordbatch.Compress(o.codec, payload); err != nil {
			t.Fatal(err)
		}
	}
	if o.baseTs == 0 {
		o.baseTs = 1_700_000_000_000
	}
	count, lastDelta := int32(len(recs)), int32(len(recs)-1)
	if o.count != 0 {
		count, lastDelta = o.count, o.lastDelt
	}
	pid, seq := o.pid, o.seq
	if pid == 0 {
		pid, seq = -1, -1
	}
	var maxDelta int64
	for _, r := range recs {
		maxDelta = max(maxDelta, r.tsDelta)
	}
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: int16(o.codec) | o.attrs,
		LastOffsetDelta: lastDelta, FirstTimestamp: o.baseTs, MaxTimestamp: o.baseTs + maxDelta,
		ProducerID: pid, ProducerEpoch: o.epoch, FirstSequence: seq, NumRecords: count, Records: payload,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func openTest(t testing.TB, fs vfs.FS, opts ...func(*Config)) *Engine {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	cfg := Config{Dir: "db", FS: fs, SyncWrites: true, RetentionCheckInterval: -1}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

var testID = TopicID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func mkPart(t testing.TB, e *Engine, cfg LogConfig) *Partition {
	t.Helper()
	p, err := e.Create("t", testID, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func appendOK(t testing.TB, p *Partition, origin Origin, records []byte) AppendResult {
	t.Helper()
	res, err := p.Append(context.Background(), &AppendRequest{Topic: "t", TopicID: testID, Origin: origin, Records: records, Acks: -1})
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return res
}

func appendErr(p *Partition, records []byte) error {
	_, err := p.Append(context.Background(), &AppendRequest{Topic: "t", TopicID: testID, Origin: OriginClient, Records: records, Acks: -1})
	return err
}

// kcode returns the Kafka error code an error wraps (0 for none).
func kcode(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

// fetchAll reads every batch from offset to the high watermark.
func fetchAll(t testing.TB, p *Partition, offset int64) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		res, err := p.Fetch(offset, 1<<20, ReadUncommitted)
		if err != nil {
			t.Fatalf("fetch %d: %v", offset, err)
		}
		if len(res.Batches) == 0 {
			return out
		}
		out = append(out, res.Batches...)
		offset = recordbatch.Batch(res.Batches[len(res.Batches)-1]).LastOffset() + 1
	}
}

// keysOf decodes the (key, value) pairs of stored batches with their offsets.
func recordsOf(t testing.TB, batches [][]byte) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	for _, raw := range batches {
		b := recordbatch.Batch(raw)
		buf, err := recordbatch.DecompressAll(nil, b, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		err = recordbatch.WalkRecords(&recordbatch.SliceSource{B: buf}, b.RecordCount(), func(r *recordbatch.Record) error {
			var kr kmsg.Record
			if err := kr.ReadFrom(r.Raw); err != nil {
				return err
			}
			v := string(kr.Value)
			if kr.Value == nil {
				v = "<nil>"
			}
			out[b.BaseOffset()+int64(r.OffsetDelta)] = string(kr.Key) + "=" + v
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

var _ = time.Second
