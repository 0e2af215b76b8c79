package mirror

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror/wire"
	"github.com/tandem-kafka/tandem/uuid"
)

// State is a mirror partition's state (KIP-1279). The numbers are what
// __mirror_state and ReadMirrorStates/WriteMirrorStates carry.
type State int8

const (
	Unknown State = iota
	Preparing
	Mirroring
	EpochFencing
	Pausing
	Paused
	Stopping
	Stopped
	Failed
)

var stateNames = [...]string{"UNKNOWN", "PREPARING", "MIRRORING", "EPOCH_FENCING", "PAUSING", "PAUSED", "STOPPING", "STOPPED", "FAILED"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "UNKNOWN"
}

// canMove reports whether the KIP allows s → to. FAILED is reachable from
// any state; a failed partition restarts (PREPARING) when its topic is
// resumed or added again.
func (s State) canMove(to State) bool {
	if to == Failed || to == s {
		return true
	}
	switch s {
	case Unknown:
		return to == Preparing || to == Mirroring || to == Paused || to == Stopping || to == Stopped
	case Preparing:
		return to == Mirroring || to == Pausing || to == Stopping
	case Mirroring:
		return to == EpochFencing || to == Pausing || to == Stopping || to == Preparing
	case EpochFencing:
		return to == Mirroring || to == Pausing || to == Stopping
	case Pausing:
		return to == Paused || to == Stopping
	case Paused:
		return to == Mirroring || to == Stopping
	case Stopping:
		return to == Stopped
	case Stopped:
		return to == Preparing // the topic is added to a mirror again (failback)
	case Failed:
		return to == Preparing || to == Stopping
	}
	return false
}

// partitionKey names a mirror partition.
type partitionKey struct {
	mirror    string
	topic     string
	partition int32
}

// partitionState is a mirror partition's persisted state: the
// MirrorPartitionState and LastMirroredOffsets records of __mirror_state.
type partitionState struct {
	State   State
	Reason  string
	TopicID uuid.UUID
	LMO     int64 // last mirrored offset (-1: none)
	LME     int32 // last mirror epoch (-1: none)
	// StopAt and StopEpoch are the failover's first step, persisted: the
	// log end offset and leader epoch when the fetcher let go of the
	// partition (-1 before). Everything below StopAt is mirrored data;
	// a resumed STOPPING starts from them, whatever it wrote since.
	StopAt    int64
	StopEpoch int32
	// StopDone is the failover's last step, persisted: every step of
	// STOPPING is done for this partition, and the topic becomes
	// writable once all its partitions have it (whichever brokers lead
	// them).
	StopDone bool
	// StopIndex is the metadata index (raft log index) at which the
	// topic's membership was stopped, recorded with STOPPED: a broker
	// whose image is older has not seen the stop yet, and must not take
	// STOPPED with a live membership for the topic added again.
	StopIndex int64
	// CompleteAt is when (Unix ms, 0 unknown) the partition last held all
	// the source had, as its fetcher learned it: a consistent cut counts
	// an idle partition complete up to then, not only up to its last
	// record. Persisted every completeEvery while mirroring, at a pause
	// and at a stop, so that a restart keeps it (a paused partition
	// learns nothing more).
	CompleteAt int64
	// Cut is a consistent failover's (cut.go), persisted.
	Cut cutState
}

// cutState is a partition's part in a consistent failover. Set names the
// failover's topics (sorted, comma-separated): the partition's STOPPING
// waits after its first step until the set's cut is decided. At is the
// offset it is cut at (-1 until decided), Time the cut's source time T
// (Unix ms), Records and Ms what it gives up beyond the cut. The cut is
// decided for every partition of the set before any is truncated: see
// decideCut.
type cutState struct {
	Set                   string
	At, Time, Records, Ms int64
}

// newPartitionState is the state of a partition nothing was recorded for.
func newPartitionState() partitionState {
	return partitionState{LMO: -1, LME: -1, StopAt: -1, StopEpoch: -1, Cut: cutState{At: -1}}
}

// Records of __mirror_state. Keys start with an int16 type, as Kafka's
// coordinator records do: 1 LastMirroredOffsets, 2 MirrorPartitionState,
// each keyed by (mirror, topic, partition) so that compaction keeps one
// record per partition. Values start with an int16 version: state values
// are version 4 (version 0 lacks the stop fields, 1 StopDone, 2
// StopIndex, 3 the consistent cut and CompleteAt).
const (
	recLastMirrored int16 = 1
	recPartState    int16 = 2
	recDiverged     int16 = 3 // Tandem's: a divergence manifest entry, keyed also by its copy's start
)

func recordKey(typ int16, k partitionKey) []byte {
	b := kbin.AppendInt16(nil, typ)
	b = kbin.AppendString(b, k.mirror)
	b = kbin.AppendString(b, k.topic)
	return kbin.AppendInt32(b, k.partition)
}

