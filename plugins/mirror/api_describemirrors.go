package mirror

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/cutover"
	"github.com/tandem-kafka/tandem/plugins/mirror/diverged"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorapi"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorview"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// DescribeMirrors (key 99) of KIP-1279 (Cluster Mirroring): the plugin's
// side, which the console shares.

// describedImage is the image a DescribeMirrors answers from: an
// operator's reads its writes (a topic added through another broker a
// moment ago is listed, never an empty mirror that a script waiting for
// lag 0 would pass); another broker gathering a description (Local)
// gets this broker's own.
func (p *Plugin) describedImage(ctx context.Context, req *mirrorproto.DescribeMirrorsRequest) *metadata.Image {
	if req.Local {
		return p.Image()
	}
	return p.latestImage(ctx, req.MirrorNames...)
}

// describe answers DescribeMirrors from img: a client's request passes an
// image caught up with the controller (awaitMirrors), the console this
// broker's own.
func (p *Plugin) describe(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.DescribeMirrorsRequest, img *metadata.Image) []mirrorproto.DescribedMirror {
	names := req.MirrorNames
	all := len(names) == 0
	if all {
		names = slices.Sorted(maps.Keys(img.Mirrors))
	}
	var out []mirrorproto.DescribedMirror
	for _, name := range names {
		dm := mirrorproto.DescribedMirror{MirrorName: name, AuthorizedOperations: -2147483648}
		m := img.Mirrors[name]
		denied := mirrorapi.Authorized(rc, kmsg.ACLOperationDescribe, name)
		if denied != nil && req.Local && rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, "kafka-cluster") {
			denied = nil // another broker gathering a description (remoteView), as it reads states
		}
		if denied != nil && all {
			continue // describing every mirror shows those the principal may see
		}
		if req.IncludeAuthorizedOperations && denied == nil {
			dm.AuthorizedOperations = authorizedOperations(rc, name)
		}
		switch {
		case denied != nil:
			var msg string
			dm.ErrorCode, msg = code(denied)
			dm.ErrorMessage = mirrorproto.NonEmpty(msg)
		case m == nil:
			dm.ErrorCode = mirrorproto.ErrMirrorNotFound.Code
			dm.ErrorMessage = mirrorproto.NonEmpty("mirror " + name + " does not exist")
		default:
			p.describeMirror(ctx, req, img, m, &dm)
		}
		out = append(out, dm)
	}
	return out
}

// authorizedOperations is the bit field of the operations the principal
// may do on mirror name (DescribeMirrors IncludeAuthorizedOperations).
func authorizedOperations(rc *plugin.RequestContext, name string) int32 {
	var ops int32
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationCreate, kmsg.ACLOperationDelete, kmsg.ACLOperationAlter,
		kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs} {
		if mirrorapi.Authorized(rc, op, name) == nil {
			ops |= 1 << op
		}
	}
	return ops
}

