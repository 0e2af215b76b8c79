package share

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// On a cluster a share-partition's state is kept by the broker leading
// its partition of __share_group_state (the share coordinator), which
// may not be the share-partition's leader nor the group's coordinator.
// Those reach it with the share-group state APIs (stateapi.go), as
// Kafka's persister does; a state kept here is read and written
// directly.

// stateTimeout bounds one state request to another broker.
const stateTimeout = 10 * time.Second

// stateCoordinator is the broker that keeps k's state when it is not
// this one.
func (p *Plugin) stateCoordinator(ctx context.Context, k stateKey) (int32, bool, error) {
	h := p.Host()
	if h == nil {
		return -1, false, kerr.CoordinatorNotAvailable
	}
	t, err := h.EnsureTopic(ctx, p.Topic())
	if err != nil {
		return -1, false, err
	}
	part := p.PartitionFor(k.coordKey())
	if int(part) >= len(t.Partitions) || t.Partitions[part].Leader < 0 {
		return -1, false, fmt.Errorf("%s-%d has no leader: %w", Topic, part, kerr.CoordinatorNotAvailable)
	}
	leader := t.Partitions[part].Leader
	return leader, leader != h.NodeID(), nil
}

// sendState sends a state request to the share coordinator node. A
// broker that cannot be reached is COORDINATOR_NOT_AVAILABLE: the caller
// retries once the image names another.
func (p *Plugin) sendState(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	resp, err := p.Host().Send(ctx, node, req)
	if err != nil {
		return nil, fmt.Errorf("share coordinator %d: %v: %w", node, err, kerr.CoordinatorNotAvailable)
	}
	return resp, nil
}

// partErr is the error a state API answered for one partition.
func partErr(node int32, code int16, msg *string) error {
	err := kerr.ErrorForCode(code)
	if err == nil {
		return nil
	}
	if msg != nil {
		return fmt.Errorf("share coordinator %d: %s: %w", node, *msg, err)
	}
	return fmt.Errorf("share coordinator %d: %w", node, err)
}

// remoteRead reads k's state from node; start -1 if it has none.
func (p *Plugin) remoteRead(ctx context.Context, node int32, k stateKey, leaderEpoch int32) (*shareState, error) {
	req := kmsg.NewPtrReadShareGroupStateRequest()
	req.GroupID = k.group
	req.Topics = []kmsg.ReadShareGroupStateRequestTopic{{TopicID: k.topic,
		Partitions: []kmsg.ReadShareGroupStateRequestTopicPartition{{Partition: k.partition, LeaderEpoch: leaderEpoch}}}}
	kresp, err := p.sendState(ctx, node, req)
	if err != nil {
		return nil, err
	}
	for _, t := range kresp.(*kmsg.ReadShareGroupStateResponse).Topics {
		for _, pt := range t.Partitions {
			if t.TopicID != k.topic || pt.Partition != k.partition {
				continue
			}
			if err := partErr(node, pt.ErrorCode, pt.ErrorMessage); err != nil {
				return nil, err
			}
			st := &shareState{stateEpoch: pt.StateEpoch, leaderEpoch: -1, start: pt.StartOffset}
			for _, b := range pt.StateBatches {
				st.batches = append(st.batches, stateBatch{b.FirstOffset, b.LastOffset, b.DeliveryState, b.DeliveryCount})
			}
			return st, nil
		}
	}
	return nil, fmt.Errorf("share coordinator %d did not answer for %s: %w", node, k.coordKey(), kerr.CoordinatorNotAvailable)
}

// remoteInitialize initializes k's state on node.
func (p *Plugin) remoteInitialize(ctx context.Context, node int32, k stateKey, stateEpoch int32, start int64) error {
	req := kmsg.NewPtrInitializeShareGroupStateRequest()
	req.GroupID = k.group
	req.Topics = []kmsg.InitializeShareGroupStateRequestTopic{{TopicID: k.topic,
		Partitions: []kmsg.InitializeShareGroupStateRequestTopicPartition{{Partition: k.partition, StateEpoch: stateEpoch, StartOffset: start}}}}
	kresp, err := p.sendState(ctx, node, req)
	if err != nil {
		return err
	}
	for _, t := range kresp.(*kmsg.InitializeShareGroupStateResponse).Topics {
		for _, pt := range t.Partitions {
			if t.TopicID == k.topic && pt.Partition == k.partition {
				return partErr(node, pt.ErrorCode, pt.ErrorMessage)
			}
		}
	}
	return fmt.Errorf("share coordinator %d did not answer for %s: %w", node, k.coordKey(), kerr.CoordinatorNotAvailable)
}

