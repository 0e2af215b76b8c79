package engine

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Offsets of the fields of a magic-2 record batch header.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57
	batchHeaderLen     = 61

	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// batch is a view of one stored or incoming record batch. Its methods read
// the header fields in place.
type batch []byte

func (b batch) baseOffset() int64  { return int64(binary.BigEndian.Uint64(b[offBaseOffset:])) }
func (b batch) leaderEpoch() int32 { return int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])) }
func (b batch) attributes() int16  { return int16(binary.BigEndian.Uint16(b[offAttributes:])) }
func (b batch) lastOffsetDelta() int32 {
	return int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:]))
}
func (b batch) lastOffset() int64     { return b.baseOffset() + int64(b.lastOffsetDelta()) }
func (b batch) baseTimestamp() int64  { return int64(binary.BigEndian.Uint64(b[offBaseTimestamp:])) }
func (b batch) maxTimestamp() int64   { return int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])) }
func (b batch) producerID() int64     { return int64(binary.BigEndian.Uint64(b[offProducerID:])) }
func (b batch) producerEpoch() int16  { return int16(binary.BigEndian.Uint16(b[offProducerEpoch:])) }
func (b batch) baseSequence() int32   { return int32(binary.BigEndian.Uint32(b[offBaseSequence:])) }
func (b batch) recordCount() int32    { return int32(binary.BigEndian.Uint32(b[offRecordCount:])) }
func (b batch) codec() int8           { return int8(b.attributes() & attrCompression) }
func (b batch) isControl() bool       { return b.attributes()&attrControl != 0 }
func (b batch) isTransactional() bool { return b.attributes()&attrTransactional != 0 }
func (b batch) logAppendTime() bool   { return b.attributes()&attrLogAppendTime != 0 }
func (b batch) records() []byte       { return b[batchHeaderLen:] }

// lastSequence is the sequence of the batch's last record, wrapping at
// MaxInt32 as Kafka does.
func (b batch) lastSequence() int32 {
	s := int64(b.baseSequence()) + int64(b.lastOffsetDelta())
	if s > 0x7fffffff {
		s -= 0x80000000
	}
	return int32(s)
}

func (b batch) setBaseOffset(o int64) { binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(o)) }
func (b batch) setLeaderEpoch(e int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(e))
}

// setLogAppendTime stamps the batch with the broker's time and recomputes
// the CRC (both fields are covered by it; the records are untouched).
func (b batch) setLogAppendTime(ts int64) {
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(b.attributes()|attrLogAppendTime))
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(ts))
	b.fixCRC()
}

func (b batch) fixCRC() {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], crcTable))
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, kerr.CorruptMessage)...)
}

// splitBatches splits a Records blob into its batches and checks each
// header: lengths, magic, CRC. It rejects trailing garbage. The returned
// batches alias records.
func splitBatches(records []byte) ([]batch, error) {
	if len(records) == 0 {
		return nil, corrupt("empty records")
	}
	var out []batch
	for len(records) > 0 {
		if len(records) < batchHeaderLen {
			return nil, corrupt("record batch truncated: %d bytes left, header needs %d", len(records), batchHeaderLen)
		}
		length := int64(int32(binary.BigEndian.Uint32(records[offBatchLength:])))
		if length < batchHeaderLen-12 || length > int64(len(records)-12) {
			return nil, corrupt("record batch length %d out of range (%d bytes left)", length, len(records)-12)
		}
		b := batch(records[:12+length])
		if magic := b[offMagic]; magic != 2 {
			return nil, corrupt("record batch magic %d, only 2 is supported", magic)
		}
		if got, want := crc32.Checksum(b[offAttributes:], crcTable), binary.BigEndian.Uint32(b[offCRC:]); got != want {
			return nil, corrupt("record batch CRC %08x, computed %08x", want, got)
		}
		if b.lastOffsetDelta() < 0 || b.recordCount() < 0 {
			return nil, corrupt("record batch lastOffsetDelta %d, recordCount %d", b.lastOffsetDelta(), b.recordCount())
		}
		out = append(out, b)
		records = records[len(b):]
	}
	return out, nil
}

