package share

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The admin APIs on share groups' progress (DescribeShareGroupOffsets,
// AlterShareGroupOffsets, DeleteShareGroupOffsets), as Kafka's group
// coordinator serves them: the group's initialized partitions come from
// the consumer-groups plugin, their start offsets from the share
// coordinator. Altering and deleting need an empty group.

// sharePart looks a topic partition up in the image.
func sharePart(img *metadata.Image, topic string, partition int32) (plugin.SharePartition, error) {
	t := img.Topics[topic]
	if t == nil || partition < 0 || int(partition) >= len(t.Partitions) {
		return plugin.SharePartition{}, kerr.UnknownTopicOrPartition
	}
	return plugin.SharePartition{TopicID: t.ID, Topic: topic, Partition: partition}, nil
}

// lag is how many records of a partition the group has not finished:
// from the start offset to the high watermark, less those done above the
// start; -1 when unknown here.
func (p *Plugin) lag(sp plugin.SharePartition, st plugin.ShareState) int64 {
	if st.StartOffset < 0 {
		return -1
	}
	ep := p.Host().Partition(engine.TopicID(sp.TopicID), sp.Partition)
	if ep == nil {
		return -1
	}
	return max(ep.Offsets().HighWatermark-st.StartOffset-st.DoneAbove, 0)
}

func (p *Plugin) handleDescribeOffsets(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DescribeShareGroupOffsetsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	img := p.Image()
	for _, rg := range req.Groups {
		out := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		out.GroupID = rg.GroupID
		err := func() error {
			if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, rg.GroupID) {
				return kerr.GroupAuthorizationFailed
			}
			_, parts, err := p.groups.ShareGroupPartitions(ctx, rg.GroupID)
			if err != nil {
				return err
			}
			type wanted struct {
				sp  plugin.SharePartition
				err error
			}
			var want []wanted
			if rg.Topics == nil { // every partition the group has state for
				for _, sp := range parts {
					if rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, sp.Topic) {
						want = append(want, wanted{sp: sp})
					}
				}
			}
			for _, t := range rg.Topics {
				for _, part := range t.Partitions {
					sp, err := sharePart(img, t.Topic, part)
					sp.Topic, sp.Partition = t.Topic, part
					if err == nil && !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Topic) {
						err = kerr.TopicAuthorizationFailed
					}
					want = append(want, wanted{sp, err})
				}
			}
			var read []plugin.SharePartition
			for _, w := range want {
				if w.err == nil {
					read = append(read, w.sp)
				}
			}
			st, err := p.ReadShareStates(ctx, rg.GroupID, read)
			if err != nil {
				return err
			}
			for _, w := range want {
				rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
				rp.Partition, rp.StartOffset, rp.LeaderEpoch, rp.Lag = w.sp.Partition, -1, -1, -1
				if w.err != nil {
					rp.ErrorCode, rp.ErrorMessage = plugin.ErrorCode(w.err), plugin.ErrorMessage(w.err)
				} else {
					s := st[w.sp]
					rp.StartOffset, rp.LeaderEpoch, rp.Lag = s.StartOffset, s.LeaderEpoch, p.lag(w.sp, s)
				}
				if n := len(out.Topics); n > 0 && out.Topics[n-1].Topic == w.sp.Topic {
					out.Topics[n-1].Partitions = append(out.Topics[n-1].Partitions, rp)
				} else {
					out.Topics = append(out.Topics, kmsg.DescribeShareGroupOffsetsResponseGroupTopic{Topic: w.sp.Topic, TopicID: w.sp.TopicID,
						Partitions: []kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{rp}})
				}
			}
			return nil
		}()
		out.ErrorCode, out.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}

