package cutover

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// ClampGroups lowers, after a consistent failover of topic t, every
// group's committed offset past a partition's cut to the cut, so that a
// consumer resumes at the cut (the metadata sync left those partitions
// alone while they stopped). Groups are found and changed as an admin
// client does: ListGroups on every broker, then OffsetFetch and
// OffsetCommit (generation -1) on the broker that listed the group, its
// coordinator. A group with active members keeps its offsets (Kafka
// refuses an admin commit then; its members own them), and a broker
// that does not answer keeps its groups': both are logged, not retried,
// so that a failover never waits on a consumer or a dead broker.
func (s Stage) ClampGroups(ctx context.Context, t *metadata.Topic) error {
	cuts := map[int32]int64{}
	for i := range t.Partitions {
		st, err := s.Store.Read(ctx, mirrorstate.PartitionKey{Mirror: s.Mirror, Topic: t.Name, Partition: int32(i)}, t.ID)
		if err != nil {
			return err
		}
		if st.Cut.Set != "" && st.Cut.At >= 0 {
			cuts[int32(i)] = st.Cut.At
		}
	}
	if len(cuts) == 0 {
		return nil
	}
	for node := range s.Target.Image().Brokers {
		resp, err := s.Store.Send(ctx, node, kmsg.NewPtrListGroupsRequest())
		if err == nil {
			err = kerr.ErrorForCode(resp.(*kmsg.ListGroupsResponse).ErrorCode)
		}
		if err != nil {
			s.Log.Warn("consistent failover: groups of a broker not clamped to the cut", "topic", t.Name, "broker", node, "err", err)
			continue
		}
		for _, g := range resp.(*kmsg.ListGroupsResponse).Groups {
			if g.GroupType == "share" {
				continue
			}
			if err := s.clampGroup(ctx, node, g.Group, t.Name, cuts); err != nil {
				s.Log.Warn("consistent failover: group not clamped to the cut", "topic", t.Name, "group", g.Group, "err", err)
			}
		}
	}
	return nil
}

// clampGroup lowers group's offsets of topic past cuts to them, on its
// coordinator node.
func (s Stage) clampGroup(ctx context.Context, node int32, group, topic string, cuts map[int32]int64) error {
	fetch := kmsg.NewPtrOffsetFetchRequest()
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic = topic
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic = topic
	for p := range cuts {
		ft.Partitions = append(ft.Partitions, p)
		gt.Partitions = append(gt.Partitions, p)
	}
	fetch.Group, fetch.Topics = group, []kmsg.OffsetFetchRequestTopic{ft} // before v8
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group, g.Topics = group, []kmsg.OffsetFetchRequestGroupTopic{gt}
	fetch.Groups = []kmsg.OffsetFetchRequestGroup{g} // v8 on
	resp, err := s.Store.Send(ctx, node, fetch)
	if err != nil {
		return err
	}
	fr := resp.(*kmsg.OffsetFetchResponse)
	type committed struct {
		offset   int64
		metadata *string
	}
	have := map[int32]committed{}
	for _, rt := range fr.Topics {
		for _, rp := range rt.Partitions {
			if rt.Topic == topic && rp.ErrorCode == 0 {
				have[rp.Partition] = committed{rp.Offset, rp.Metadata}
			}
		}
	}
	for _, rg := range fr.Groups {
		if err := kerr.ErrorForCode(rg.ErrorCode); err != nil {
			return err
		}
		for _, rt := range rg.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == topic && rp.ErrorCode == 0 {
					have[rp.Partition] = committed{rp.Offset, rp.Metadata}
				}
			}
		}
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = group, -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = topic
	for p, c := range have {
		if cut := cuts[p]; c.offset > cut {
			cp := kmsg.NewOffsetCommitRequestTopicPartition()
			cp.Partition, cp.Offset, cp.LeaderEpoch, cp.Metadata = p, cut, -1, c.metadata
			ct.Partitions = append(ct.Partitions, cp)
		}
	}
	if len(ct.Partitions) == 0 {
		return nil
	}
	commit.Topics = append(commit.Topics, ct)
	resp, err = s.Store.Send(ctx, node, commit)
	if err != nil {
		return err
	}
	for _, rt := range resp.(*kmsg.OffsetCommitResponse).Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("committing %s-%d at the cut: %w", topic, rp.Partition, err)
			}
		}
	}
	s.Log.Info("consistent failover: group offsets clamped to the cut", "group", group, "topic", topic, "partitions", len(ct.Partitions))
	return nil
}
