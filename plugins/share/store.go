package share

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The share coordinator: the durable state of every share-partition
// (group, topic, partition) in the compacted internal topic
// __share_group_state, as Kafka's share coordinator keeps it. A key is
// routed to its partition by "group:topicId:partition", as Kafka does.
//
// Records, in Kafka's formats (the key's leading int16 is the type):
//
//	0 ShareSnapshotKey (group, topic ID, partition) → ShareSnapshotValue
//	  (snapshot epoch, state epoch, leader epoch, start offset, state batches)
//	1 ShareUpdateKey → ShareUpdateValue (the same, as a change)
//
// Tandem writes a snapshot of the whole state on every change: a
// share-partition's state is small (its in-flight window is bounded by
// group.share.partition.max.record.locks), and the latest snapshot per
// key is then all that compaction must keep. Update records written by
// another implementation are merged when read.

const (
	recSnapshot int16 = 0
	recUpdate   int16 = 1
)

// Delivery states of a state batch (Kafka's RecordState codes).
const (
	stateAvailable int8 = 0
	stateAcquired  int8 = 1
	stateAcked     int8 = 2
	stateArchived  int8 = 4
)

// stateKey names a share-partition.
type stateKey struct {
	group     string
	topic     uuid.UUID
	partition int32
}

// coordKey is the key Kafka routes a share-partition's state by.
func (k stateKey) coordKey() string {
	return k.group + ":" + k.topic.Base64() + ":" + strconv.Itoa(int(k.partition))
}

func (k stateKey) encode(typ int16) []byte {
	e := coord.Enc{}
	e.I16(typ)
	e.KeyStr(k.group)
	e.Uuid(k.topic)
	e.I32(k.partition)
	return e.B
}

func decodeKey(b []byte) (int16, stateKey, error) {
	d := coord.NewDec(b)
	typ := d.I16()
	k := stateKey{group: d.KeyStr(), topic: d.Uuid(), partition: d.I32()}
	return typ, k, d.Done("share state key")
}

// stateBatch is a range of offsets in one delivery state.
type stateBatch struct {
	first, last int64
	state       int8
	count       int16
}

// shareState is a share-partition's durable state.
type shareState struct {
	snapshotEpoch uint16
	stateEpoch    int32
	leaderEpoch   int32
	start         int64        // -1: not initialized
	batches       []stateBatch // sorted, disjoint, at or above start
}

func (s *shareState) encode() []byte {
	e := coord.Enc{}
	e.I16(0)
	e.B = binary.BigEndian.AppendUint16(e.B, s.snapshotEpoch)
	e.I32(s.stateEpoch)
	e.I32(s.leaderEpoch)
	e.I64(s.start)
	e.Arr(len(s.batches))
	for _, b := range s.batches {
		e.I64(b.first)
		e.I64(b.last)
		e.I8(b.state)
		e.B = binary.BigEndian.AppendUint16(e.B, uint16(b.count))
		e.NoTags()
	}
	e.NoTags()
	return e.B
}

// decodeState reads a ShareSnapshotValue, or a ShareUpdateValue (which
// has no state epoch) with update set.
func decodeState(b []byte, update bool) (*shareState, error) {
	d := coord.NewDec(b)
	d.I16()
	s := &shareState{snapshotEpoch: uint16(d.I16())}
	if !update {
		s.stateEpoch = d.I32()
	}
	s.leaderEpoch, s.start = d.I32(), d.I64()
	for range d.Arr() {
		sb := stateBatch{first: d.I64(), last: d.I64(), state: d.I8(), count: d.I16()}
		d.SkipTags()
		if sb.last >= sb.first {
			s.batches = append(s.batches, sb)
		}
	}
	d.SkipTags()
	return s, d.Done("share state value")
}

