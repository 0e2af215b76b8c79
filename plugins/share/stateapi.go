package share

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The share-group state APIs (InitializeShareGroupState,
// ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState,
// ReadShareGroupStateSummary): how share-partition leaders and group
// coordinators on other brokers reach this broker's share coordinator.
// They are inter-broker APIs: CLUSTER_ACTION on the cluster, as in Kafka.

// onStates runs fn for each partition of a state request, with its
// error, once the request is authorized.
func (p *Plugin) onStates(ctx context.Context, rc *plugin.RequestContext, group string, id [16]byte, partition int32, fn func(k stateKey, s *states) error) error {
	if !rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, plugin.ClusterResource) {
		return kerr.ClusterAuthorizationFailed
	}
	k := stateKey{group, uuid.UUID(id), partition}
	return p.onState(ctx, k, func(s *states) error { return fn(k, s) })
}

func (p *Plugin) handleInitializeState(ctx context.Context, rc *plugin.RequestContext, req *kmsg.InitializeShareGroupStateRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.InitializeShareGroupStateResponse)
	for _, t := range req.Topics {
		rt := kmsg.InitializeShareGroupStateResponseTopic{TopicID: t.TopicID}
		for _, pt := range t.Partitions {
			err := p.onStates(ctx, rc, req.GroupID, t.TopicID, pt.Partition, func(k stateKey, s *states) error {
				return s.initialize(k, pt.StateEpoch, pt.StartOffset)
			})
			if err == nil {
				p.evict(stateKey{req.GroupID, uuid.UUID(t.TopicID), pt.Partition})
			}
			rt.Partitions = append(rt.Partitions, kmsg.InitializeShareGroupStateResponseTopicPartition{Partition: pt.Partition,
				ErrorCode: plugin.ErrorCode(err), ErrorMessage: plugin.ErrorMessage(err)})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (p *Plugin) handleReadState(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ReadShareGroupStateRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ReadShareGroupStateResponse)
	for _, t := range req.Topics {
		rt := kmsg.ReadShareGroupStateResponseTopic{TopicID: t.TopicID}
		for _, pt := range t.Partitions {
			rp := kmsg.ReadShareGroupStateResponseTopicPartition{Partition: pt.Partition, StartOffset: -1}
			err := p.onStates(ctx, rc, req.GroupID, t.TopicID, pt.Partition, func(k stateKey, s *states) error {
				if st := s.m[k]; st != nil {
					rp.StateEpoch, rp.StartOffset = st.stateEpoch, st.start
					for _, b := range st.batches {
						rp.StateBatches = append(rp.StateBatches, kmsg.ReadShareGroupStateResponseTopicPartitionStateBatch{
							FirstOffset: b.first, LastOffset: b.last, DeliveryState: b.state, DeliveryCount: b.count})
					}
				}
				return nil
			})
			rp.ErrorCode, rp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (p *Plugin) handleWriteState(ctx context.Context, rc *plugin.RequestContext, req *kmsg.WriteShareGroupStateRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.WriteShareGroupStateResponse)
	for _, t := range req.Topics {
		rt := kmsg.WriteShareGroupStateResponseTopic{TopicID: t.TopicID}
		for _, pt := range t.Partitions {
			var batches []stateBatch
			for _, b := range pt.StateBatches {
				if b.LastOffset >= b.FirstOffset {
					batches = append(batches, stateBatch{b.FirstOffset, b.LastOffset, b.DeliveryState, b.DeliveryCount})
				}
			}
			err := p.onStates(ctx, rc, req.GroupID, t.TopicID, pt.Partition, func(k stateKey, s *states) error {
				return s.write(k, pt.StateEpoch, pt.LeaderEpoch, pt.StartOffset, batches)
			})
			rt.Partitions = append(rt.Partitions, kmsg.WriteShareGroupStateResponseTopicPartition{Partition: pt.Partition,
				ErrorCode: plugin.ErrorCode(err), ErrorMessage: plugin.ErrorMessage(err)})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (p *Plugin) handleDeleteState(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DeleteShareGroupStateRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupStateResponse)
	for _, t := range req.Topics {
		rt := kmsg.DeleteShareGroupStateResponseTopic{TopicID: t.TopicID}
		for _, pt := range t.Partitions {
			err := p.onStates(ctx, rc, req.GroupID, t.TopicID, pt.Partition, func(k stateKey, s *states) error { return s.remove(k) })
			if err == nil {
				p.evict(stateKey{req.GroupID, uuid.UUID(t.TopicID), pt.Partition})
			}
			rt.Partitions = append(rt.Partitions, kmsg.DeleteShareGroupStateResponseTopicPartition{Partition: pt.Partition,
				ErrorCode: plugin.ErrorCode(err), ErrorMessage: plugin.ErrorMessage(err)})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (p *Plugin) handleReadStateSummary(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ReadShareGroupStateSummaryRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ReadShareGroupStateSummaryResponse)
	for _, t := range req.Topics {
		rt := kmsg.ReadShareGroupStateSummaryResponseTopic{TopicID: t.TopicID}
		for _, pt := range t.Partitions {
			rp := kmsg.ReadShareGroupStateSummaryResponseTopicPartition{Partition: pt.Partition, StartOffset: -1, LeaderEpoch: -1}
			err := p.onStates(ctx, rc, req.GroupID, t.TopicID, pt.Partition, func(k stateKey, s *states) error {
				if st := s.m[k]; st != nil {
					rp.StateEpoch, rp.LeaderEpoch, rp.StartOffset = st.stateEpoch, st.leaderEpoch, st.start
					rp.DeliveryCompleteCount = int32(min(st.doneAbove(), 1<<31-1))
				}
				return nil
			})
			rp.ErrorCode, rp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
