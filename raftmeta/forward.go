package raftmeta

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// A decision is a change of the metadata that only the active controller
// makes, and that any node may ask for: on the controller it runs here;
// on another node its arguments go, by the decision's name, to the
// controller (rpc.go), which runs the same decision and answers its
// result. Each decision is declared once, beside the method that is its
// public face, and listed in decisions so the controller finds it by
// name. Its body takes the decision lock and proposes with decide.
type decision[A, R any] struct {
	name string
	run  func(c *Controller, ctx context.Context, a A) (R, error)
}

// do runs d here if this node leads the quorum (or is a single node),
// else on the node that does.
func (d decision[A, R]) do(c *Controller, ctx context.Context, a A) (R, error) {
	if c.remote() {
		return call[R](c, ctx, d.name, a)
	}
	return d.run(c, ctx, a)
}

// serve runs d for another node: raw holds its arguments as JSON.
func (d decision[A, R]) serve(c *Controller, ctx context.Context, raw json.RawMessage) (any, error) {
	var a A
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, fmt.Errorf("undecodable arguments of %s: %v: %w", d.name, err, kerr.InvalidRequest)
		}
	}
	return d.run(c, ctx, a)
}

func (d decision[A, R]) opName() string { return d.name }

// served is what the controller needs of a decision to run it for
// another node.
type served interface {
	opName() string
	serve(c *Controller, ctx context.Context, raw json.RawMessage) (any, error)
}

// decisions are every decision another node may forward, by name. The
// names are on the wire between nodes: they never change.
var decisions = byName(
	registerBroker, brokerHeartbeat, catchUp,
	createTopics, deleteTopics, createPartitions, alterConfigs,
	allocateProducerIDs, bumpLeaderEpoch, bumpLeaderEpochs,
	alterPartition, electLeaders, alterPartitionReassignments,
	createACLs, deleteACLs, alterScram, alterClientQuotas,
	createMirror, alterMirrorConfigs, deleteMirror, addMirrorTopics, stopMirrorTopic, setMirrorSync,
)

func byName(ds ...served) map[string]served {
	m := make(map[string]served, len(ds))
	for _, d := range ds {
		m[d.opName()] = d
	}
	return m
}

// runOp runs a forwarded decision on this node, the leader.
func (c *Controller) runOp(ctx context.Context, op string, raw json.RawMessage) (any, error) {
	d := decisions[op]
	if d == nil {
		return nil, fmt.Errorf("unknown controller request %q: %w", op, kerr.InvalidRequest)
	}
	return d.serve(c, ctx, raw)
}

// decide is the one way a decision changes the metadata: with the
// decision lock held, fn reads the image and returns the records to
// propose (none: nothing changes) or why the decision is refused; the
// records are proposed in one batch, all or none. A failed proposal is
// wrapped with what, when it is not empty.
func (c *Controller) decide(ctx context.Context, what string, fn func(img *metadata.Image) ([]metadata.Record, error)) error {
	img, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer c.unlock()
	recs, err := fn(img)
	if err != nil || len(recs) == 0 {
		return err
	}
	if err := c.propose(ctx, recs...); err != nil {
		if what != "" {
			return fmt.Errorf("%s: %w", what, err)
		}
		return err
	}
	return nil
}

// remote reports whether decisions must go to another node: this node is
// part of a cluster and does not lead it.
func (c *Controller) remote() bool { return c.stream != nil && !c.IsLeader() }

// none is a decision's result when it has only an error.
type none = struct{}

type createTopicsArgs struct {
	Specs        []metadata.TopicSpec `json:"specs"`
	ValidateOnly bool                 `json:"validateOnly,omitempty"`
}

type createPartitionsArgs struct {
	Topic        string `json:"topic"`
	Total        int32  `json:"total"`
	ValidateOnly bool   `json:"validateOnly,omitempty"`
}

type bumpArgs struct {
	TopicID   metadata.UUID `json:"topicId"`
	Partition int32         `json:"partition"`
	MinEpoch  int32         `json:"minEpoch"`
}

type bumpsArgs struct {
	TopicID   metadata.UUID   `json:"topicId"`
	MinEpochs map[int32]int32 `json:"minEpochs"`
}

type mirrorArgs struct {
	Name            string               `json:"name"`
	Configs         map[string]string    `json:"configs,omitempty"`
	Specs           []metadata.TopicSpec `json:"specs,omitempty"`
	Topic           string               `json:"topic,omitempty"`
	SourceClusterID string               `json:"sourceClusterId,omitempty"`
	ACLs            []metadata.ACL       `json:"acls,omitempty"`
}

// errsOf is a decision's one error per item, or n times the error that
// kept it from running.
func errsOf(errs errList, err error, n int) []error {
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