// merge applies a change: a new start offset (unless -1) and batches that
// replace the state of their offsets. Offsets below the start are gone.
func (s *shareState) merge(start int64, batches []stateBatch) {
	if start >= 0 {
		s.start = start
	}
	out := s.batches[:0:0]
	for _, old := range s.batches {
		pieces := []stateBatch{old}
		for _, nb := range batches {
			var next []stateBatch
			for _, p := range pieces {
				if nb.last < p.first || nb.first > p.last {
					next = append(next, p)
					continue
				}
				if p.first < nb.first {
					next = append(next, stateBatch{p.first, nb.first - 1, p.state, p.count})
				}
				if p.last > nb.last {
					next = append(next, stateBatch{nb.last + 1, p.last, p.state, p.count})
				}
			}
			pieces = next
		}
		out = append(out, pieces...)
	}
	out = append(out, batches...)
	slices.SortFunc(out, func(a, b stateBatch) int { return int(a.first - b.first) })
	s.batches = out[:0]
	for _, b := range out {
		if b.last < s.start {
			continue
		}
		b.first = max(b.first, s.start)
		s.batches = append(s.batches, b)
	}
}

// doneAbove counts the offsets from the start on that are acknowledged
// or archived.
func (s *shareState) doneAbove() int64 {
	var n int64
	for _, b := range s.batches {
		if b.state == stateAcked || b.state == stateArchived {
			n += b.last - b.first + 1
		}
	}
	return n
}

// states is one partition of __share_group_state: the share-partitions
// hashed to it. The coordinator runtime serialises every call.
type states struct {
	p  *Plugin
	sh *coord.Shard
	m  map[stateKey]*shareState
}

// Replay implements coord.StateMachine.
func (s *states) Replay(key, value []byte) error {
	typ, k, err := decodeKey(key)
	if err != nil || typ != recSnapshot && typ != recUpdate {
		s.p.log.Warn("skipping undecodable record of "+Topic, "err", err, "type", typ)
		return nil
	}
	if value == nil {
		delete(s.m, k) // a snapshot tombstone deletes the state; both keys get one
		return nil
	}
	v, err := decodeState(value, typ == recUpdate)
	if err != nil {
		s.p.log.Warn("skipping undecodable record of "+Topic, "err", err)
		return nil
	}
	if typ == recSnapshot {
		s.m[k] = v
		return nil
	}
	if cur := s.m[k]; cur != nil {
		cur.leaderEpoch = v.leaderEpoch
		cur.merge(v.start, v.batches)
	}
	return nil
}

// Loaded implements coord.StateMachine.
func (s *states) Loaded(sh *coord.Shard) { s.sh = sh }

// Unloaded implements coord.StateMachine.
func (s *states) Unloaded() { s.m = nil }

// put writes the state of k as a snapshot, then keeps it.
func (s *states) put(k stateKey, st *shareState) error {
	st.snapshotEpoch++
	if err := s.sh.Write(s.sh.Context(), coord.Record{Key: k.encode(recSnapshot), Value: st.encode()}); err != nil {
		st.snapshotEpoch--
		return err
	}
	s.m[k] = st
	return nil
}

// initialize starts a share-partition's state afresh at start (-1: per
// share.auto.offset.reset), with a state epoch above any before.
func (s *states) initialize(k stateKey, stateEpoch int32, start int64) error {
	st := &shareState{stateEpoch: stateEpoch, start: start}
	if cur := s.m[k]; cur != nil {
		st.snapshotEpoch, st.leaderEpoch = cur.snapshotEpoch, cur.leaderEpoch
		st.stateEpoch = max(stateEpoch, cur.stateEpoch+1)
	}
	return s.put(k, st)
}

// write applies a share-partition leader's change. A writer with an older
// state epoch (the state was initialized again since it read it) or
// leader epoch is fenced.
func (s *states) write(k stateKey, stateEpoch, leaderEpoch int32, start int64, batches []stateBatch) error {
	cur := s.m[k]
	switch {
	case cur == nil:
		return fmt.Errorf("share-partition %s has no state: %w", k.coordKey(), kerr.InvalidRequest)
	case stateEpoch < cur.stateEpoch:
		return fmt.Errorf("state epoch %d, current %d: %w", stateEpoch, cur.stateEpoch, kerr.FencedStateEpoch)
	case leaderEpoch < cur.leaderEpoch:
		return fmt.Errorf("leader epoch %d, current %d: %w", leaderEpoch, cur.leaderEpoch, kerr.FencedLeaderEpoch)
	}
	next := *cur
	next.batches = slices.Clone(cur.batches)
	next.leaderEpoch = leaderEpoch
	next.merge(start, batches)
	return s.put(k, &next)
}