// describeMirror fills dm, mirror m as this broker sees it and, unless
// the request is another broker's (req.Local), as the leaders of its
// partitions do.
func (p *Plugin) describeMirror(ctx context.Context, req *mirrorproto.DescribeMirrorsRequest, img *metadata.Image, m *metadata.Mirror, dm *mirrorproto.DescribedMirror) {
	name := dm.MirrorName
	failed := false
	r := p.run(name)
	if r != nil {
		r.mu.Lock()
		if r.failed != "" {
			dm.ErrorCode, dm.ErrorMessage, failed = r.code, mirrorproto.NonEmpty(r.failed), true
		}
		r.mu.Unlock()
	}
	halt, aclSync := p.meta.Status(name)
	if halt != "" {
		dm.ErrorCode, dm.ErrorMessage, failed = kerr.InconsistentClusterID.Code, mirrorproto.NonEmpty(halt), true
	}
	dm.ACLSync, dm.SourceClusterID, dm.TopicPrefix = aclSync, m.SourceClusterID, mirrorcfg.Prefix(m.Configs)
	dm.Diverged = p.store.Manifest(ctx, name)
	var remote remoteMirror
	if !req.Local {
		remote = p.remoteView(ctx, name)
		dm.Diverged = diverged.Merge(dm.Diverged, remote.diverged)
		if !failed && remote.errCode != 0 {
			// Another leader's run cannot use the source: the
			// source is the same for all of them.
			dm.ErrorCode, dm.ErrorMessage, failed = remote.errCode, mirrorproto.NonEmpty(remote.errMsg), true
		}
	}
	mirrorview.SourceNames(m, dm.Diverged)
	want := map[topicPartition]uuid.UUID{}
	for tn := range m.Topics {
		if t := img.Topics[tn]; t != nil {
			for i := range t.Partitions {
				want[topicPartition{Topic: tn, Partition: int32(i)}] = t.ID
			}
		}
	}
	states := p.store.ReadBatch(ctx, name, want) // one request per coordinating broker
	now := time.Now()
	var all []mirrorproto.PartitionDetail
	for _, tn := range slices.Sorted(maps.Keys(m.Topics)) {
		t := img.Topics[tn]
		if t == nil {
			if !m.Topics[tn].Stopped {
				// Mirrored, not created here (yet): listed
				// without partitions, so that no view shows
				// an empty mirror as one that is caught up.
				dm.Topics = append(dm.Topics, mirrorproto.DescribedTopic{TopicName: tn})
			}
			continue
		}
		dt := mirrorproto.DescribedTopic{TopicName: tn}
		if src := m.Topics[tn].SourceName(tn); src != tn {
			dt.SourceTopicName = src
		}
		for i := range t.Partitions {
			pd, cut := p.describePartition(ctx, r, name, img, t, int32(i), states, now)
			rd, led := remote.details[topicPartition{Topic: tn, Partition: int32(i)}]
			pd = mirrorview.WithLeaderView(pd, rd, led, cut, failed, dm.ErrorMessage)
			dt.Partitions = append(dt.Partitions, pd)
			all = append(all, pd)
		}
		dm.Topics = append(dm.Topics, dt)
	}
	dm.State = mirrorview.MirrorState(failed, all)
}

// describePartition is partition i of t as this broker sees it: its
// state (the coordinator's), the destination's health (the image's),
// and, if this broker leads it, its source side as of now.
func (p *Plugin) describePartition(ctx context.Context, r *mirrorRun, mirror string, img *metadata.Image, t *metadata.Topic, i int32,
	states map[topicPartition]mirrorstate.PartitionState, now time.Time) (pd mirrorproto.PartitionDetail, cut bool) {
	pd = mirrorproto.PartitionDetail{PartitionIndex: i, SourceOffset: -1, DestinationOffset: -1, Lag: -1, LagMs: -1, State: mirrorstate.Unknown.String()}
	if st, ok := states[topicPartition{Topic: t.Name, Partition: i}]; ok {
		pd.State, pd.Reason = st.State.String(), cmp.Or(st.Reason, cutover.Reason(st))
	} else if st, err := p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: t.Name, Partition: i}, t.ID); err == nil {
		pd.State, pd.Reason = st.State.String(), cmp.Or(st.Reason, cutover.Reason(st))
	} else {
		_, pd.Reason = code(err)
	}
	pd.DestinationIssue = mirrorview.DestinationIssue(img, t, i, p.cfg.MinISR)
	if ep := p.Host().Partition(t.ID, i); ep != nil {
		pd.DestinationOffset = ep.Offsets().LogEnd
	}
	if r == nil {
		return pd, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	lp := r.parts[topicPartition{Topic: t.Name, Partition: i}]
	if lp == nil || !mirrorview.NeedsSource(lp.state) {
		return pd, false // not copied here (any more): the source side is not ours to tell
	}
	pt := lp.view()
	if pt.progress.SrcEnd >= 0 && pd.DestinationOffset >= 0 {
		pd.SourceOffset, pd.SourceOffsetTime = pt.progress.SrcEnd, pt.progress.SrcEndAt.UnixMilli()
		pd.Lag, pd.LagMs = max(0, pt.progress.SrcEnd-pd.DestinationOffset), pt.progress.LagMs
		if pd.Lag == 0 {
			pd.LagMs = 0
		}
		pd.SourceStale = !r.sourceCurrent(lp, now)
	}
	cut = r.cutOff(&pt) && mirrorview.CutOffState(pd.State) // shown FAILED by mirrorview.WithLeaderView
	switch {
	case pd.Reason != "":
	case r.failed != "":
		// Not copied while the mirror's source fails it: the one cause,
		// said as the mirror says it, before what each partition saw.
		pd.Reason = r.failed
	case pt.trouble != "":
		pd.Reason = fmt.Sprintf("%s (since %s)", pt.trouble, pt.troubleAt.UTC().Format(time.RFC3339))
	case pd.SourceStale:
		pd.Reason = mirrorview.StaleReason(pt.progress.SrcEndAt)
	}
	return pd, cut
}