func (p *Plugin) handleAlterOffsets(ctx context.Context, rc *plugin.RequestContext, req *kmsg.AlterShareGroupOffsetsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.GroupID) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	img := p.Image()
	starts := map[plugin.SharePartition]int64{}
	errs := map[string]map[int32]error{}
	for _, t := range req.Topics {
		errs[t.Topic] = map[int32]error{}
		for _, pt := range t.Partitions {
			sp, err := sharePart(img, t.Topic, pt.Partition)
			switch {
			case err != nil:
			case !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic):
				err = kerr.TopicAuthorizationFailed
			case pt.StartOffset < 0:
				err = fmt.Errorf("start offset %d: %w", pt.StartOffset, kerr.InvalidRequest)
			default:
				starts[sp] = pt.StartOffset
			}
			errs[t.Topic][pt.Partition] = err
		}
	}
	err := p.AlterShareStarts(ctx, req.GroupID, starts)
	resp.ErrorCode, resp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
	for _, t := range req.Topics {
		rt := kmsg.AlterShareGroupOffsetsResponseTopic{Topic: t.Topic}
		if tt := img.Topics[t.Topic]; tt != nil {
			rt.TopicID = tt.ID
		}
		for _, pt := range t.Partitions {
			e := errs[t.Topic][pt.Partition]
			if e == nil {
				e = err
			}
			rt.Partitions = append(rt.Partitions, kmsg.AlterShareGroupOffsetsResponseTopicPartition{Partition: pt.Partition,
				ErrorCode: plugin.ErrorCode(e), ErrorMessage: plugin.ErrorMessage(e)})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// AlterShareStarts sets start offsets of an empty share group's
// partitions (creating the group if needed): the group records them as
// initialized, then the share coordinator starts their state afresh.
func (p *Plugin) AlterShareStarts(ctx context.Context, group string, starts map[plugin.SharePartition]int64) error {
	if len(starts) == 0 {
		return nil
	}
	add := slices.Collect(maps.Keys(starts))
	if err := p.groups.SetShareGroupPartitions(ctx, group, add, nil); err != nil {
		return err
	}
	return p.InitializeShareState(ctx, group, starts)
}

func (p *Plugin) handleDeleteOffsets(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DeleteShareGroupOffsetsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	fail := func(err error) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
		return resp
	}
	if !rc.Allowed(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeGroup, req.GroupID) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	state, parts, err := p.groups.ShareGroupPartitions(ctx, req.GroupID)
	switch {
	case err != nil:
		return fail(err)
	case state == "Dead":
		return fail(fmt.Errorf("share group %s does not exist: %w", req.GroupID, kerr.GroupIDNotFound))
	case state != "Empty":
		return fail(fmt.Errorf("share group %s has members: %w", req.GroupID, kerr.NonEmptyGroup))
	}
	img := p.Image()
	var del []plugin.SharePartition
	for _, t := range req.Topics {
		rt := kmsg.DeleteShareGroupOffsetsResponseTopic{Topic: t.Topic}
		var err error
		switch tt := img.Topics[t.Topic]; {
		case tt == nil:
			err = kerr.UnknownTopicOrPartition
		case !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic):
			rt.TopicID, err = tt.ID, kerr.TopicAuthorizationFailed
		default:
			rt.TopicID = tt.ID
			for _, sp := range parts {
				if sp.TopicID == tt.ID {
					del = append(del, sp)
				}
			}
		}
		rt.ErrorCode, rt.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
		resp.Topics = append(resp.Topics, rt)
	}
	if err := p.DeleteShareStates(ctx, req.GroupID, del); err != nil {
		return fail(err)
	}
	if err := p.groups.SetShareGroupPartitions(ctx, req.GroupID, nil, del); err != nil {
		return fail(err)
	}
	return resp
}

// --- plugin.ShareGroupOffsets ---

var _ plugin.ShareGroupOffsets = (*Plugin)(nil)

// ShareGroupStartOffsets implements plugin.ShareGroupOffsets.
func (p *Plugin) ShareGroupStartOffsets(ctx context.Context, group string) (map[plugin.TopicPartition]plugin.CommittedOffset, string, error) {
	state, parts, err := p.groups.ShareGroupPartitions(ctx, group)
	if err != nil {
		return nil, state, err
	}
	st, err := p.ReadShareStates(ctx, group, parts)
	if err != nil {
		return nil, state, err
	}
	out := map[plugin.TopicPartition]plugin.CommittedOffset{}
	for sp, s := range st {
		if s.StartOffset < 0 {
			continue
		}
		co := plugin.CommittedOffset{Offset: s.StartOffset, LeaderEpoch: -1}
		if ep := p.Host().Partition(engine.TopicID(sp.TopicID), sp.Partition); ep != nil && s.StartOffset > ep.Offsets().LogStart {
			co.LeaderEpoch = ep.EpochAt(s.StartOffset - 1)
		}
		out[plugin.TopicPartition{Topic: sp.Topic, Partition: sp.Partition}] = co
	}
	return out, state, nil
}

// AlterShareGroupStartOffsets implements plugin.ShareGroupOffsets.
func (p *Plugin) AlterShareGroupStartOffsets(ctx context.Context, group string, offsets map[plugin.TopicPartition]int64) error {
	img := p.Image()
	starts := map[plugin.SharePartition]int64{}
	for tp, o := range offsets {
		sp, err := sharePart(img, tp.Topic, tp.Partition)
		if err != nil {
			return fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, err)
		}
		starts[sp] = o
	}
	return p.AlterShareStarts(ctx, group, starts)
}
