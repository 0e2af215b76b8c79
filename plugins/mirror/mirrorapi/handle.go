package mirrorapi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// APIs implements plugin.APIHandler: the mirror API keys, each at
// version 0 only, each answer filled by a function of its own.
func (h *Handler) APIs() []plugin.API {
	return []plugin.API{
		mirrorAPI(mirrorproto.KeyCreateMirror, h.createMirror),
		mirrorAPI(mirrorproto.KeyAddTopicsToMirror, h.addTopics),
		mirrorAPI(mirrorproto.KeyRemoveTopicsFromMirror, h.removeTopics),
		mirrorAPI(mirrorproto.KeyLastMirroredOffsets, func(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.LastMirroredOffsetsRequest, r *mirrorproto.LastMirroredOffsetsResponse) {
			// Asked by the destination of a failback with its credentials on
			// this (source) cluster: DESCRIBE on each topic, as ListOffsets.
			r.Topics = h.b.LastMirrored(ctx, rc, req)
		}),
		mirrorAPI(mirrorproto.KeyListMirrors, func(ctx context.Context, rc *plugin.RequestContext, _ *mirrorproto.ListMirrorsRequest, r *mirrorproto.ListMirrorsResponse) {
			h.listMirrors(ctx, rc, r)
		}),
		mirrorAPI(mirrorproto.KeyDescribeMirrors, func(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.DescribeMirrorsRequest, r *mirrorproto.DescribeMirrorsResponse) {
			r.Mirrors = h.b.Describe(ctx, rc, req)
		}),
		mirrorAPI(mirrorproto.KeyReadMirrorStates, func(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.ReadMirrorStatesRequest, r *mirrorproto.ReadMirrorStatesResponse) {
			if err := clusterAction(rc, req); err != nil {
				r.ErrorCode, _ = code(err)
				return
			}
			r.Topics, r.Shards, r.ErrorCode = h.b.ReadStates(ctx, req)
		}),
		mirrorAPI(mirrorproto.KeyWriteMirrorStates, func(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.WriteMirrorStatesRequest, r *mirrorproto.WriteMirrorStatesResponse) {
			if err := clusterAction(rc, req); err != nil {
				r.ErrorCode, _ = code(err)
				return
			}
			r.Topics = h.b.WriteStates(ctx, req)
		}),
		mirrorAPI(mirrorproto.KeyPauseMirrorTopics, h.mirrorTopics),
		mirrorAPI(mirrorproto.KeyResumeMirrorTopics, h.mirrorTopics),
		mirrorAPI(mirrorproto.KeyDeleteMirror, h.mirrorTopics),
		mirrorAPI(mirrorproto.KeyBumpLeaderEpochs, h.bumpLeaderEpochs),
	}
}

// mirrorAPI serves a mirror API key, which kmsg does not know
// (mirrorproto.NewRequest makes its requests), at version 0: fill fills
// the response of the request's version.
func mirrorAPI[R kmsg.Request, S kmsg.Response](key int16, fill func(context.Context, *plugin.RequestContext, R, S)) plugin.API {
	a := plugin.Handle(kmsg.Key(key), 0, 0, func(ctx context.Context, rc *plugin.RequestContext, req R) (kmsg.Response, error) {
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		fill(ctx, rc, req, resp.(S))
		return resp, nil
	})
	a.NewRequest = mirrorproto.NewRequest
	return a
}

// clusterAction is nil when the request may use an inter-broker or
// controller API: those need CLUSTER_ACTION, as Kafka's do.
func clusterAction(rc *plugin.RequestContext, req kmsg.Request) error {
	if rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, "kafka-cluster") {
		return nil
	}
	return fmt.Errorf("mirror API %d needs CLUSTER_ACTION on the cluster: %w", req.Key(), kerr.ClusterAuthorizationFailed)
}

func (h *Handler) createMirror(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.CreateMirrorRequest, r *mirrorproto.CreateMirrorResponse) {
	name := ""
	if req.MirrorName != nil {
		name = *req.MirrorName
	}
	if err := Authorized(rc, kmsg.ACLOperationCreate, name); err != nil {
		r.SetErr(code(err))
		return
	}
	r.SetErr(code(h.b.CreateMirror(ctx, req)))
}

func (h *Handler) addTopics(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.AddTopicsToMirrorRequest, r *mirrorproto.AddTopicsToMirrorResponse) {
	var denied error
	for _, t := range req.Topics {
		if t.MirrorName != nil && denied == nil {
			denied = Authorized(rc, kmsg.ACLOperationAlter, *t.MirrorName)
		}
	}
	if denied != nil {
		r.ErrorCode, _ = code(denied)
		return
	}
	id, plan, err := h.b.AddTopics(ctx, req)
	r.TopicID, r.Truncations = id, plan
	c, msg := code(err)
	r.ErrorCode, r.ErrorMessage = c, mirrorproto.NonEmpty(msg)
}