// record is one parsed record. Key and Value alias the parse buffer and
// are only valid during the callback; Raw is the whole record (length
// prefix included) when the records came from memory.
type record struct {
	TimestampDelta int64
	OffsetDelta    int32
	Key            []byte
	KeyNull        bool
	ValueNull      bool
	Raw            []byte
}

// recordSource is what the record walker reads: a byte slice, or a
// bounded decompression stream.
type recordSource interface {
	ReadByte() (byte, error)
	// next returns the next n bytes; keep says the caller needs them (a
	// streaming source may otherwise discard them).
	next(n int, keep bool) ([]byte, error)
	// pos is the number of bytes consumed so far.
	pos() int
	// raw returns the bytes consumed in [from, pos) if the source is in
	// memory, else nil.
	raw(from int) []byte
	atEOF() bool
}

type sliceSource struct {
	b []byte
	i int
}

func (s *sliceSource) ReadByte() (byte, error) {
	if s.i >= len(s.b) {
		return 0, errShort
	}
	s.i++
	return s.b[s.i-1], nil
}

func (s *sliceSource) next(n int, _ bool) ([]byte, error) {
	if n < 0 || n > len(s.b)-s.i {
		return nil, errShort
	}
	s.i += n
	return s.b[s.i-n : s.i], nil
}
func (s *sliceSource) pos() int            { return s.i }
func (s *sliceSource) raw(from int) []byte { return s.b[from:s.i] }
func (s *sliceSource) atEOF() bool         { return s.i == len(s.b) }

var errShort = corrupt("records truncated")

func readVarint(src recordSource) (int64, error) {
	var ux uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c, err := src.ReadByte()
		if err != nil {
			return 0, err
		}
		ux |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(ux>>1) ^ -int64(ux&1), nil
		}
	}
	return 0, corrupt("varint overflow")
}

// walkRecords parses count records from src, checking that every length
// is consistent, and calls fn (if non-nil) for each. It checks the source
// ends exactly after the last record.
func walkRecords(src recordSource, count int32, fn func(*record) error) error {
	var r record
	for i := int32(0); i < count; i++ {
		recStart := src.pos()
		length, err := readVarint(src)
		if err != nil {
			return fmt.Errorf("record %d length: %w", i, err)
		}
		start := src.pos()
		if length < 0 {
			return corrupt("record %d: negative length %d", i, length)
		}
		if _, err := src.next(1, false); err != nil { // attributes
			return fmt.Errorf("record %d: %w", i, err)
		}
		if r.TimestampDelta, err = readVarint(src); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
		od, err := readVarint(src)
		if err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
		r.OffsetDelta = int32(od)
		if r.Key, r.KeyNull, err = readBytes(src, true); err != nil {
			return fmt.Errorf("record %d key: %w", i, err)
		}
		if _, r.ValueNull, err = readBytes(src, false); err != nil {
			return fmt.Errorf("record %d value: %w", i, err)
		}
		nh, err := readVarint(src)
		if err != nil || nh < 0 {
			return corrupt("record %d: bad header count %d (%v)", i, nh, err)
		}
		for h := int64(0); h < nh; h++ {
			if _, null, err := readBytes(src, false); err != nil || null {
				return corrupt("record %d header %d: bad key (%v)", i, h, err)
			}
			if _, _, err := readBytes(src, false); err != nil {
				return fmt.Errorf("record %d header %d value: %w", i, h, err)
			}
			if int64(src.pos()-start) > length {
				return corrupt("record %d: headers overflow its length %d", i, length)
			}
		}
		if got := int64(src.pos() - start); got != length {
			return corrupt("record %d: length %d but fields take %d", i, length, got)
		}
		r.Raw = src.raw(recStart)
		if fn != nil {
			if err := fn(&r); err != nil {
				return err
			}
		}
	}
	if !src.atEOF() {
		return corrupt("bytes left after %d records", count)
	}
	return nil
}

func readBytes(src recordSource, keep bool) ([]byte, bool, error) {
	n, err := readVarint(src)
	if err != nil {
		return nil, false, err
	}
	if n < -1 {
		return nil, false, corrupt("negative length %d", n)
	}
	if n == -1 {
		return nil, true, nil
	}
	if n > 1<<31 {
		return nil, false, errShort
	}
	b, err := src.next(int(n), keep)
	return b, false, err
}

func appendVarint(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}
