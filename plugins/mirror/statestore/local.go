package statestore

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// Key is the string a mirror partition is routed by: its mirror,
// topic ID and partition, so that a mirror's partitions spread over the
// coordinators (FindCoordinator type MIRROR takes the same string).
func Key(mirror string, id uuid.UUID, partition int32) string {
	return mirror + ":" + base64.RawURLEncoding.EncodeToString(id[:]) + ":" + strconv.Itoa(int(partition))
}

// readLocal returns a mirror partition's state from the local
// shard: NOT_COORDINATOR if this broker does not lead it.
func (store *Store) readLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := store.do(ctx, Key(k.Mirror, id, k.Partition), func(sh *coord.Shard) error {
		if st := sh.State().(*mirrorstate.Shard).Parts[k]; st != nil {
			out = *st
		} else {
			out = mirrorstate.NewPartitionState()
			out.TopicID = id
		}
		return nil
	})
	return out, err
}

// ReadShardLocal reads, from __mirror_state shard on this broker, the
// states of keys (with their topic IDs in ids) into out, unless the shard
// is the same one at the same version as in seen; seen is updated. An
// error (NOT_COORDINATOR: another broker coordinates the shard) reads
// nothing.
func (store *Store) ReadShardLocal(ctx context.Context, mirror string, shard int32, keys []topicPartition, ids map[topicPartition]uuid.UUID, seen map[int32]Mark, out map[topicPartition]mirrorstate.PartitionState) error {
	leader, _ := store.Leader(Key(mirror, ids[keys[0]], keys[0].Partition))
	if leader >= 0 && leader != store.c.NodeID() {
		return fmt.Errorf("__mirror_state partition %d is on broker %d: %w", shard, leader, kerr.NotCoordinator)
	}
	return store.c.Runtime().Do(ctx, shard, func(sh *coord.Shard) error {
		s := sh.State().(*mirrorstate.Shard)
		if m, ok := seen[shard]; ok && m.shard == s && m.version == s.Version {
			return nil
		}
		for _, k := range keys {
			st := mirrorstate.NewPartitionState()
			st.TopicID = ids[k]
			if cur := s.Parts[mirrorstate.PartitionKey{Mirror: mirror, Topic: k.Topic, Partition: k.Partition}]; cur != nil {
				st = *cur
			}
			out[k] = st
		}
		seen[shard] = Mark{shard: s, version: s.Version}
		return nil
	})
}

// Update is one partition's change in a batch of WriteBatch.
type Update struct {
	Partition topicPartition
	TopicID   uuid.UUID
	Apply     func(st *mirrorstate.PartitionState) error
}

// WriteBatch is Write for many partitions of a mirror: one write
// for each __mirror_state shard on this broker, one read and one write
// for each other broker that coordinates some of them, where one each
// would cost a round of the coordinator's log (a mirror of ten thousand
// partitions starts with two state writes each). It returns the new
// state of each partition written and the error of each not.
func (store *Store) WriteBatch(ctx context.Context, mirror string, ups []Update) (map[topicPartition]mirrorstate.PartitionState, map[topicPartition]error) {
	done := map[topicPartition]mirrorstate.PartitionState{}
	failed := map[topicPartition]error{}
	byShard := map[int32][]Update{}
	for _, u := range ups {
		shard := store.c.PartitionFor(Key(mirror, u.TopicID, u.Partition.Partition))
		byShard[shard] = append(byShard[shard], u)
	}
	byNode := map[int32][]Update{}
	for shard, us := range byShard {
		leader, _ := store.Leader(Key(mirror, us[0].TopicID, us[0].Partition.Partition))
		if leader >= 0 && leader != store.c.NodeID() {
			byNode[leader] = append(byNode[leader], us...)
			continue
		}
		store.writeShardLocal(ctx, mirror, shard, us, done, failed)
	}
	for node, us := range byNode {
		store.writeStatesRemote(ctx, mirror, node, us, done, failed)
	}
	return done, failed
}

// next applies u to cur, refusing what the KIP does not allow.
func (u Update) next(mirror string, cur mirrorstate.PartitionState) (mirrorstate.PartitionState, error) {
	next := cur
	next.TopicID = u.TopicID
	if err := u.Apply(&next); err != nil {
		return cur, err
	}
	if !cur.State.CanMove(next.State) {
		return cur, fmt.Errorf("mirror %s topic %s partition %d: %s cannot move to %s", mirror, u.Partition.Topic, u.Partition.Partition, cur.State, next.State)
	}
	return next, nil
}

