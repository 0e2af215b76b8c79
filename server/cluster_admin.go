package server

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta"
)

// handleElectLeaders runs Kafka's ElectLeaders through the controller:
// preferred (v0, or ElectionType 0) moves leadership to each partition's
// first replica, unclean (1) gives a leaderless partition a live replica
// even from outside the ISR. No topics means every partition; then, as in
// Kafka, partitions that needed no election are left out of the answer.
// It needs ALTER on the cluster.
func (b *Broker) handleElectLeaders(ctx context.Context, rc *RequestContext, req *kmsg.ElectLeadersRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	fail := func(err *kerr.Error) (kmsg.Response, error) {
		resp.ErrorCode = err.Code
		for _, t := range req.Topics {
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewElectLeadersResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, err.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	if !rc.Allowed(kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, clusterName) {
		return fail(kerr.ClusterAuthorizationFailed)
	}
	unclean := req.Version >= 1 && req.ElectionType == 1
	if req.Version >= 1 && req.ElectionType != 0 && req.ElectionType != 1 {
		return fail(kerr.InvalidRequest)
	}
	var parts []raftmeta.TopicPartition // nil: every partition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, raftmeta.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	all := req.Topics == nil
	if !all && parts == nil {
		return resp, nil
	}
	res, err := b.meta.ElectLeaders(ctx, unclean, parts)
	if err != nil {
		var ke *kerr.Error
		if !errors.As(err, &ke) {
			ke = kerr.UnknownServerError
		}
		return fail(ke)
	}
	byTopic := map[string]int{}
	elected := false
	for _, r := range res {
		if all && errors.Is(r.Err, kerr.ElectionNotNeeded) {
			continue
		}
		elected = elected || r.Err == nil
		i, ok := byTopic[r.Topic]
		if !ok {
			i = len(resp.Topics)
			byTopic[r.Topic] = i
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = r.Topic
			resp.Topics = append(resp.Topics, rt)
		}
		rp := kmsg.NewElectLeadersResponseTopicPartition()
		rp.Partition = r.Partition
		rp.ErrorCode, rp.ErrorMessage = adminErrCode(r.Err)
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	if elected {
		if err := b.waitApplied(ctx, b.meta.Image().Index); err != nil {
			b.log.Warn("elect leaders: waiting for the new leaders", "err", err)
		}
	}
	return resp, nil
}
