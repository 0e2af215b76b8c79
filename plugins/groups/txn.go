package groups

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Transactional offset commits (TxnOffsetCommit) are written to
// __consumer_offsets in a transactional batch of the producer, as Kafka
// does, and stay pending until the transaction coordinator writes the
// producer's COMMIT or ABORT marker to the same partition: a COMMIT makes
// them the group's committed offsets, an ABORT drops them. Meanwhile
// OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for
// them (KIP-447).

var (
	_ coord.TxnStateMachine  = (*shardState)(nil)
	_ plugin.TxnMarkerWriter = (*Plugin)(nil)
)

// addPending records offsets pending in producer pid's transaction.
func (s *shardState) addPending(pid int64, group string, offsets map[tp]offset) {
	if s.pending == nil {
		s.pending = map[int64]map[string]map[tp]offset{}
	}
	byGroup := s.pending[pid]
	if byGroup == nil {
		byGroup = map[string]map[tp]offset{}
		s.pending[pid] = byGroup
	}
	if byGroup[group] == nil {
		byGroup[group] = map[tp]offset{}
	}
	for t, o := range offsets {
		byGroup[group][t] = o
	}
}

// completeTxn applies (commit) or drops producer pid's pending offsets.
func (s *shardState) completeTxn(pid int64, commit bool) {
	byGroup := s.pending[pid]
	delete(s.pending, pid)
	if !commit {
		return
	}
	for name, offsets := range byGroup {
		g := s.groups[name]
		if g == nil {
			g = newGroup(name, s.nowMs())
			s.groups[name] = g
		}
		for t, o := range offsets {
			g.offsets[t] = o
		}
	}
}

// isPending reports whether a transaction has an offset of the group's
// partition pending.
func (s *shardState) isPending(group string, t tp) bool {
	for _, byGroup := range s.pending {
		if _, ok := byGroup[group][t]; ok {
			return true
		}
	}
	return false
}

// ReplayTxn implements coord.TxnStateMachine.
func (s *shardState) ReplayTxn(pid int64, key, value []byte) error {
	d, err := decodeRecord(key, value)
	if err != nil || !d.isTP || d.offset == nil {
		return nil // only offset commits are transactional
	}
	s.addPending(pid, d.group, map[tp]offset{d.tp: {offset: d.offset.Offset, epoch: d.offset.LeaderEpoch,
		metadata: d.offset.Metadata, commitMs: d.offset.CommitTimestamp}})
	return nil
}

// ReplayMarker implements coord.TxnStateMachine.
func (s *shardState) ReplayMarker(pid int64, commit bool) error {
	s.completeTxn(pid, commit)
	return nil
}

// WriteTxnMarker implements plugin.TxnMarkerWriter: the marker is written
// by the shard, which then applies or drops the pending offsets.
func (p *Plugin) WriteTxnMarker(ctx context.Context, t plugin.TopicPartition, m engine.Marker) (bool, error) {
	if t.Topic != Topic {
		return false, nil
	}
	return true, p.Runtime().Do(ctx, t.Partition, func(sh *coord.Shard) error {
		if err := sh.WriteMarker(ctx, m); err != nil {
			return err
		}
		sh.State().(*shardState).completeTxn(m.ProducerID, m.Commit)
		return nil
	})
}

// OpenTxnPartitions implements plugin.TxnMarkerWriter: the partitions of
// __consumer_offsets led here whose log has a transaction of producer pid
// open.
func (p *Plugin) OpenTxnPartitions(pid int64) []plugin.TopicPartition {
	host := p.Host()
	if host == nil {
		return nil
	}
	var out []plugin.TopicPartition
	for _, sh := range p.Runtime().Shards() {
		if ep := host.Partition(sh.TopicID(), sh.Partition()); ep != nil {
			if _, open := ep.OpenTxn(pid); open {
				out = append(out, plugin.TopicPartition{Topic: Topic, Partition: sh.Partition()})
			}
		}
	}
	return out
}

func (p *Plugin) handleTxnOffsetCommit(ctx context.Context, rc *plugin.RequestContext, req *kmsg.TxnOffsetCommitRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	codes := map[tp]int16{}
	commits := map[tp]offset{}
	var denied *kerr.Error
	switch {
	case !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, req.TransactionalID):
		denied = kerr.TransactionalIDAuthorizationFailed
	case !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group):
		denied = kerr.GroupAuthorizationFailed
	}
	nowMs := p.now().UnixMilli()
	for _, t := range req.Topics {
		topicAllowed := rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic)
		for _, pt := range t.Partitions {
			k := tp{t.Topic, pt.Partition}
			switch {
			case denied != nil:
				codes[k] = denied.Code
			case !topicAllowed:
				codes[k] = kerr.TopicAuthorizationFailed.Code
			default:
				epoch := int32(-1)
				if req.Version >= 2 {
					epoch = pt.LeaderEpoch
				}
				p.checkCommit(k, pt.Offset, epoch, pt.Metadata, nowMs, codes, commits)
			}
		}
	}
	if len(commits) > 0 {
		gen := int32(-1)
		if req.Version >= 3 {
			gen = req.Generation
		}
		// transaction.version 2 (KIP-890 part 2): v5+ clients skip
		// AddOffsetsToTxn, so the group's offsets partition joins the
		// transaction here, before anything is written to it.
		err := p.addTxnPartition(ctx, req)
		if err == nil {
			err = p.do(ctx, req.Group, func(s *shardState) error {
				return s.txnCommit(req, gen, commits)
			})
		}
		c := plugin.ErrorCode(err)
		for k := range commits {
			codes[k] = c
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, pt := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = pt.Partition, codes[tp{t.Topic, pt.Partition}]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// txnCommit writes offsets into the producer's transaction. A member of
// a live group must be current (v3+ requests carry the consumer's group
// metadata, KIP-447); generation -1 skips the check, as in Kafka.
func (s *shardState) txnCommit(req *kmsg.TxnOffsetCommitRequest, generation int32, offsets map[tp]offset) error {
	if g := s.groups[req.Group]; g != nil && g.kind != kindClassic && generation >= 0 {
		if err := g.checkModernCommit(req.MemberID, generation); err != nil {
			return err
		}
	} else if g != nil && generation >= 0 && len(g.members) > 0 {
		if _, err := s.checkMember(g, req.MemberID, req.InstanceID, generation); err != nil {
			return err
		}
	}
	recs := make([]coord.Record, 0, len(offsets))
	for t, o := range offsets {
		recs = append(recs, coord.Record{Key: offsetKey(req.Group, t), Value: offsetValue(o)})
	}
	if err := s.sh.WriteTxn(s.sh.Context(), req.ProducerID, req.ProducerEpoch, recs...); err != nil {
		return fmt.Errorf("group %s: transactional offset commit: %w", req.Group, err)
	}
	s.addPending(req.ProducerID, req.Group, offsets)
	return nil
}

// addTxnPartition adds the group's __consumer_offsets partition to the
// producer's transaction for TxnOffsetCommit v5+, when the transaction
// coordinator serves transaction.version 2.
func (p *Plugin) addTxnPartition(ctx context.Context, req *kmsg.TxnOffsetCommitRequest) error {
	if req.Version < 5 {
		return nil
	}
	host := p.Host()
	if host == nil {
		return kerr.CoordinatorNotAvailable
	}
	if adder, ok := plugin.Find[plugin.TxnPartitionAdder](host.Plugins()); ok {
		return adder.AddTxnPartition(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, p.OffsetsPartition(req.Group))
	}
	return nil
}