// remove deletes a share-partition's state.
func (s *states) remove(k stateKey) error {
	if _, ok := s.m[k]; !ok {
		return nil
	}
	if err := s.sh.Write(s.sh.Context(), coord.Record{Key: k.encode(recSnapshot)}, coord.Record{Key: k.encode(recUpdate)}); err != nil {
		return err
	}
	delete(s.m, k)
	return nil
}

// onState runs fn on the shard that holds k's state, creating the
// internal topic on first use.
func (p *Plugin) onState(ctx context.Context, k stateKey, fn func(s *states) error) error {
	h := p.Host()
	if h == nil {
		return kerr.CoordinatorNotAvailable
	}
	if _, err := h.EnsureTopic(ctx, p.Topic()); err != nil {
		return err
	}
	return p.Do(ctx, k.coordKey(), func(sh *coord.Shard) error { return fn(sh.State().(*states)) })
}

// readState returns a copy of k's state, nil if it has none.
func (p *Plugin) readState(ctx context.Context, k stateKey) (*shareState, error) {
	var out *shareState
	err := p.onState(ctx, k, func(s *states) error {
		if cur := s.m[k]; cur != nil {
			c := *cur
			c.batches = slices.Clone(cur.batches)
			out = &c
		}
		return nil
	})
	return out, err
}

// --- plugin.ShareStateStore ---

var _ plugin.ShareStateStore = (*Plugin)(nil)

// InitializeShareState implements plugin.ShareStateStore. A
// share-partition whose state is re-initialized is reloaded by its
// leader: the records in flight are forgotten.
func (p *Plugin) InitializeShareState(ctx context.Context, group string, starts map[plugin.SharePartition]int64) error {
	for sp, start := range starts {
		k := stateKey{group, sp.TopicID, sp.Partition}
		node, remote, err := p.stateCoordinator(ctx, k)
		switch {
		case err != nil:
		case remote:
			err = p.remoteInitialize(ctx, node, k, 0, start)
		default:
			err = p.onState(ctx, k, func(s *states) error { return s.initialize(k, 0, start) })
		}
		if err != nil {
			return fmt.Errorf("initialize %s-%d: %w", sp.Topic, sp.Partition, err)
		}
		p.evict(k)
	}
	return nil
}

// ReadShareStates implements plugin.ShareStateStore.
func (p *Plugin) ReadShareStates(ctx context.Context, group string, parts []plugin.SharePartition) (map[plugin.SharePartition]plugin.ShareState, error) {
	out := map[plugin.SharePartition]plugin.ShareState{}
	for _, sp := range parts {
		k := stateKey{group, sp.TopicID, sp.Partition}
		node, remote, err := p.stateCoordinator(ctx, k)
		if err == nil && remote {
			var sum kmsg.ReadShareGroupStateSummaryResponseTopicPartition
			if sum, err = p.remoteSummary(ctx, node, k); err == nil {
				out[sp] = plugin.ShareState{StateEpoch: sum.StateEpoch, LeaderEpoch: sum.LeaderEpoch, StartOffset: sum.StartOffset,
					DoneAbove: int64(sum.DeliveryCompleteCount)}
				continue
			}
		}
		var st *shareState
		if err == nil {
			st, err = p.readState(ctx, k)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s-%d: %w", sp.Topic, sp.Partition, err)
		}
		if st == nil {
			out[sp] = plugin.ShareState{StartOffset: -1, LeaderEpoch: -1}
			continue
		}
		out[sp] = plugin.ShareState{StateEpoch: st.stateEpoch, LeaderEpoch: st.leaderEpoch, StartOffset: st.start, DoneAbove: st.doneAbove()}
	}
	return out, nil
}

// DeleteShareStates implements plugin.ShareStateStore.
func (p *Plugin) DeleteShareStates(ctx context.Context, group string, parts []plugin.SharePartition) error {
	for _, sp := range parts {
		k := stateKey{group, sp.TopicID, sp.Partition}
		node, remote, err := p.stateCoordinator(ctx, k)
		switch {
		case err != nil:
		case remote:
			err = p.remoteDelete(ctx, node, k)
		default:
			err = p.onState(ctx, k, func(s *states) error { return s.remove(k) })
		}
		if err != nil {
			return fmt.Errorf("delete %s-%d: %w", sp.Topic, sp.Partition, err)
		}
		p.evict(k)
	}
	return nil
}