// writeShardLocal applies us on shard, on this broker, in one write.
func (store *Store) writeShardLocal(ctx context.Context, mirror string, shard int32, us []Update, done map[topicPartition]mirrorstate.PartitionState, failed map[topicPartition]error) {
	type set struct {
		u  Update
		k  mirrorstate.PartitionKey
		st mirrorstate.PartitionState
	}
	var sets []set
	err := store.c.Runtime().Do(ctx, shard, func(sh *coord.Shard) error {
		s := sh.State().(*mirrorstate.Shard)
		var recs []coord.Record
		for _, u := range us {
			k := mirrorstate.PartitionKey{Mirror: mirror, Topic: u.Partition.Topic, Partition: u.Partition.Partition}
			cur := mirrorstate.NewPartitionState()
			if st := s.Parts[k]; st != nil {
				cur = *st
			}
			next, err := u.next(mirror, cur)
			if err != nil {
				failed[u.Partition] = err
				continue
			}
			if next != cur {
				recs = append(recs, mirrorstate.StateRecords(k, cur, next)...)
			}
			sets = append(sets, set{u, k, next})
		}
		if len(recs) > 0 {
			if err := sh.Write(ctx, recs...); err != nil {
				return err
			}
		}
		for _, x := range sets {
			s.Set(x.k, x.st)
		}
		return nil
	})
	for _, x := range sets {
		if err != nil {
			failed[x.u.Partition] = err
		} else {
			done[x.u.Partition] = x.st
		}
	}
	if err != nil && len(sets) == 0 {
		for _, u := range us {
			if _, ok := failed[u.Partition]; !ok {
				failed[u.Partition] = err
			}
		}
	}
}

// writeStatesRemote applies us on coordinator node: a read of their
// states, then one write.
func (store *Store) writeStatesRemote(ctx context.Context, mirror string, node int32, us []Update, done map[topicPartition]mirrorstate.PartitionState, failed map[topicPartition]error) {
	ids := make(map[topicPartition]uuid.UUID, len(us))
	for _, u := range us {
		ids[u.Partition] = u.TopicID
	}
	cur := store.ReadBatch(ctx, mirror, ids)
	topics := map[string][]mirrorproto.StatePartition{}
	next := map[topicPartition]mirrorstate.PartitionState{}
	for _, u := range us {
		st, ok := cur[u.Partition]
		if !ok {
			failed[u.Partition] = fmt.Errorf("reading the mirror state of %s-%d on broker %d: no answer: %w", u.Partition.Topic, u.Partition.Partition, node, errUnreachable)
			continue
		}
		n, err := u.next(mirror, st)
		if err != nil {
			failed[u.Partition] = err
			continue
		}
		next[u.Partition] = n
		if n != st {
			topics[u.Partition.Topic] = append(topics[u.Partition.Topic], statePartition(u.Partition.Partition, u.TopicID, n))
		}
	}
	var err error
	if len(topics) > 0 {
		err = store.writeRemoteTopics(ctx, node, mirror, topics)
	}
	for k, n := range next {
		if err != nil {
			failed[k] = err
		} else {
			done[k] = n
		}
	}
}

// writeLocal persists a partition's new state (and offsets, when
// they changed) on the local shard, refusing transitions the KIP does not
// allow: NOT_COORDINATOR if this broker does not lead it.
func (store *Store) writeLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, update func(st *mirrorstate.PartitionState) error) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := store.do(ctx, Key(k.Mirror, id, k.Partition), func(sh *coord.Shard) error {
		s := sh.State().(*mirrorstate.Shard)
		cur := mirrorstate.NewPartitionState()
		if st := s.Parts[k]; st != nil {
			cur = *st
		}
		next := cur
		next.TopicID = id
		if err := update(&next); err != nil {
			return err
		}
		if !cur.State.CanMove(next.State) {
			return fmt.Errorf("mirror %s topic %s partition %d: %s cannot move to %s", k.Mirror, k.Topic, k.Partition, cur.State, next.State)
		}
		if err := sh.Write(ctx, mirrorstate.StateRecords(k, cur, next)...); err != nil {
			return err
		}
		s.Set(k, next)
		out = next
		return nil
	})
	return out, err
}

// Mark is a local shard as last read: a shard that is still the
// same object at the same version has no news.
type Mark struct {
	shard   *mirrorstate.Shard
	version uint64
}
