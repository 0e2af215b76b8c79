package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
)

// BatchHeaderLen is the size of a magic-2 record batch header: what comes
// before its records.
const BatchHeaderLen = recordbatch.HeaderLen

// BatchHeader is the header of a magic-2 record batch, the one parse of
// it for code outside the engine (the produce path, plugins). The engine
// itself reads the same fields in place.
type BatchHeader struct {
	BaseOffset int64
	// Length counts the bytes after the Length field: the batch is
	// Length + 12 bytes long (Size).
	Length               int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32 // CRC-32C of everything from Attributes on
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// ParseBatchHeader reads the header of the record batch at the start of b.
// It checks the header only, not the records or the CRC (the engine
// validates whole batches when they are appended). A legacy message set
// (magic 0 or 1, whose magic byte sits at the same place) is
// UNSUPPORTED_FOR_MESSAGE_FORMAT; anything else that is not a magic-2
// header, such as too few bytes or a Length below the header's, is
// CORRUPT_MESSAGE.
func ParseBatchHeader(b []byte) (BatchHeader, error) {
	if len(b) > recordbatch.OffMagic && b[recordbatch.OffMagic] < 2 {
		return BatchHeader{}, fmt.Errorf("record batch magic %d: %w", b[recordbatch.OffMagic], kerr.UnsupportedForMessageFormat)
	}
	if len(b) < recordbatch.HeaderLen {
		return BatchHeader{}, recordbatch.Corrupt("record batch header truncated: %d bytes, need %d", len(b), recordbatch.HeaderLen)
	}
	v := recordbatch.Batch(b)
	h := BatchHeader{
		BaseOffset:           v.BaseOffset(),
		Length:               int32(binary.BigEndian.Uint32(b[recordbatch.OffBatchLength:])),
		PartitionLeaderEpoch: v.LeaderEpoch(),
		Magic:                int8(b[recordbatch.OffMagic]),
		CRC:                  binary.BigEndian.Uint32(b[recordbatch.OffCRC:]),
		Attributes:           v.Attributes(),
		LastOffsetDelta:      v.LastOffsetDelta(),
		BaseTimestamp:        v.BaseTimestamp(),
		MaxTimestamp:         v.MaxTimestamp(),
		ProducerID:           v.ProducerID(),
		ProducerEpoch:        v.ProducerEpoch(),
		BaseSequence:         v.BaseSequence(),
		NumRecords:           v.RecordCount(),
	}
	switch {
	case h.Magic != 2:
		return BatchHeader{}, recordbatch.Corrupt("record batch magic %d, only 2 is supported", h.Magic)
	case h.Length < recordbatch.HeaderLen-12:
		return BatchHeader{}, recordbatch.Corrupt("record batch length %d is shorter than its header", h.Length)
	}
	return h, nil
}

// Size is the whole batch's length in bytes, header included.
func (h BatchHeader) Size() int64 { return int64(h.Length) + 12 }

// LastOffset is the offset of the batch's last record.
func (h BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Compression is the codec of the records: 0 none, 1 gzip, 2 snappy,
// 3 lz4, 4 zstd.
func (h BatchHeader) Compression() int8 { return int8(h.Attributes & recordbatch.AttrCompression) }

// Transactional reports whether the batch is part of a transaction.
func (h BatchHeader) Transactional() bool { return h.Attributes&recordbatch.AttrTransactional != 0 }

// Control reports whether the batch holds a control record (a
// transaction marker).
func (h BatchHeader) Control() bool { return h.Attributes&recordbatch.AttrControl != 0 }

// EpochPrefix finds the first record batch in records whose partition
// leader epoch is above bound (KAFKA-18723: a leader at epoch E never has
// such a batch; one in a fetch response is a read that raced a
// truncation and a newer leader's appends). It returns the length of the
// prefix of batches within the bound and the epoch found above it (-1:
// none). A partial batch at the end ends the prefix without an error:
// the append that follows drops it, as it drops any partial batch.
func EpochPrefix(records []byte, bound int32) (n int, epoch int32, err error) {
	for n < len(records) {
		rest := records[n:]
		if len(rest) < recordbatch.OffLeaderEpoch+4 {
			return n, -1, nil
		}
		size := int(int32(binary.BigEndian.Uint32(rest[recordbatch.OffBatchLength:])))
		if size < 0 {
			return n, -1, fmt.Errorf("record batch at byte %d has length %d", n, size)
		}
		if e := int32(binary.BigEndian.Uint32(rest[recordbatch.OffLeaderEpoch:])); e > bound {
			return n, e, nil
		}
		n += recordbatch.OffLeaderEpoch + size
	}
	return n, -1, nil
}

// IsProducerBarrier reports whether b, a stored record batch, is the
// producer-state barrier (a control batch of no producer whose record
// has type ControlPIDReset; see WriteProducerBarrier).
func IsProducerBarrier(b []byte) bool {
	if _, err := ParseBatchHeader(b); err != nil {
		return false
	}
	return isBarrier(recordbatch.Batch(b))
}

// WholeBatches splits records (the record batches of a Fetch answer, say)
// into its whole batches by their Length fields, leaving out a partial
// batch at the end, as a fetch's size limit may cut one; each batch's
// header is then for ParseBatchHeader to read. A Length that cannot be a
// batch's ends the split.
func WholeBatches(records []byte) [][]byte {
	var out [][]byte
	for len(records) >= recordbatch.HeaderLen {
		size := 12 + int64(int32(binary.BigEndian.Uint32(records[recordbatch.OffBatchLength:])))
		if size < recordbatch.HeaderLen || size > int64(len(records)) {
			break
		}
		out = append(out, records[:size])
		records = records[size:]
	}
	return out
}

// LeadingBatches calls keep with the header of each whole record batch
// of b, in order, until keep returns false, and returns how many bytes
// the batches it accepted take. It stops at the first bytes that are not
// a whole magic-2 batch (a fetch answer may end in a partial one).
func LeadingBatches(b []byte, keep func(BatchHeader) bool) int {
	n := 0
	for len(b)-n >= recordbatch.HeaderLen { // a shorter tail is a partial batch: no error to build
		h, err := ParseBatchHeader(b[n:])
		if err != nil || h.Size() > int64(len(b)-n) || !keep(h) {
			return n
		}
		n += int(h.Size())
	}
	return n
}

// ControlType is the marker type of a control batch b (ControlAbort,
// ControlCommit, ...), or -1 if b is not one or cannot be read. A
// mirror's consistent cut needs it to tell a committed transaction from
// an aborted one.
func ControlType(b []byte) int16 {
	h, err := ParseBatchHeader(b)
	if err != nil || !h.Control() {
		return -1
	}
	return controlType(recordbatch.Batch(b))
}

// DecodeMemory is the most that validating records (a Produce's record
// batches, as AppendRequest.Records) allocates at once to decompress them,
// read from the batches' headers alone; the broker counts it against
// queued.max.request.bytes before appending (recordbatch.DecodeMemory
// says what each codec needs).
func DecodeMemory(records []byte) int64 { return recordbatch.DecodeMemory(records) }
