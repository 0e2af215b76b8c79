// Package recordbatch is the magic-2 record batch format as the engine
// reads it: the header's fields in place (Batch), the split and check of
// a Records blob into its batches (Split), the walk over a batch's
// records, through a bounded decompression stream when it is compressed
// (Walk, WalkRecords), and the compression codecs (DecompressAll,
// Compress, DecodeMemory).
package recordbatch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Offsets of the fields of a magic-2 record batch header.
const (
	OffBaseOffset      = 0
	OffBatchLength     = 8
	OffLeaderEpoch     = 12
	OffMagic           = 16
	OffCRC             = 17
	OffAttributes      = 21
	OffLastOffsetDelta = 23
	OffBaseTimestamp   = 27
	OffMaxTimestamp    = 35
	OffProducerID      = 43
	OffProducerEpoch   = 51
	OffBaseSequence    = 53
	OffRecordCount     = 57
	HeaderLen          = 61

	AttrCompression   = 0x07
	AttrLogAppendTime = 0x08
	AttrTransactional = 0x10
	AttrControl       = 0x20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Batch is a view of one stored or incoming record batch. Its methods read
// the header fields in place.
type Batch []byte

func (b Batch) BaseOffset() int64  { return int64(binary.BigEndian.Uint64(b[OffBaseOffset:])) }
func (b Batch) LeaderEpoch() int32 { return int32(binary.BigEndian.Uint32(b[OffLeaderEpoch:])) }
func (b Batch) Attributes() int16  { return int16(binary.BigEndian.Uint16(b[OffAttributes:])) }
func (b Batch) LastOffsetDelta() int32 {
	return int32(binary.BigEndian.Uint32(b[OffLastOffsetDelta:]))
}
func (b Batch) LastOffset() int64     { return b.BaseOffset() + int64(b.LastOffsetDelta()) }
func (b Batch) BaseTimestamp() int64  { return int64(binary.BigEndian.Uint64(b[OffBaseTimestamp:])) }
func (b Batch) MaxTimestamp() int64   { return int64(binary.BigEndian.Uint64(b[OffMaxTimestamp:])) }
func (b Batch) ProducerID() int64     { return int64(binary.BigEndian.Uint64(b[OffProducerID:])) }
func (b Batch) ProducerEpoch() int16  { return int16(binary.BigEndian.Uint16(b[OffProducerEpoch:])) }
func (b Batch) BaseSequence() int32   { return int32(binary.BigEndian.Uint32(b[OffBaseSequence:])) }
func (b Batch) RecordCount() int32    { return int32(binary.BigEndian.Uint32(b[OffRecordCount:])) }
func (b Batch) Codec() int8           { return int8(b.Attributes() & AttrCompression) }
func (b Batch) IsControl() bool       { return b.Attributes()&AttrControl != 0 }
func (b Batch) IsTransactional() bool { return b.Attributes()&AttrTransactional != 0 }
func (b Batch) LogAppendTime() bool   { return b.Attributes()&AttrLogAppendTime != 0 }
func (b Batch) Records() []byte       { return b[HeaderLen:] }

// LastSequence is the sequence of the batch's last record, wrapping at
// MaxInt32 as Kafka does.
func (b Batch) LastSequence() int32 {
	s := int64(b.BaseSequence()) + int64(b.LastOffsetDelta())
	if s > 0x7fffffff {
		s -= 0x80000000
	}
	return int32(s)
}

func (b Batch) SetBaseOffset(o int64) { binary.BigEndian.PutUint64(b[OffBaseOffset:], uint64(o)) }
func (b Batch) SetLeaderEpoch(e int32) {
	binary.BigEndian.PutUint32(b[OffLeaderEpoch:], uint32(e))
}

// SetLogAppendTime stamps the batch with the broker's time and recomputes
// the CRC (both fields are covered by it; the records are untouched).
func (b Batch) SetLogAppendTime(ts int64) {
	binary.BigEndian.PutUint16(b[OffAttributes:], uint16(b.Attributes()|AttrLogAppendTime))
	binary.BigEndian.PutUint64(b[OffMaxTimestamp:], uint64(ts))
	b.FixCRC()
}

func (b Batch) FixCRC() {
	binary.BigEndian.PutUint32(b[OffCRC:], crc32.Checksum(b[OffAttributes:], crcTable))
}

func Corrupt(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, kerr.CorruptMessage)...)
}