func stateValue(s partitionState) []byte {
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

func offsetsValue(s partitionState) []byte {
	b := kbin.AppendInt16(nil, 0)
	b = kbin.AppendInt64(b, s.LMO)
	return kbin.AppendInt32(b, s.LME)
}

// shard is the state machine of one __mirror_state partition.
type shard struct {
	parts    map[partitionKey]*partitionState
	diverged map[manifestKey]*manifestEntry
}

// manifestKey names a divergence manifest entry: a partition and where
// the copy of its removed records starts in <topic>.diverged.
type manifestKey struct {
	partitionKey
	copyStart int64
}

// manifestEntry is a persisted divergence manifest entry; done once the
// records are all copied (before that, a resumed truncation finishes the
// copy).
type manifestEntry struct {
	wire.DivergedRange
	done bool
}

func divergedKey(k manifestKey) []byte {
	return kbin.AppendInt64(recordKey(recDiverged, k.partitionKey), k.copyStart)
}

func divergedValue(e *manifestEntry) []byte {
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
	return kbin.AppendBool(b, e.done)
}

func (s *shard) get(k partitionKey) *partitionState {
	p := s.parts[k]
	if p == nil {
		st := newPartitionState()
		p = &st
		s.parts[k] = p
	}
	return p
}

// Replay implements coord.StateMachine.
func (s *shard) Replay(key, value []byte) error {
	r := kbin.Reader{Src: key}
	typ := r.Int16()
	k := partitionKey{r.String(), r.String(), r.Int32()}
	var dk manifestKey
	if typ == recDiverged {
		dk = manifestKey{k, r.Int64()}
	}
	if err := r.Complete(); err != nil {
		return fmt.Errorf("mirror state key: %w", err)
	}
	v := kbin.Reader{Src: value}
	switch {
	case typ == recDiverged && value == nil:
		delete(s.diverged, dk)
		return nil
	case typ == recDiverged:
		v.Int16()
		e := &manifestEntry{DivergedRange: wire.DivergedRange{Topic: k.topic, Partition: k.partition, CopyStart: dk.copyStart}}
		e.FirstOffset, e.LastOffset, e.FirstEpoch, e.LastEpoch = v.Int64(), v.Int64(), v.Int32(), v.Int32()
		e.Records, e.FirstTimestamp, e.LastTimestamp, e.TruncatedAt = v.Int64(), v.Int64(), v.Int64(), v.Int64()
		e.Cause, e.CopyEnd, e.done = v.String(), v.Int64(), v.Bool()
		if err := v.Complete(); err != nil {
			return fmt.Errorf("mirror manifest value: %w", err)
		}
		s.diverged[dk] = e
		return nil
	case value == nil:
		delete(s.parts, k)
		return nil
	}
	version := v.Int16()
	p := s.get(k)
	switch typ {
	case recPartState:
		p.State = State(v.Int8())
		p.TopicID = v.Uuid()
		p.Reason = v.String()
		p.StopAt, p.StopEpoch, p.StopDone, p.StopIndex, p.Cut = -1, -1, false, 0, cutState{At: -1}
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
			p.Cut = cutState{Set: v.String(), At: v.Int64(), Time: v.Int64(), Records: v.Int64(), Ms: v.Int64()}
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

func (s *shard) Loaded(*coord.Shard) {}
func (s *shard) Unloaded()           {}

// coordKey is the string a mirror partition is routed by: its mirror,
// topic ID and partition, so that a mirror's partitions spread over the
// coordinators (FindCoordinator type MIRROR takes the same string).
func coordKey(mirror string, id uuid.UUID, partition int32) string {
	return mirror + ":" + base64.RawURLEncoding.EncodeToString(id[:]) + ":" + strconv.Itoa(int(partition))
}

// readStateLocal returns a mirror partition's state from the local
// shard: NOT_COORDINATOR if this broker does not lead it.
func (p *Plugin) readStateLocal(ctx context.Context, k partitionKey, id uuid.UUID) (partitionState, error) {
	var out partitionState
	err := p.Do(ctx, coordKey(k.mirror, id, k.partition), func(sh *coord.Shard) error {
		if st := sh.State().(*shard).parts[k]; st != nil {
			out = *st
		} else {
			out = newPartitionState()
			out.TopicID = id
		}
		return nil
	})
	return out, err
}

// writeStateLocal persists a partition's new state (and offsets, when
// they changed) on the local shard, refusing transitions the KIP does not
// allow: NOT_COORDINATOR if this broker does not lead it.
func (p *Plugin) writeStateLocal(ctx context.Context, k partitionKey, id uuid.UUID, update func(st *partitionState) error) (partitionState, error) {
	var out partitionState
	err := p.Do(ctx, coordKey(k.mirror, id, k.partition), func(sh *coord.Shard) error {
		s := sh.State().(*shard)
		cur := newPartitionState()
		if st := s.parts[k]; st != nil {
			cur = *st
		}
		next := cur
		next.TopicID = id
		if err := update(&next); err != nil {
			return err
		}
		if !cur.State.canMove(next.State) {
			return fmt.Errorf("mirror %s topic %s partition %d: %s cannot move to %s", k.mirror, k.topic, k.partition, cur.State, next.State)
		}
		var recs []coord.Record
		// Everything but the offsets is the state record: a field
		// added to partitionState is persisted without another
		// comparison here.
		withoutOffsets := func(s partitionState) partitionState {
			s.LMO, s.LME = 0, 0
			return s
		}
		if withoutOffsets(next) != withoutOffsets(cur) {
			recs = append(recs, coord.Record{Key: recordKey(recPartState, k), Value: stateValue(next)})
		}
		if next.LMO != cur.LMO || next.LME != cur.LME {
			recs = append(recs, coord.Record{Key: recordKey(recLastMirrored, k), Value: offsetsValue(next)})
		}
		if err := sh.Write(ctx, recs...); err != nil {
			return err
		}
		*s.get(k) = next
		out = next
		return nil
	})
	return out, err
}
