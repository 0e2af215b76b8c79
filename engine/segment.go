package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/tandem-kafka/tandem/engine/internal/segfile"
)

// A partition's log is a directory of segment files, named by the offset
// they start at as Kafka names them (00000000000000000000.log), each
// holding record batches back to back exactly as they were appended. The
// last segment is the active one; appends go to its end, and a new one is
// rolled when it reaches segment.bytes or segment.ms. Only the active
// segment's tail can be torn by a crash: a segment is fsynced before the
// next one is created.
const (
	segmentsDir = "segments"
	// indexInterval is Kafka's index.interval.bytes: a sparse index entry
	// at most every 4 KiB of log (and at the start of every segment).
	indexInterval = 4096
)

func partitionDirName(id TopicID, p int32) string { return fmt.Sprintf("%s-%d", id, p) }

// segment is one segment file and what the engine knows of it.
type segment struct {
	base int64
	file *segfile.File
	size int64 // bytes of whole batches in the file: where the next append goes
	next int64 // offset after its last batch (base when empty)
	// The largest timestamp in the segment, the offset of its record and
	// its batch's epoch (retention.ms, ListOffsets -3).
	maxTs      int64
	maxTsOff   int64
	maxTsEpoch int32
	created    int64 // unix ms when the segment was rolled (segment.ms)
}

// summary is the segment's Pebble entry (without size, which is the
// file's).
func (s *segment) summary() []byte {
	b := make([]byte, 0, 36)
	b = binary.BigEndian.AppendUint64(b, uint64(s.maxTs))
	b = binary.BigEndian.AppendUint64(b, uint64(s.maxTsOff))
	b = binary.BigEndian.AppendUint32(b, uint32(s.maxTsEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(s.created))
	return binary.BigEndian.AppendUint64(b, uint64(s.next))
}

func (s *segment) decodeSummary(b []byte) error {
	if len(b) != 36 {
		return fmt.Errorf("segment %d summary of %d bytes", s.base, len(b))
	}
	s.maxTs, s.maxTsOff = be64(b), be64(b[8:])
	s.maxTsEpoch = int32(binary.BigEndian.Uint32(b[16:]))
	s.created, s.next = be64(b[20:]), be64(b[28:])
	return nil
}

// noteBatch updates the summary with a batch appended at its end.
func (s *segment) noteBatch(m batchMeta) {
	if s.size == 0 || m.MaxTs > s.maxTs {
		s.maxTs, s.maxTsOff, s.maxTsEpoch = m.MaxTs, m.Base+int64(m.MaxTsDelta), m.Epoch
	}
	s.size += int64(m.Size)
	s.next = m.last() + 1
}

// batchMeta is what the engine keeps of a batch while appending it.
type batchMeta struct {
	Base       int64
	LastDelta  int32
	Size       int32
	MaxTs      int64
	MaxTsDelta int32 // offset delta of the record holding MaxTs
	Epoch      int32
}

func (m batchMeta) last() int64 { return m.Base + int64(m.LastDelta) }

// indexEntry is a sparse index value: the batch's position in its
// segment and the largest timestamp of the segment before it (so that a
// search by timestamp starts at the last entry below the timestamp).
func indexEntry(pos, maxTsBefore int64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(pos)), uint64(maxTsBefore))
}

// recoveryPoint is the value of a partition's 'R' key: the index,
// producer state, epochs and aborted transactions in Pebble cover every
// batch before position pos of segment seg, which ends at offset next.
// exact says the log ends there: a truncation may not have reached the
// file before a crash, and recovery must finish it rather than replay
// what follows.
type recoveryPoint struct {
	seg, pos, next int64
	exact          bool
}

func (r recoveryPoint) encode() []byte {
	b := make([]byte, 0, 25)
	b = binary.BigEndian.AppendUint64(b, uint64(r.seg))
	b = binary.BigEndian.AppendUint64(b, uint64(r.pos))
	b = binary.BigEndian.AppendUint64(b, uint64(r.next))
	if r.exact {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodeRecoveryPoint(b []byte) (recoveryPoint, error) {
	if len(b) != 25 {
		return recoveryPoint{}, fmt.Errorf("recovery point of %d bytes", len(b))
	}
	return recoveryPoint{seg: be64(b), pos: be64(b[8:]), next: be64(b[16:]), exact: b[24] == 1}, nil
}
