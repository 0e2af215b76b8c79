package admin

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// HandleElectLeaders runs Kafka's ElectLeaders through the controller:
// preferred (v0, or ElectionType 0) moves leadership to each partition's
// first replica, unclean (1) gives a leaderless partition a live replica
// even from outside the ISR. No topics means every partition; then, as in
// Kafka, partitions that needed no election are left out of the answer.
// It needs ALTER on the cluster.
func (a *Admin) HandleElectLeaders(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ElectLeadersRequest) (kmsg.Response, error) {
	ctx, cancel := requestTimeout(ctx, req.TimeoutMillis)
	defer cancel()
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
	res, err := a.Meta.ElectLeaders(ctx, unclean, parts)
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
		if err := a.WaitApplied(ctx, a.Meta.Image().Index); err != nil {
			a.Log.Warn("elect leaders: waiting for the new leaders", "err", err)
		}
	}
	return resp, nil
}

// HandleAlterPartitionReassignments starts or cancels (no replicas)
// partition reassignments through the controller; it needs ALTER on the
// cluster. Without AllowReplicationFactorChange (v1, KIP-860) a target
// with another number of replicas is refused, as in Kafka.
func (a *Admin) HandleAlterPartitionReassignments(ctx context.Context, rc *plugin.RequestContext, req *kmsg.AlterPartitionAssignmentsRequest) (kmsg.Response, error) {
	ctx, cancel := requestTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	resp.AllowReplicationFactorChange = req.AllowReplicationFactorChange
	type at struct{ t, p int }
	var reqs []raftmeta.ReassignRequest
	var where []at
	img := a.Image()
	allowed := rc.Allowed(kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, clusterName)
	if !allowed {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
	}
	for i, t := range req.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case !allowed:
				rp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
			case p.Replicas != nil && !req.AllowReplicationFactorChange && changesRF(img, t.Topic, p.Partition, len(p.Replicas)):
				rp.ErrorCode = kerr.InvalidReplicationFactor.Code
				rp.ErrorMessage = kmsg.StringPtr("the reassignment changes the replication factor and AllowReplicationFactorChange is false")
			default:
				reqs = append(reqs, raftmeta.ReassignRequest{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas})
				where = append(where, at{i, j})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(reqs) == 0 {
		return resp, nil
	}
	started := false
	for n, err := range a.Meta.AlterPartitionReassignments(ctx, reqs) {
		rp := &resp.Topics[where[n].t].Partitions[where[n].p]
		rp.ErrorCode, rp.ErrorMessage = adminErrCode(err)
		started = started || err == nil
	}
	if started {
		if err := a.WaitApplied(ctx, a.Meta.Image().Index); err != nil {
			a.Log.Warn("reassign partitions: waiting for the new assignment", "err", err)
		}
	}
	return resp, nil
}

// changesRF reports whether n replicas differ in number from the
// partition's replicas before any reassignment in progress. An unknown
// partition does not: the controller answers for it.
func changesRF(img *metadata.Image, topic string, partition int32, n int) bool {
	t := img.Topics[topic]
	if t == nil || partition < 0 || int(partition) >= len(t.Partitions) {
		return false
	}
	p := t.Partitions[partition]
	return n != len(p.Replicas)-len(p.AddingReplicas)
}

// HandleListPartitionReassignments answers the reassignments in progress
// from the applied image: of the partitions named, or of every partition
// when none are. It needs DESCRIBE on the cluster.
func (a *Admin) HandleListPartitionReassignments(_ context.Context, rc *plugin.RequestContext, req *kmsg.ListPartitionReassignmentsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterName) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil
	}
	img := a.Image()
	add := func(name string, t *metadata.Topic, parts []int32) {
		rt := kmsg.NewListPartitionReassignmentsResponseTopic()
		rt.Topic = name
		for _, i := range parts {
			if i < 0 || int(i) >= len(t.Partitions) {
				continue
			}
			p := t.Partitions[i]
			if len(p.AddingReplicas) == 0 && len(p.RemovingReplicas) == 0 {
				continue
			}
			rp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
			rp.Partition, rp.Replicas = i, p.Replicas
			rp.AddingReplicas, rp.RemovingReplicas = p.AddingReplicas, p.RemovingReplicas
			rt.Partitions = append(rt.Partitions, rp)
		}
		if len(rt.Partitions) > 0 {
			resp.Topics = append(resp.Topics, rt)
		}
	}
	if req.Topics == nil {
		for _, name := range slices.Sorted(maps.Keys(img.Topics)) {
			t := img.Topics[name]
			all := make([]int32, len(t.Partitions))
			for i := range all {
				all[i] = int32(i)
			}
			add(name, t, all)
		}
		return resp, nil
	}
	for _, rt := range req.Topics {
		if t := img.Topics[rt.Topic]; t != nil {
			add(rt.Topic, t, rt.Partitions)
		}
	}
	return resp, nil
}
