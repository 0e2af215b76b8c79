package admin

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// HandleInitProducerID gives idempotent producers a new producer id with
// epoch 0. A producer that asks with its current id and epoch (KIP-360,
// v3+) gets a new id too, as Kafka does without a transactional id.
// A transactional id goes to the transaction coordinator plugin.
func (a *Admin) HandleInitProducerID(ctx context.Context, rc *plugin.RequestContext, req *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	switch {
	case req.TransactionalID != nil && !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, *req.TransactionalID):
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil
	case req.TransactionalID == nil && !rc.Allowed(kmsg.ACLOperationIdempotentWrite, kmsg.ACLResourceTypeCluster, clusterName) &&
		!rc.AllowedAny(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic):
		// KIP-679: WRITE on any topic is enough for idempotence.
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil
	}
	if req.TransactionalID != nil {
		// Transactional producers belong to the transaction coordinator;
		// without one, a transactional id is INVALID_REQUEST.
		if tc, _ := plugin.Find[plugin.TxnCoordinator](a.Plugins); tc != nil {
			return tc.InitTransactionalProducerID(ctx, rc, req), nil
		}
		a.Log.Warn("InitProducerId with a transactional id but no transaction coordinator plugin",
			"transactional_id", *req.TransactionalID, "client_id", rc.ClientID)
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	id, err := a.pids.Next(ctx, a.Meta)
	if err != nil {
		a.Log.Warn("InitProducerId", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp, nil
}

// HandleDescribeProducers lists the active idempotent producers of
// partitions this broker leads.
func (a *Admin) HandleDescribeProducers(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DescribeProducersRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	img := a.Image()
	for _, rt := range req.Topics {
		st := kmsg.NewDescribeProducersResponseTopic()
		st.Topic = rt.Topic
		t := img.Topics[rt.Topic]
		for _, p := range rt.Partitions {
			sp := kmsg.NewDescribeProducersResponseTopicPartition()
			sp.Partition = p
			ep, _, kerrErr := a.LedPartition(t, p)
			if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic) {
				kerrErr = kerr.TopicAuthorizationFailed
			}
			if kerrErr != nil {
				sp.ErrorCode = kerrErr.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			for _, ps := range ep.Producers() {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch = ps.ProducerID, int32(ps.ProducerEpoch)
				ap.LastSequence, ap.LastTimestamp = ps.LastSequence, ps.LastTimestamp
				ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = ps.CoordinatorEpoch, ps.CurrentTxnStartOffset
				sp.ActiveProducers = append(sp.ActiveProducers, ap)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
