package mirror

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/wire"
	"github.com/tandem-kafka/tandem/uuid"
)

// A mirror partition's state machine and its __mirror_state records are
// mirrorstate's; here is the plugin's side: which coordinator shard a
// partition's state lives on, and reading and writing it there.

// coordKey is the string a mirror partition is routed by: its mirror,
// topic ID and partition, so that a mirror's partitions spread over the
// coordinators (FindCoordinator type MIRROR takes the same string).
func coordKey(mirror string, id uuid.UUID, partition int32) string {
	return mirror + ":" + base64.RawURLEncoding.EncodeToString(id[:]) + ":" + strconv.Itoa(int(partition))
}

// readStateLocal returns a mirror partition's state from the local
// shard: NOT_COORDINATOR if this broker does not lead it.
func (p *Plugin) readStateLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := p.Do(ctx, coordKey(k.Mirror, id, k.Partition), func(sh *coord.Shard) error {
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

// readShardLocal reads, from __mirror_state shard on this broker, the
// states of keys (with their topic IDs in ids) into out, unless the shard
// is the same one at the same version as in seen; seen is updated. An
// error (NOT_COORDINATOR: another broker coordinates the shard) reads
// nothing.
func (p *Plugin) readShardLocal(ctx context.Context, mirror string, shard int32, keys []topicPartition, ids map[topicPartition]uuid.UUID, seen map[int32]shardMark, out map[topicPartition]mirrorstate.PartitionState) error {
	leader, _ := p.stateLeader(coordKey(mirror, ids[keys[0]], keys[0].partition))
	if leader >= 0 && leader != p.Host().NodeID() {
		return fmt.Errorf("__mirror_state partition %d is on broker %d: %w", shard, leader, kerr.NotCoordinator)
	}
	return p.Runtime().Do(ctx, shard, func(sh *coord.Shard) error {
		s := sh.State().(*mirrorstate.Shard)
		if m, ok := seen[shard]; ok && m.shard == s && m.version == s.Version {
			return nil
		}
		for _, k := range keys {
			st := mirrorstate.NewPartitionState()
			st.TopicID = ids[k]
			if cur := s.Parts[mirrorstate.PartitionKey{Mirror: mirror, Topic: k.topic, Partition: k.partition}]; cur != nil {
				st = *cur
			}
			out[k] = st
		}
		seen[shard] = shardMark{shard: s, version: s.Version}
		return nil
	})
}

// completeSave is a CompleteAt to persist (saveCompletes).
type completeSave struct {
	k  topicPartition
	id uuid.UUID
	at int64
}

// saveCompletesLocal persists the CompleteAt of saves on __mirror_state
// shard, on this broker, in one write; NOT_COORDINATOR when another
// broker coordinates it.
func (p *Plugin) saveCompletesLocal(ctx context.Context, mirror string, shard int32, saves []completeSave) error {
	c := saves[0]
	if leader, _ := p.stateLeader(coordKey(mirror, c.id, c.k.partition)); leader >= 0 && leader != p.Host().NodeID() {
		return fmt.Errorf("__mirror_state partition %d is on broker %d: %w", shard, leader, kerr.NotCoordinator)
	}
	return p.Runtime().Do(ctx, shard, func(sh *coord.Shard) error {
		s := sh.State().(*mirrorstate.Shard)
		var recs []coord.Record
		type set struct {
			k  mirrorstate.PartitionKey
			st mirrorstate.PartitionState
		}
		var sets []set
		for _, c := range saves {
			k := mirrorstate.PartitionKey{Mirror: mirror, Topic: c.k.topic, Partition: c.k.partition}
			cur := s.Parts[k]
			if cur == nil || cur.CompleteAt >= c.at {
				continue // a partition with no state yet has nothing to complete
			}
			next := *cur
			next.CompleteAt = c.at
			recs = append(recs, mirrorstate.StateRecords(k, *cur, next)...)
			sets = append(sets, set{k, next})
		}
		if len(recs) == 0 {
			return nil
		}
		if err := sh.Write(ctx, recs...); err != nil {
			return err
		}
		for _, x := range sets {
			s.Set(x.k, x.st)
		}
		return nil
	})
}

// saveCompletesRemote persists the CompleteAt of saves on the brokers
// that coordinate them: one read and one write each.
func (p *Plugin) saveCompletesRemote(ctx context.Context, mirror string, saves map[topicPartition]completeSave) error {
	ids := make(map[topicPartition]uuid.UUID, len(saves))
	for k, c := range saves {
		ids[k] = c.id
	}
	states := p.readStatesBatch(ctx, mirror, ids)
	byNode := map[int32]map[string][]wire.StatePartition{}
	for k, c := range saves {
		st, ok := states[k]
		leader, _ := p.stateLeader(coordKey(mirror, c.id, k.partition))
		if !ok || leader < 0 || st.CompleteAt >= c.at || st.State == mirrorstate.Unknown {
			continue
		}
		st.CompleteAt = c.at
		if byNode[leader] == nil {
			byNode[leader] = map[string][]wire.StatePartition{}
		}
		byNode[leader][k.topic] = append(byNode[leader][k.topic], statePartition(k.partition, c.id, st))
	}
	var errs []error
	for node, topics := range byNode {
		errs = append(errs, p.writeRemoteTopics(ctx, node, mirror, topics))
	}
	return errors.Join(errs...)
}

// writeStateLocal persists a partition's new state (and offsets, when
// they changed) on the local shard, refusing transitions the KIP does not
// allow: NOT_COORDINATOR if this broker does not lead it.
func (p *Plugin) writeStateLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, update func(st *mirrorstate.PartitionState) error) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := p.Do(ctx, coordKey(k.Mirror, id, k.Partition), func(sh *coord.Shard) error {
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
