package mirrorstate

import (
	"fmt"
	"math/rand/v2"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// Records of __mirror_state. Keys start with an int16 type, as Kafka's
// coordinator records do: 1 LastMirroredOffsets, 2 MirrorPartitionState,
// each keyed by (mirror, topic, partition) so that compaction keeps one
// record per partition. Values start with an int16 version: state values
// are version 4 (version 0 has no stop fields; 1 adds StopAt and
// StopEpoch, 2 StopDone, 3 StopIndex, 4 the consistent cut and
// CompleteAt).
const (
	recLastMirrored int16 = 1
	recPartState    int16 = 2
	recDiverged     int16 = 3 // Tandem's: a divergence manifest entry, keyed also by its copy's start
)

func recordKey(typ int16, k PartitionKey) []byte {
	b := kbin.AppendInt16(nil, typ)
	b = kbin.AppendString(b, k.Mirror)
	b = kbin.AppendString(b, k.Topic)
	return kbin.AppendInt32(b, k.Partition)
}

func stateValue(s PartitionState) []byte {
	b := kbin.AppendInt16(nil, 4)
	b = kbin.AppendInt8(b, int8(s.State))
	b = kbin.AppendUuid(b, s.TopicID)
	b = kbin.AppendString(b, s.Reason)
	b = kbin.AppendInt64(b, s.StopAt)
	b = kbin.AppendInt32(b, s.StopEpoch)
	b = kbin.AppendBool(b, s.StopDone)
	b = kbin.AppendInt64(b, s.StopIndex)
	b = kbin.AppendString(b, s.Cut.Set)
	for _, v := range []int64{s.Cut.At, s.Cut.Time, s.Cut.Records, s.Cut.Ms, s.CompleteAt} {
		b = kbin.AppendInt64(b, v)
	}
	return b
}

func offsetsValue(s PartitionState) []byte {
	b := kbin.AppendInt16(nil, 0)
	b = kbin.AppendInt64(b, s.LMO)
	return kbin.AppendInt32(b, s.LME)
}

// StateRecords are the records that persist a partition's move from cur
// to next: its state record when anything but the offsets changed, its
// offsets record when they changed, none when nothing did. Offsets move
// with every mirrored batch and the rest seldom, hence two records.
func StateRecords(k PartitionKey, cur, next PartitionState) []coord.Record {
	var recs []coord.Record
	// Everything but the offsets is the state record: a field added to
	// PartitionState is persisted without another comparison here.
	withoutOffsets := func(s PartitionState) PartitionState {
		s.LMO, s.LME = 0, 0
		return s
	}
	if withoutOffsets(next) != withoutOffsets(cur) {
		recs = append(recs, coord.Record{Key: recordKey(recPartState, k), Value: stateValue(next)})
	}
	if next.LMO != cur.LMO || next.LME != cur.LME {
		recs = append(recs, coord.Record{Key: recordKey(recLastMirrored, k), Value: offsetsValue(next)})
	}
	return recs
}

// Tombstones are the records that delete a partition's state and offsets
// (a mirror's topic removed), so that compaction drops them.
func Tombstones(k PartitionKey) []coord.Record {
	return []coord.Record{{Key: recordKey(recPartState, k)}, {Key: recordKey(recLastMirrored, k)}}
}

// ManifestKey names a divergence manifest entry: a partition and where
// the copy of its removed records starts in <topic>.diverged.
type ManifestKey struct {
	PartitionKey
	CopyStart int64
}

// ManifestEntry is a persisted divergence manifest entry; Done once the
// records are all copied (before that, a resumed truncation finishes the
// copy).
type ManifestEntry struct {
	mirrorproto.DivergedRange
	Done bool
}

func divergedKey(k ManifestKey) []byte {
	return kbin.AppendInt64(recordKey(recDiverged, k.PartitionKey), k.CopyStart)
}

func divergedValue(e *ManifestEntry) []byte {
	b := kbin.AppendInt16(nil, 0)
	b = kbin.AppendInt64(b, e.FirstOffset)
	b = kbin.AppendInt64(b, e.LastOffset)
	b = kbin.AppendInt32(b, e.FirstEpoch)
	b = kbin.AppendInt32(b, e.LastEpoch)
	b = kbin.AppendInt64(b, e.Records)
	b = kbin.AppendInt64(b, e.FirstTimestamp)
	b = kbin.AppendInt64(b, e.LastTimestamp)
	b = kbin.AppendInt64(b, e.TruncatedAt)
	b = kbin.AppendString(b, e.Cause)
	b = kbin.AppendInt64(b, e.CopyEnd)
	return kbin.AppendBool(b, e.Done)
}

// EntryRecord is the record that persists a divergence manifest entry.
// The key carries the entry's topic, partition and copy start; the value
// the rest.
func EntryRecord(k ManifestKey, e *ManifestEntry) coord.Record {
	return coord.Record{Key: divergedKey(k), Value: divergedValue(e)}
}

// Shard is the state machine of one __mirror_state partition
// (coord.StateMachine): the states and manifest entries of the mirror
// partitions that hash to it. Its maps are read and changed under the
// coordinator shard's lock, after the records saying so are written.
type Shard struct {
	// Parts are the partition states; a partition missing has
	// NewPartitionState.
	Parts map[PartitionKey]*PartitionState
	// Diverged are the divergence manifest entries.
	Diverged map[ManifestKey]*ManifestEntry
	// Version counts the changes to Parts that a partition's leader
	// acts on (all but CompleteAt and the last mirrored offset and
	// epoch, which only the leader itself writes), so that a reader
	// that saw version v of this shard knows there is nothing new while
	// it still is v: a destination leader checks its local shards each
	// second without reading every partition's state.
	Version uint64
	// Incarnation tells this shard from the one before it at the same
	// version (the shard loaded again, here or on another broker), for
	// a reader on another broker that kept a version.
	Incarnation uint64
}

var _ coord.StateMachine = (*Shard)(nil)

// NewShard is an empty shard, before its records are replayed.
func NewShard() *Shard {
	return &Shard{Parts: map[PartitionKey]*PartitionState{}, Diverged: map[ManifestKey]*ManifestEntry{}, Incarnation: rand.Uint64()}
}

func (s *Shard) get(k PartitionKey) *PartitionState {
	p := s.Parts[k]
	if p == nil {
		st := NewPartitionState()
		p = &st
		s.Parts[k] = p
	}
	return p
}

// Set makes st the partition's state, once the records StateRecords
// returned for it are written.
func (s *Shard) Set(k PartitionKey, st PartitionState) {
	p := s.get(k)
	was, now := *p, st
	was.CompleteAt, was.LMO, was.LME = 0, 0, 0
	now.CompleteAt, now.LMO, now.LME = 0, 0, 0
	if was != now {
		s.Version++
	}
	*p = st
}

// Replay implements coord.StateMachine.
func (s *Shard) Replay(key, value []byte) error {
	r := kbin.Reader{Src: key}
	typ := r.Int16()
	k := PartitionKey{r.String(), r.String(), r.Int32()}
	var dk ManifestKey
	if typ == recDiverged {
		dk = ManifestKey{k, r.Int64()}
	}
	if err := r.Complete(); err != nil {
		return fmt.Errorf("mirror state key: %w", err)
	}
	v := kbin.Reader{Src: value}
	switch {
	case typ == recDiverged && value == nil:
		delete(s.Diverged, dk)
		return nil
	case typ == recDiverged:
		v.Int16()
		e := &ManifestEntry{DivergedRange: mirrorproto.DivergedRange{Topic: k.Topic, Partition: k.Partition, CopyStart: dk.CopyStart}}
		e.FirstOffset, e.LastOffset, e.FirstEpoch, e.LastEpoch = v.Int64(), v.Int64(), v.Int32(), v.Int32()
		e.Records, e.FirstTimestamp, e.LastTimestamp, e.TruncatedAt = v.Int64(), v.Int64(), v.Int64(), v.Int64()
		e.Cause, e.CopyEnd, e.Done = v.String(), v.Int64(), v.Bool()
		if err := v.Complete(); err != nil {
			return fmt.Errorf("mirror manifest value: %w", err)
		}
		s.Diverged[dk] = e
		return nil
	case value == nil && (typ == recPartState || typ == recLastMirrored):
		delete(s.Parts, k)
		s.Version++
		return nil
	case value == nil:
		// Not ours to read: it must not delete a partition's state.
		return fmt.Errorf("mirror state tombstone of record type %d", typ)
	}
	s.Version++
	version := v.Int16()
	p := s.get(k)
	switch typ {
	case recPartState:
		p.State = State(v.Int8())
		p.TopicID = v.Uuid()
		p.Reason = v.String()
		p.StopAt, p.StopEpoch, p.StopDone, p.StopIndex, p.Cut = -1, -1, false, 0, Cut{At: -1}
		if version >= 1 {
			p.StopAt, p.StopEpoch = v.Int64(), v.Int32()
		}
		if version >= 2 {
			p.StopDone = v.Bool()
		}
		if version >= 3 {
			p.StopIndex = v.Int64()
		}
		if version >= 4 {
			p.Cut = Cut{Set: v.String(), At: v.Int64(), Time: v.Int64(), Records: v.Int64(), Ms: v.Int64()}
			p.CompleteAt = v.Int64()
		}
	case recLastMirrored:
		p.LMO = v.Int64()
		p.LME = v.Int32()
	default:
		return fmt.Errorf("mirror state record type %d", typ)
	}
	if err := v.Complete(); err != nil {
		return fmt.Errorf("mirror state value: %w", err)
	}
	return nil
}

// Loaded implements coord.StateMachine: a mirror shard has no timers.
func (s *Shard) Loaded(*coord.Shard) {}

// Unloaded implements coord.StateMachine: nothing waits on a mirror shard.
func (s *Shard) Unloaded() {}
