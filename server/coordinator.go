package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/admin"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// coordinatorTopicWait bounds how long FindCoordinator waits for an
// internal topic it just created to get a leader, before answering
// COORDINATOR_NOT_AVAILABLE (clients retry that).
const coordinatorTopicWait = 5 * time.Second

// coordinators serves FindCoordinator: what it takes of the broker.
type coordinators struct {
	plugins     []any
	log         *slog.Logger
	applied     *appliedState
	ensureTopic func(context.Context, plugin.InternalTopic) (*metadata.Topic, error) // internalTopics.ensure
}

// handleFindCoordinator answers, per key, with the broker leading the
// internal-topic partition a CoordinatorLocator plugin names.
func (fc *coordinators) handleFindCoordinator(ctx context.Context, rc *RequestContext, req *kmsg.FindCoordinatorRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Port = key, -1, -1
		node, err := fc.findCoordinator(ctx, rc, req.CoordinatorType, key)
		if err != nil {
			c.ErrorCode, c.ErrorMessage = plugin.ErrorCode(err), cfgStr(err.Error())
			if c.ErrorCode != kerr.CoordinatorNotAvailable.Code {
				fc.log.Debug("find coordinator", "key_type", req.CoordinatorType, "key", key, "err", err)
			}
		} else {
			c.NodeID = node.ID
			c.Host, c.Port = admin.EndpointFor(node, rc.Listener) // the listener the client is on
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if req.Version < 4 && len(resp.Coordinators) == 1 {
		c := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.NodeID, c.Host, c.Port
		if req.Version >= 1 {
			resp.ErrorMessage = c.ErrorMessage
		}
	}
	return resp, nil
}

func (fc *coordinators) findCoordinator(ctx context.Context, rc *RequestContext, keyType int8, key string) (metadata.Broker, error) {
	// Kafka checks DESCRIBE on the group or transactional id.
	switch keyType {
	case plugin.CoordinatorGroup:
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, key) {
			return metadata.Broker{}, kerr.GroupAuthorizationFailed
		}
	case plugin.CoordinatorTransaction:
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, key) {
			return metadata.Broker{}, kerr.TransactionalIDAuthorizationFailed
		}
	}
	var topic plugin.InternalTopic
	var partition int32
	var locator plugin.CoordinatorLocator
	for _, l := range plugin.All[plugin.CoordinatorLocator](fc.plugins) {
		var found bool
		if topic, partition, found = l.LocateCoordinator(keyType, key); found {
			locator = l
			break
		}
	}
	if locator == nil {
		return metadata.Broker{}, fmt.Errorf("no coordinator for key type %d: %w", keyType, kerr.InvalidRequest)
	}
	if keyType != plugin.CoordinatorGroup && keyType != plugin.CoordinatorTransaction {
		if a, ok := locator.(plugin.CoordinatorAuthorizer); ok {
			if err := a.AuthorizeCoordinator(rc, keyType, key); err != nil {
				return metadata.Broker{}, err
			}
		} else if !rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, clusterName) {
			return metadata.Broker{}, kerr.ClusterAuthorizationFailed
		}
	}
	ctx, cancel := context.WithTimeout(ctx, coordinatorTopicWait)
	defer cancel()
	t, err := fc.ensureTopic(ctx, topic)
	if err != nil {
		if !errors.Is(err, kerr.CoordinatorNotAvailable) {
			fc.log.Warn("creating internal topic", "topic", topic.Name, "err", err)
		}
		return metadata.Broker{}, fmt.Errorf("%s: %v: %w", topic.Name, err, kerr.CoordinatorNotAvailable)
	}
	if int(partition) >= len(t.Partitions) {
		return metadata.Broker{}, fmt.Errorf("%s has no partition %d: %w", topic.Name, partition, kerr.CoordinatorNotAvailable)
	}
	node, ok := fc.applied.get().Brokers[t.Partitions[partition].Leader]
	if !ok {
		return metadata.Broker{}, fmt.Errorf("%s-%d has no live leader: %w", topic.Name, partition, kerr.CoordinatorNotAvailable)
	}
	return node, nil
}
