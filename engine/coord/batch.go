package coord

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// EncodeBatch encodes records as one uncompressed, non-transactional
// magic-2 record batch at base offset 0 (the engine assigns offsets).
func EncodeBatch(now time.Time, recs []Record) []byte {
	return encodeBatch(now, recs, -1, -1)
}

// encodeBatch encodes records as one batch; with a producer id >= 0 the
// batch is transactional, part of that producer's open transaction.
func encodeBatch(now time.Time, recs []Record, pid int64, epoch int16) []byte {
	var body []byte
	for i, r := range recs {
		kr := kmsg.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		rec := kr.AppendTo(nil) // Length 0 takes one byte: recompute it
		kr.Length = int32(len(rec) - 1)
		body = kr.AppendTo(body)
	}
	ts := now.UnixMilli()
	b := kmsg.RecordBatch{
		Magic:           2,
		LastOffsetDelta: int32(len(recs) - 1),
		FirstTimestamp:  ts,
		MaxTimestamp:    ts,
		ProducerID:      pid,
		ProducerEpoch:   epoch,
		FirstSequence:   -1,
		NumRecords:      int32(len(recs)),
		Records:         body,
	}
	if pid >= 0 {
		b.Attributes = 0x10 // transactional
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32c))
	return out
}

// maxDecompressed bounds what one batch of an internal topic may inflate to.
const maxDecompressed = 64 << 20

// EachRecord calls fn for every record of a stored record batch, with its
// absolute offset, and returns the offset after the batch. Control batches
// (transaction markers) have no coordinator records and are skipped.
func EachRecord(raw []byte, fn func(offset int64, key, value []byte) error) (next int64, err error) {
	return eachRecord(raw, nil, func(_ *kmsg.RecordBatch, offset int64, key, value []byte) error { return fn(offset, key, value) })
}

// eachRecord is EachRecord with the batch header passed along, and
// control batches passed to control (if non-nil) with their marker key.
func eachRecord(raw []byte, control func(b *kmsg.RecordBatch, key []byte) error, fn func(b *kmsg.RecordBatch, offset int64, key, value []byte) error) (next int64, err error) {
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		return 0, fmt.Errorf("decode record batch: %w", err)
	}
	next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
	if b.Attributes&0x20 != 0 {
		if control == nil {
			return next, nil
		}
		fn = func(b *kmsg.RecordBatch, _ int64, key, _ []byte) error { return control(b, key) }
	}
	recs, err := decompress(int8(b.Attributes&7), b.Records)
	if err != nil {
		return 0, fmt.Errorf("batch at offset %d: %w", b.FirstOffset, err)
	}
	for i := int32(0); i < b.NumRecords; i++ {
		length, n := kbin.Varint(recs)
		if n <= 0 || length < 0 || int(length) > len(recs)-n {
			return 0, fmt.Errorf("batch at offset %d: record %d truncated", b.FirstOffset, i)
		}
		var r kmsg.Record
		if err := r.ReadFrom(recs[:n+int(length)]); err != nil {
			return 0, fmt.Errorf("batch at offset %d: record %d: %w", b.FirstOffset, i, err)
		}
		recs = recs[n+int(length):]
		if err := fn(&b, b.FirstOffset+int64(r.OffsetDelta), r.Key, r.Value); err != nil {
			return 0, err
		}
	}
	return next, nil
}

// decompress inflates a batch's records. Coordinators write uncompressed
// batches, but the topic is a topic: whatever was appended is read back.
func decompress(codec int8, in []byte) ([]byte, error) {
	var r io.Reader
	switch codec {
	case 0:
		return in, nil
	case 1:
		zr, err := gzip.NewReader(bytes.NewReader(in))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		r = zr
	case 2:
		return unsnappy(in)
	case 3:
		r = lz4.NewReader(bytes.NewReader(in))
	case 4:
		zr, err := zstd.NewReader(bytes.NewReader(in), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxDecompressed+1))
	if err != nil {
		return nil, fmt.Errorf("decompress codec %d: %w", codec, err)
	}
	if len(out) > maxDecompressed {
		return nil, fmt.Errorf("batch inflates beyond %d bytes", maxDecompressed)
	}
	return out, nil
}

// xerialMagic starts the snappy framing the Java client writes.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

func unsnappy(in []byte) ([]byte, error) {
	block := func(b []byte) ([]byte, error) {
		if n, err := s2.DecodedLen(b); err != nil || n > maxDecompressed {
			return nil, fmt.Errorf("snappy: bad block (%d bytes decoded, %v)", n, err)
		}
		return s2.Decode(nil, b)
	}
	if !bytes.HasPrefix(in, xerialMagic) {
		return block(in)
	}
	var out []byte
	for in = in[16:]; len(in) > 0; {
		if len(in) < 4 {
			return nil, fmt.Errorf("snappy: truncated xerial chunk")
		}
		n := int(binary.BigEndian.Uint32(in))
		if n > len(in)-4 {
			return nil, fmt.Errorf("snappy: xerial chunk of %d bytes, %d left", n, len(in)-4)
		}
		b, err := block(in[4 : 4+n])
		if err != nil {
			return nil, err
		}
		if out = append(out, b...); len(out) > maxDecompressed {
			return nil, fmt.Errorf("batch inflates beyond %d bytes", maxDecompressed)
		}
		in = in[4+n:]
	}
	return out, nil
}
