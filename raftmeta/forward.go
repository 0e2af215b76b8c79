package raftmeta

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The ops of the decision methods that any node may call (rpc.go): each
// public method forwards itself when this node does not lead, and runOp
// runs the same method on the leader.

// remote reports whether decisions must go to another node: this node is
// part of a cluster and does not lead it.
func (c *Controller) remote() bool { return c.stream != nil && !c.IsLeader() }

type createTopicsArgs struct {
	Specs        []TopicSpec `json:"specs"`
	ValidateOnly bool        `json:"validateOnly,omitempty"`
}

type createPartitionsArgs struct {
	Topic        string `json:"topic"`
	Total        int32  `json:"total"`
	ValidateOnly bool   `json:"validateOnly,omitempty"`
}

type bumpArgs struct {
	TopicID   UUID  `json:"topicId"`
	Partition int32 `json:"partition"`
	MinEpoch  int32 `json:"minEpoch"`
}

type mirrorArgs struct {
	Name            string            `json:"name"`
	Configs         map[string]string `json:"configs,omitempty"`
	Specs           []TopicSpec       `json:"specs,omitempty"`
	Topic           string            `json:"topic,omitempty"`
	SourceClusterID string            `json:"sourceClusterId,omitempty"`
	ACLs            []ACL             `json:"acls,omitempty"`
}

// callErrs forwards an op answering one error per item.
func callErrs(c *Controller, ctx context.Context, op string, args any, n int) []error {
	errs, err := call[errList](c, ctx, op, args)
	if err != nil {
		return sameErr(n, err)
	}
	return errs
}

// sameErr is n times err.
func sameErr(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// callErr forwards an op answering only an error.
func callErr(c *Controller, ctx context.Context, op string, args any) error {
	_, err := call[struct{}](c, ctx, op, args)
	return err
}

// runOp runs a forwarded op on this node, the leader.
func (c *Controller) runOp(ctx context.Context, op string, raw json.RawMessage) (any, error) {
	none := func(err error) (any, error) { return struct{}{}, err }
	switch op {
	case "CreateTopics":
		return decode(raw, func(a createTopicsArgs) (any, error) {
			return errList(c.CreateTopics(ctx, a.Specs, a.ValidateOnly)), nil
		})
	case "DeleteTopics":
		return decode(raw, func(ids []UUID) (any, error) { return errList(c.DeleteTopics(ctx, ids)), nil })
	case "CreatePartitions":
		return decode(raw, func(a createPartitionsArgs) (any, error) {
			return none(c.CreatePartitions(ctx, a.Topic, a.Total, a.ValidateOnly))
		})
	case "AlterConfigs":
		return decode(raw, func(ch []ConfigChange) (any, error) { return none(c.AlterConfigs(ctx, ch)) })
	case "AllocateProducerIds":
		return decode(raw, func(n int64) (any, error) { return c.AllocateProducerIDs(ctx, n) })
	case "BumpLeaderEpoch":
		return decode(raw, func(a bumpArgs) (any, error) { return c.BumpLeaderEpoch(ctx, a.TopicID, a.Partition, a.MinEpoch) })
	case "CreateAcls":
		return decode(raw, func(acls []ACL) (any, error) { return none(c.CreateACLs(ctx, acls)) })
	case "DeleteAcls":
		return decode(raw, func(f []ACLFilter) (any, error) { return c.DeleteACLs(ctx, f) })
	case "AlterScram":
		return decode(raw, func(ch []ScramChange) (any, error) { return none(c.AlterScram(ctx, ch)) })
	case "AlterClientQuotas":
		return decode(raw, func(ch []ClientQuotaRecord) (any, error) { return none(c.AlterClientQuotas(ctx, ch)) })
	case "CreateMirror":
		return decode(raw, func(a mirrorArgs) (any, error) { return none(c.CreateMirror(ctx, a.Name, a.Configs)) })
	case "AlterMirrorConfigs":
		return decode(raw, func(a mirrorArgs) (any, error) { return none(c.AlterMirrorConfigs(ctx, a.Name, a.Configs)) })
	case "DeleteMirror":
		return decode(raw, func(a mirrorArgs) (any, error) { return none(c.DeleteMirror(ctx, a.Name)) })
	case "AddMirrorTopics":
		return decode(raw, func(a mirrorArgs) (any, error) { return none(c.AddMirrorTopics(ctx, a.Name, a.Specs)) })
	case "StopMirrorTopic":
		return decode(raw, func(a mirrorArgs) (any, error) { return none(c.StopMirrorTopic(ctx, a.Name, a.Topic)) })
	case "SetMirrorSync":
		return decode(raw, func(a mirrorArgs) (any, error) {
			return none(c.SetMirrorSync(ctx, a.Name, a.SourceClusterID, a.ACLs))
		})
	}
	if run := c.clusterOp(ctx, op); run != nil {
		return run(raw)
	}
	return nil, fmt.Errorf("unknown controller request %q: %w", op, kerr.InvalidRequest)
}
