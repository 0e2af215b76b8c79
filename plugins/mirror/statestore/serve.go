package statestore

import (
	"context"
	"errors"
	"slices"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// shardMarks are the __mirror_state shards a ReadMirrorStates from
// another broker touches: the marks it knew (ReadMirrorStatesRequest
// KnownShards) and what they are now here.
type shardMarks struct {
	store *Store
	ctx   context.Context
	known map[int32]mirrorproto.ShardMark
	now   map[int32]mirrorproto.ShardMark
}

// unchanged reports whether the shard of a partition's coordinator key
// is as the asker knew it.
func (m *shardMarks) unchanged(key string) bool {
	shard := m.store.c.PartitionFor(key)
	now, ok := m.now[shard]
	if !ok {
		now = mirrorproto.ShardMark{Shard: shard, Incarnation: 0, Version: -1} // not here: never unchanged
		m.store.c.Runtime().Do(m.ctx, shard, func(sh *coord.Shard) error {
			s := sh.State().(*mirrorstate.Shard)
			now.Incarnation, now.Version = int64(s.Incarnation), int64(s.Version)
			return nil
		})
		m.now[shard] = now
	}
	k, knew := m.known[shard]
	return knew && now.Version >= 0 && k == now
}

// list is the marks of the shards touched, for the answer.
func (m *shardMarks) list() []mirrorproto.ShardMark {
	var out []mirrorproto.ShardMark
	for _, mk := range m.now {
		if mk.Version >= 0 {
			out = append(out, mk)
		}
	}
	return out
}

// ServeRead answers ReadMirrorStates from img, this broker's image caught
// up with the controller's for the mirror asked about.
func (store *Store) ServeRead(ctx context.Context, img *metadata.Image, req *mirrorproto.ReadMirrorStatesRequest) ([]mirrorproto.StatesTopic, []mirrorproto.ShardMark, int16) {
	m := img.Mirrors[req.MirrorName]
	var out []mirrorproto.StatesTopic
	marks := shardMarks{store: store, ctx: ctx, known: map[int32]mirrorproto.ShardMark{}, now: map[int32]mirrorproto.ShardMark{}}
	for _, k := range req.KnownShards {
		marks.known[k.Shard] = k
	}
	for _, t := range req.Topics {
		st := mirrorproto.StatesTopic{Name: t.Name}
		if !t.TopicID.IsZero() && req.NeedPartitionStates {
			// Another broker asks this coordinator for the states it
			// keeps: they are answered whatever this broker's image says
			// of the mirror (it may not have it yet, or any more); those
			// of a shard still as the asker knew it are left out.
			for _, idx := range t.Partitions {
				if marks.unchanged(Key(req.MirrorName, t.TopicID, idx)) {
					continue
				}
				sp := mirrorproto.StatePartition{PartitionIndex: idx, LastMirroredOffset: -1, LastMirrorEpoch: -1, StopOffset: -1, StopEpoch: -1}
				k := mirrorstate.PartitionKey{Mirror: req.MirrorName, Topic: t.Name, Partition: idx}
				s, err := store.readLocal(ctx, k, t.TopicID)
				if err == nil {
					setState(&sp, s)
					sp.Diverged, err = store.entriesLocal(ctx, k, t.TopicID)
				}
				sp.ErrorCode, _ = code(err)
				st.Partitions = append(st.Partitions, sp)
			}
			out = append(out, st)
			continue
		}
		if m == nil {
			return nil, nil, mirrorproto.ErrMirrorNotFound.Code
		}
		mt, ok := m.Topics[t.Name]
		if !req.NeedPartitionStates {
			st.Partitions = []mirrorproto.StatePartition{store.topicState(ctx, req.MirrorName, t.Name, mt, ok)}
			out = append(out, st)
			continue
		}
		for _, idx := range t.Partitions {
			sp := mirrorproto.StatePartition{PartitionIndex: idx, LastMirroredOffset: -1, LastMirrorEpoch: -1, StopOffset: -1, StopEpoch: -1}
			if !ok {
				sp.ErrorCode = mirrorproto.ErrTopicNotMirrored.Code
			} else if s, err := store.Read(ctx, mirrorstate.PartitionKey{Mirror: req.MirrorName, Topic: t.Name, Partition: idx}, mt.ID); err != nil {
				sp.ErrorCode, _ = code(err)
			} else {
				setState(&sp, s)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		out = append(out, st)
	}
	if len(req.Topics) == 0 && m == nil {
		return nil, nil, mirrorproto.ErrMirrorNotFound.Code
	}
	return out, marks.list(), 0
}

// setState fills a response's partition with a persisted state.
func setState(sp *mirrorproto.StatePartition, s mirrorstate.PartitionState) {
	sp.LastMirroredOffset, sp.State, sp.LastMirrorEpoch, sp.Reason, sp.TopicID = s.LMO, int8(s.State), s.LME, s.Reason, s.TopicID
	sp.StopOffset, sp.StopEpoch, sp.StopDone, sp.StopIndex = s.StopAt, s.StopEpoch, s.StopDone, s.StopIndex
	sp.CutSet, sp.CutAt, sp.CutTime, sp.CutRecords, sp.CutMs, sp.CompleteAt = s.Cut.Set, s.Cut.At, s.Cut.Time, s.Cut.Records, s.Cut.Ms, s.CompleteAt
}

// topicState is ReadMirrorStates without NeedPartitionStates: one entry
// per topic (partition index -1, no offsets) whose state is its
// partitions' when they agree; when they differ, FAILED if one failed,
// else the transition some are still in (STOPPING, PAUSING, PREPARING,
// EPOCH_FENCING), else the first partition's.
func (store *Store) topicState(ctx context.Context, mirror, topic string, mt metadata.MirrorTopic, ok bool) mirrorproto.StatePartition {
	sp := mirrorproto.StatePartition{PartitionIndex: -1, LastMirroredOffset: -1, LastMirrorEpoch: -1, TopicID: mt.ID}
	t := store.c.Image().Topics[topic]
	if !ok || t == nil {
		sp.ErrorCode = mirrorproto.ErrTopicNotMirrored.Code
		return sp
	}
	var states []mirrorstate.State
	for i := range t.Partitions {
		s, err := store.Read(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: topic, Partition: int32(i)}, mt.ID)
		if err != nil {
			sp.ErrorCode, _ = code(err)
			return sp
		}
		states = append(states, s.State)
	}
	st := mirrorstate.Unknown
	if len(states) > 0 {
		st = states[0]
	}
	for _, s := range []mirrorstate.State{mirrorstate.Failed, mirrorstate.Stopping, mirrorstate.Pausing, mirrorstate.Preparing, mirrorstate.EpochFencing} {
		if slices.Contains(states, s) && slices.ContainsFunc(states, func(o mirrorstate.State) bool { return o != s }) {
			st = s
			break
		}
	}
	sp.State = int8(st)
	return sp
}

// ServeWrite is WriteMirrorStates: TopicsUpdated are persisted; the
// states of RemovedTopics are deleted (tombstones), whatever partitions
// they had.
func (store *Store) ServeWrite(ctx context.Context, req *mirrorproto.WriteMirrorStatesRequest) []mirrorproto.ErrTopic {
	img := store.c.Image()
	var out []mirrorproto.ErrTopic
	for _, name := range req.RemovedTopics {
		et := mirrorproto.ErrTopic{Name: name}
		c, _ := code(store.removeStatesLocal(ctx, req.MirrorName, name))
		et.Partitions = append(et.Partitions, mirrorproto.ErrPartition{PartitionIndex: -1, ErrorCode: c})
		out = append(out, et)
	}
	for _, t := range req.TopicsUpdated {
		et := mirrorproto.ErrTopic{Name: t.Name}
		for _, sp := range t.Partitions {
			id := sp.TopicID
			if tt := img.Topics[t.Name]; id.IsZero() && tt != nil {
				id = tt.ID
			}
			// Written on this broker's shard only: WriteMirrorStates is
			// what the other brokers send to the coordinator, which
			// answers NOT_COORDINATOR when it is not (any more). A
			// partition with manifest entries carries only them.
			if len(sp.Diverged) > 0 {
				c, _ := code(store.writeEntriesLocal(ctx, mirrorstate.PartitionKey{Mirror: req.MirrorName, Topic: t.Name, Partition: sp.PartitionIndex}, id, sp.Diverged))
				et.Partitions = append(et.Partitions, mirrorproto.ErrPartition{PartitionIndex: sp.PartitionIndex, ErrorCode: c})
				continue
			}
			_, err := store.writeLocal(ctx, mirrorstate.PartitionKey{Mirror: req.MirrorName, Topic: t.Name, Partition: sp.PartitionIndex}, id, func(s *mirrorstate.PartitionState) error {
				s.State, s.LMO, s.LME, s.Reason = mirrorstate.State(sp.State), sp.LastMirroredOffset, sp.LastMirrorEpoch, sp.Reason
				s.StopAt, s.StopEpoch, s.StopDone, s.StopIndex = sp.StopOffset, sp.StopEpoch, sp.StopDone, sp.StopIndex
				s.Cut, s.CompleteAt = mirrorstate.Cut{Set: sp.CutSet, At: sp.CutAt, Time: sp.CutTime, Records: sp.CutRecords, Ms: sp.CutMs}, sp.CompleteAt
				return nil
			})
			c, _ := code(err)
			et.Partitions = append(et.Partitions, mirrorproto.ErrPartition{PartitionIndex: sp.PartitionIndex, ErrorCode: c})
		}
		out = append(out, et)
	}
	return out
}

// removeStatesLocal deletes the states a mirror keeps for a topic, on
// every __mirror_state shard this broker leads.
func (store *Store) removeStatesLocal(ctx context.Context, mirror, topic string) error {
	var errs []error
	for _, sh := range store.c.Runtime().Shards() {
		errs = append(errs, sh.Do(ctx, func(sh *coord.Shard) error {
			s := sh.State().(*mirrorstate.Shard)
			var recs []coord.Record
			for k := range s.Parts {
				if k.Mirror == mirror && k.Topic == topic {
					recs = append(recs, mirrorstate.Tombstones(k)...)
				}
			}
			if err := sh.Write(ctx, recs...); err != nil {
				return err
			}
			for k := range s.Parts {
				if k.Mirror == mirror && k.Topic == topic {
					delete(s.Parts, k)
				}
			}
			return nil
		}))
	}
	return errors.Join(errs...)
}