func (h *Handler) removeTopics(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.RemoveTopicsFromMirrorRequest, r *mirrorproto.RemoveTopicsFromMirrorResponse) {
	if err := Authorized(rc, kmsg.ACLOperationAlter, req.MirrorName); err != nil {
		r.ErrorCode, _ = code(err)
		return
	}
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = h.b.RequestTimeout()
	}
	removed, report, err := h.b.RemoveTopics(ctx, req.MirrorName, topicNames(req.Topics), req.Mode, timeout, req.Consistent)
	r.Failover = report
	c, msg := code(err)
	if err == nil {
		msg = fmt.Sprintf("Removed %d topic(s) from mirror %s: [%s]", len(removed), req.MirrorName, strings.Join(removed, ", "))
		if n := alreadyStopped(report); n > 0 {
			msg += fmt.Sprintf("; %d partition(s) had failed over already", n)
		}
	}
	r.ErrorCode, r.ErrorMessage = c, mirrorproto.NonEmpty(msg)
}

func (h *Handler) listMirrors(ctx context.Context, rc *plugin.RequestContext, r *mirrorproto.ListMirrorsResponse) {
	img := h.b.Mirrors(ctx)
	for _, name := range slices.Sorted(maps.Keys(img.Mirrors)) {
		m := img.Mirrors[name]
		if Authorized(rc, kmsg.ACLOperationDescribe, name) != nil {
			continue // hidden, as ListGroups hides groups
		}
		n := 0
		for _, mt := range m.Topics {
			if !mt.Stopped {
				n++
			}
		}
		r.Mirrors = append(r.Mirrors, mirrorproto.ListedMirror{MirrorName: name, SourceBootstrap: m.Configs["bootstrap.servers"], TopicCount: int32(n)})
	}
}

// mirrorTopics serves PauseMirrorTopics, ResumeMirrorTopics and
// DeleteMirror, which share their messages.
func (h *Handler) mirrorTopics(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.MirrorTopicsRequest, r *mirrorproto.MirrorTopicsResponse) {
	op := kmsg.ACLOperationAlter
	if req.Key() == mirrorproto.KeyDeleteMirror {
		op = kmsg.ACLOperationDelete
	}
	if err := Authorized(rc, op, req.MirrorName); err != nil {
		r.SetErr(code(err))
		return
	}
	var err error
	switch req.Key() {
	case mirrorproto.KeyPauseMirrorTopics:
		err = h.b.Pause(ctx, req.MirrorName, req.Topics, true)
	case mirrorproto.KeyResumeMirrorTopics:
		err = h.b.Pause(ctx, req.MirrorName, req.Topics, false)
	case mirrorproto.KeyDeleteMirror:
		err = h.b.DeleteMirror(ctx, req.MirrorName)
	}
	r.SetErr(code(err))
}

func (h *Handler) bumpLeaderEpochs(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.BumpLeaderEpochsRequest, r *mirrorproto.BumpLeaderEpochsResponse) {
	denied := clusterAction(rc, req)
	for _, t := range req.Topics {
		bt := mirrorproto.BumpTopic{TopicID: t.TopicID}
		for _, bp := range t.Partitions {
			out := mirrorproto.BumpPartition{PartitionIndex: bp.PartitionIndex, LeaderEpoch: -1}
			if denied != nil {
				out.ErrorCode, _ = code(denied)
			} else if e, err := h.b.BumpLeaderEpoch(ctx, t.TopicID, bp.PartitionIndex, bp.MinLeaderEpoch); err != nil {
				out.ErrorCode, _ = code(err)
			} else {
				out.LeaderEpoch = e
			}
			bt.Partitions = append(bt.Partitions, out)
		}
		r.Topics = append(r.Topics, bt)
	}
}

// Authorized checks op on the MIRROR resource (ACL resource type
// 8); the matching cluster-wide binding (ALTER on CLUSTER for changes,
// DESCRIBE for reads, DESCRIBE_CONFIGS and ALTER_CONFIGS for configs),
// which administrators hold, also allows it.
func Authorized(rc *plugin.RequestContext, op kmsg.ACLOperation, name string) error {
	if rc.Allowed(op, plugin.ACLResourceMirror, name) {
		return nil
	}
	cop := kmsg.ACLOperationAlter
	switch op {
	case kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs:
		cop = op
	}
	if rc.Allowed(cop, kmsg.ACLResourceTypeCluster, "kafka-cluster") {
		return nil
	}
	return fmt.Errorf("%s on mirror %s is not authorized: %w", op, name, mirrorproto.ErrMirrorAuthorizationFailed)
}

func alreadyStopped(report []mirrorproto.FailoverPartition) int {
	n := 0
	for _, fp := range report {
		if fp.AlreadyStopped {
			n++
		}
	}
	return n
}

func topicNames(ts []mirrorproto.RemoveTopic) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.TopicName
	}
	return out
}