// Split splits a Records blob into its batches and checks each
// header: lengths, magic, CRC. It rejects trailing garbage. The returned
// batches alias records.
func Split(records []byte) ([]Batch, error) {
	if len(records) == 0 {
		return nil, Corrupt("empty records")
	}
	var out []Batch
	for len(records) > 0 {
		if len(records) < HeaderLen {
			return nil, Corrupt("record batch truncated: %d bytes left, header needs %d", len(records), HeaderLen)
		}
		length := int64(int32(binary.BigEndian.Uint32(records[OffBatchLength:])))
		if length < HeaderLen-12 || length > int64(len(records)-12) {
			return nil, Corrupt("record batch length %d out of range (%d bytes left)", length, len(records)-12)
		}
		b := Batch(records[:12+length])
		if magic := b[OffMagic]; magic != 2 {
			return nil, Corrupt("record batch magic %d, only 2 is supported", magic)
		}
		if got, want := crc32.Checksum(b[OffAttributes:], crcTable), binary.BigEndian.Uint32(b[OffCRC:]); got != want {
			return nil, Corrupt("record batch CRC %08x, computed %08x", want, got)
		}
		if b.LastOffsetDelta() < 0 || b.RecordCount() < 0 {
			return nil, Corrupt("record batch lastOffsetDelta %d, recordCount %d", b.LastOffsetDelta(), b.RecordCount())
		}
		out = append(out, b)
		records = records[len(b):]
	}
	return out, nil
}

// Record is one parsed record. Key and Value alias the parse buffer and
// are only valid during the callback; Raw is the whole record (length
// prefix included) when the records came from memory.
type Record struct {
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

type SliceSource struct {
	B []byte
	i int
}

func (s *SliceSource) ReadByte() (byte, error) {
	if s.i >= len(s.B) {
		return 0, errShort
	}
	s.i++
	return s.B[s.i-1], nil
}

func (s *SliceSource) next(n int, _ bool) ([]byte, error) {
	if n < 0 || n > len(s.B)-s.i {
		return nil, errShort
	}
	s.i += n
	return s.B[s.i-n : s.i], nil
}
func (s *SliceSource) pos() int            { return s.i }
func (s *SliceSource) raw(from int) []byte { return s.B[from:s.i] }
func (s *SliceSource) atEOF() bool         { return s.i == len(s.B) }

var errShort = Corrupt("records truncated")

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
	return 0, Corrupt("varint overflow")
}

// WalkRecords parses count records from src, checking that every length
// is consistent, and calls fn (if non-nil) for each. It checks the source
// ends exactly after the last record.
func WalkRecords(src recordSource, count int32, fn func(*Record) error) error {
	var r Record
	for i := int32(0); i < count; i++ {
		recStart := src.pos()
		length, err := readVarint(src)
		if err != nil {
			return fmt.Errorf("record %d length: %w", i, err)
		}
		start := src.pos()
		if length < 0 {
			return Corrupt("record %d: negative length %d", i, length)
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
			return Corrupt("record %d: bad header count %d (%v)", i, nh, err)
		}
		for h := int64(0); h < nh; h++ {
			if _, null, err := readBytes(src, false); err != nil || null {
				return Corrupt("record %d header %d: bad key (%v)", i, h, err)
			}
			if _, _, err := readBytes(src, false); err != nil {
				return fmt.Errorf("record %d header %d value: %w", i, h, err)
			}
			if int64(src.pos()-start) > length {
				return Corrupt("record %d: headers overflow its length %d", i, length)
			}
		}
		if got := int64(src.pos() - start); got != length {
			return Corrupt("record %d: length %d but fields take %d", i, length, got)
		}
		r.Raw = src.raw(recStart)
		if fn != nil {
			if err := fn(&r); err != nil {
				return err
			}
		}
	}
	if !src.atEOF() {
		return Corrupt("bytes left after %d records", count)
	}
	return nil
}

func readBytes(src recordSource, keep bool) ([]byte, bool, error) {
	n, err := readVarint(src)
	if err != nil {
		return nil, false, err
	}
	if n < -1 {
		return nil, false, Corrupt("negative length %d", n)
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

func AppendVarint(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}
