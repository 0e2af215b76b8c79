package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta"
)

const apiKeyFindCoordinator = 10

// findCoordinatorVersions: v4+ batches keys (KIP-699), v6 adds share groups'
// key type, which no plugin serves yet (INVALID_REQUEST per key).
var findCoordinatorVersions = kmsg.ApiVersionsResponseApiKey{ApiKey: apiKeyFindCoordinator, MinVersion: 0, MaxVersion: 6}

// coordinatorTopicWait bounds how long FindCoordinator waits for an
// internal topic it just created to get a leader, before answering
// COORDINATOR_NOT_AVAILABLE (clients retry that).
const coordinatorTopicWait = 5 * time.Second

func hasLocator(plugins []any) bool {
	for _, p := range plugins {
		if _, ok := p.(CoordinatorLocator); ok {
			return true
		}
	}
	return false
}

// Plugins implements Host.
func (b *Broker) Plugins() []any { return b.cfg.Plugins }

// handleFindCoordinator answers, per key, with the broker leading the
// internal-topic partition a CoordinatorLocator plugin names.
func (b *Broker) handleFindCoordinator(ctx context.Context, rc *RequestContext, req *kmsg.FindCoordinatorRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Port = key, -1, -1
		node, err := b.findCoordinator(ctx, rc, req.CoordinatorType, key)
		if err != nil {
			var kerrErr *kerr.Error
			if !errors.As(err, &kerrErr) {
				kerrErr = kerr.CoordinatorNotAvailable
			}
			c.ErrorCode, c.ErrorMessage = kerrErr.Code, cfgStr(err.Error())
			if kerrErr != kerr.CoordinatorNotAvailable {
				b.log.Debug("find coordinator", "key_type", req.CoordinatorType, "key", key, "err", err)
			}
		} else {
			c.NodeID = node.ID
			c.Host, c.Port = endpointFor(node, rc.Listener) // the listener the client is on
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

func (b *Broker) findCoordinator(ctx context.Context, rc *RequestContext, keyType int8, key string) (raftmeta.Broker, error) {
	// Kafka checks DESCRIBE on the group or transactional id.
	switch keyType {
	case CoordinatorGroup:
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, key) {
			return raftmeta.Broker{}, kerr.GroupAuthorizationFailed
		}
	case CoordinatorTransaction:
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, key) {
			return raftmeta.Broker{}, kerr.TransactionalIDAuthorizationFailed
		}
	}
	var topic InternalTopic
	var partition int32
	var locator any
	for _, p := range b.cfg.Plugins {
		if l, ok := p.(CoordinatorLocator); ok {
			var found bool
			if topic, partition, found = l.LocateCoordinator(keyType, key); found {
				locator = p
				break
			}
		}
	}
	if locator == nil {
		return raftmeta.Broker{}, fmt.Errorf("no coordinator for key type %d: %w", keyType, kerr.InvalidRequest)
	}
	if keyType != CoordinatorGroup && keyType != CoordinatorTransaction {
		if a, ok := locator.(CoordinatorAuthorizer); ok {
			if err := a.AuthorizeCoordinator(rc, keyType, key); err != nil {
				return raftmeta.Broker{}, err
			}
		} else if !rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, clusterName) {
			return raftmeta.Broker{}, kerr.ClusterAuthorizationFailed
		}
	}
	img := b.image()
	t := img.Topics[topic.Name]
	if t == nil {
		b.createInternalTopic(ctx, topic)
		img = b.awaitLeader(ctx, topic.Name, partition)
		if t = img.Topics[topic.Name]; t == nil {
			return raftmeta.Broker{}, fmt.Errorf("%s is being created: %w", topic.Name, kerr.CoordinatorNotAvailable)
		}
	}
	if int(partition) >= len(t.Partitions) {
		return raftmeta.Broker{}, fmt.Errorf("%s has no partition %d: %w", topic.Name, partition, kerr.CoordinatorNotAvailable)
	}
	node, ok := img.Brokers[t.Partitions[partition].Leader]
	if !ok {
		return raftmeta.Broker{}, fmt.Errorf("%s-%d has no live leader: %w", topic.Name, partition, kerr.CoordinatorNotAvailable)
	}
	return node, nil
}

func (b *Broker) createInternalTopic(ctx context.Context, topic InternalTopic) {
	errs := b.meta.CreateTopics(ctx, []raftmeta.TopicSpec{{
		Name: topic.Name, Partitions: topic.Partitions, ReplicationFactor: topic.ReplicationFactor,
		Configs: topic.Configs, Internal: true,
	}}, false)
	if err := errs[0]; err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		b.log.Warn("creating internal topic", "topic", topic.Name, "err", err)
	} else if err == nil {
		b.log.Info("created internal topic", "topic", topic.Name, "partitions", topic.Partitions)
	}
}

// awaitLeader waits, for a bounded time, until the applied image has a
// leader for the partition of topic, and returns the latest applied image.
func (b *Broker) awaitLeader(ctx context.Context, topic string, partition int32) *raftmeta.Image {
	timer := time.NewTimer(coordinatorTopicWait)
	defer timer.Stop()
	for {
		b.applied.mu.Lock()
		img, ch := b.applied.image, b.applied.changed
		b.applied.mu.Unlock()
		if t := img.Topics[topic]; t != nil && int(partition) < len(t.Partitions) && t.Partitions[partition].Leader >= 0 {
			return img
		}
		select {
		case <-ch:
		case <-timer.C:
			return img
		case <-ctx.Done():
			return img
		case <-b.ctx.Done():
			return img
		}
	}
}