// remoteWrite writes a share-partition leader's change of k to node.
func (p *Plugin) remoteWrite(ctx context.Context, node int32, k stateKey, stateEpoch, leaderEpoch int32, start int64, batches []stateBatch) error {
	req := kmsg.NewPtrWriteShareGroupStateRequest()
	req.GroupID = k.group
	pt := kmsg.WriteShareGroupStateRequestTopicPartition{Partition: k.partition, StateEpoch: stateEpoch, LeaderEpoch: leaderEpoch, StartOffset: start}
	for _, b := range batches {
		pt.StateBatches = append(pt.StateBatches, kmsg.WriteShareGroupStateRequestTopicPartitionStateBatch{
			FirstOffset: b.first, LastOffset: b.last, DeliveryState: b.state, DeliveryCount: b.count})
	}
	req.Topics = []kmsg.WriteShareGroupStateRequestTopic{{TopicID: k.topic, Partitions: []kmsg.WriteShareGroupStateRequestTopicPartition{pt}}}
	kresp, err := p.sendState(ctx, node, req)
	if err != nil {
		return err
	}
	for _, t := range kresp.(*kmsg.WriteShareGroupStateResponse).Topics {
		for _, rp := range t.Partitions {
			if t.TopicID == k.topic && rp.Partition == k.partition {
				return partErr(node, rp.ErrorCode, rp.ErrorMessage)
			}
		}
	}
	return fmt.Errorf("share coordinator %d did not answer for %s: %w", node, k.coordKey(), kerr.CoordinatorNotAvailable)
}

// remoteDelete deletes k's state on node.
func (p *Plugin) remoteDelete(ctx context.Context, node int32, k stateKey) error {
	req := kmsg.NewPtrDeleteShareGroupStateRequest()
	req.GroupID = k.group
	req.Topics = []kmsg.DeleteShareGroupStateRequestTopic{{TopicID: k.topic,
		Partitions: []kmsg.DeleteShareGroupStateRequestTopicPartition{{Partition: k.partition}}}}
	kresp, err := p.sendState(ctx, node, req)
	if err != nil {
		return err
	}
	for _, t := range kresp.(*kmsg.DeleteShareGroupStateResponse).Topics {
		for _, pt := range t.Partitions {
			if t.TopicID == k.topic && pt.Partition == k.partition {
				return partErr(node, pt.ErrorCode, pt.ErrorMessage)
			}
		}
	}
	return fmt.Errorf("share coordinator %d did not answer for %s: %w", node, k.coordKey(), kerr.CoordinatorNotAvailable)
}

// remoteSummary reads the summary of k's state from node: state epoch,
// leader epoch, start offset and the count of records done above it.
func (p *Plugin) remoteSummary(ctx context.Context, node int32, k stateKey) (kmsg.ReadShareGroupStateSummaryResponseTopicPartition, error) {
	req := kmsg.NewPtrReadShareGroupStateSummaryRequest()
	req.GroupID = k.group
	req.Topics = []kmsg.ReadShareGroupStateSummaryRequestTopic{{TopicID: k.topic,
		Partitions: []kmsg.ReadShareGroupStateSummaryRequestTopicPartition{{Partition: k.partition, LeaderEpoch: -1}}}}
	kresp, err := p.sendState(ctx, node, req)
	if err != nil {
		return kmsg.ReadShareGroupStateSummaryResponseTopicPartition{}, err
	}
	for _, t := range kresp.(*kmsg.ReadShareGroupStateSummaryResponse).Topics {
		for _, pt := range t.Partitions {
			if t.TopicID == k.topic && pt.Partition == k.partition {
				return pt, partErr(node, pt.ErrorCode, pt.ErrorMessage)
			}
		}
	}
	return kmsg.ReadShareGroupStateSummaryResponseTopicPartition{},
		fmt.Errorf("share coordinator %d did not answer for %s: %w", node, k.coordKey(), kerr.CoordinatorNotAvailable)
}
