package mirror

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/admit"
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

// apiBackend is the plugin as the mirror APIs see it (mirrorapi.Backend).
type apiBackend struct{ *Plugin }

func (b apiBackend) CreateMirror(ctx context.Context, req *mirrorproto.CreateMirrorRequest) error {
	return b.createMirror(ctx, req)
}

func (b apiBackend) AddTopics(ctx context.Context, req *mirrorproto.AddTopicsToMirrorRequest) (uuid.UUID, []mirrorproto.Truncation, error) {
	return b.addTopics(ctx, req)
}

func (b apiBackend) RemoveTopics(ctx context.Context, mirror string, topics []string, mode int8, timeout time.Duration, consistent bool) ([]string, []mirrorproto.FailoverPartition, error) {
	return b.removeTopics(ctx, mirror, topics, mode, timeout, consistent)
}

func (b apiBackend) LastMirrored(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.LastMirroredOffsetsRequest) []mirrorproto.OffsetsTopic {
	return b.lastMirrored(ctx, rc, req)
}

func (b apiBackend) Mirrors(ctx context.Context, names ...string) *metadata.Image {
	return b.awaitMirrors(ctx, names...)
}

func (b apiBackend) Describe(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.DescribeMirrorsRequest) []mirrorproto.DescribedMirror {
	return b.describe(ctx, rc, req, b.describedImage(ctx, req))
}

func (b apiBackend) ReadStates(ctx context.Context, req *mirrorproto.ReadMirrorStatesRequest) ([]mirrorproto.StatesTopic, []mirrorproto.ShardMark, int16) {
	return b.store.ServeRead(ctx, b.awaitMirrors(ctx, req.MirrorName), req)
}

func (b apiBackend) WriteStates(ctx context.Context, req *mirrorproto.WriteMirrorStatesRequest) []mirrorproto.ErrTopic {
	return b.store.ServeWrite(ctx, req)
}

func (b apiBackend) Pause(ctx context.Context, mirror string, topics []string, pause bool) error {
	return b.pause(ctx, mirror, topics, pause)
}

func (b apiBackend) DeleteMirror(ctx context.Context, mirror string) error {
	return b.deleteMirror(ctx, mirror)
}

func (b apiBackend) BumpLeaderEpoch(ctx context.Context, id uuid.UUID, partition, minEpoch int32) (int32, error) {
	return b.bumpLeaderEpoch(ctx, id, partition, minEpoch)
}

func (b apiBackend) CheckConfigs(configs map[string]string) error {
	_, err := clientOpts(configs, b.cfg)
	return err
}

func (b apiBackend) AlterConfigs(ctx context.Context, mirror string, configs map[string]string) error {
	return b.Host().Metadata().AlterMirrorConfigs(ctx, mirror, configs)
}

func (b apiBackend) RequestTimeout() time.Duration { return b.cfg.RequestTimeout }

// bumpLeaderEpoch is BumpLeaderEpochs: the controller sets the epoch to
// max(minEpoch+1, current).
func (p *Plugin) bumpLeaderEpoch(ctx context.Context, id uuid.UUID, partition, minEpoch int32) (int32, error) {
	epochs, err := p.Host().Metadata().BumpLeaderEpochs(ctx, id, map[int32]int32{partition: minEpoch})
	return epochs[partition], err
}

// throttledRate is mirror.replication.throttled.rate: this broker's
// dynamic value, the cluster default, or the static property.
func (p *Plugin) throttledRate() int64 {
	img := p.Image()
	if img == nil {
		return p.cfg.ThrottledRate
	}
	const key = "mirror.replication.throttled.rate"
	v, ok := img.NodeConfigs[p.Host().NodeID()][key]
	if !ok {
		v, ok = img.BrokerConfigs[key]
	}
	if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
		return n
	}
	return p.cfg.ThrottledRate
}

func (p *Plugin) createMirror(ctx context.Context, req *mirrorproto.CreateMirrorRequest) error {
	if req.MirrorName == nil || *req.MirrorName == "" {
		return fmt.Errorf("a mirror needs a name: %w", kerr.InvalidRequest)
	}
	name := *req.MirrorName
	configs := map[string]string{}
	for _, c := range req.Configs {
		if c.Value != nil {
			configs[c.Name] = *c.Value
		}
	}
	if _, err := clientOpts(configs, p.cfg); err != nil {
		return err
	}
	if p.Image().Mirrors[name] != nil {
		return fmt.Errorf("mirror %s already exists: %w", name, mirrorproto.ErrMirrorAlreadyExists)
	}
	reachable, err := p.probeSource(ctx, configs)
	if err != nil {
		return err
	}
	if err := p.checkNewMirror(ctx, name, configs, reachable); err != nil {
		return err
	}
	if err := p.ensureStateTopic(ctx); err != nil {
		return err
	}
	return p.Host().Metadata().CreateMirror(ctx, name, configs)
}

// setTopicStates moves every partition of topics to a state and wakes the
// mirror's loop.
func (p *Plugin) setTopicStates(ctx context.Context, mirror string, topics []string, update func(s *mirrorstate.PartitionState) error) error {
	img := p.Image()
	for _, name := range topics {
		t := img.Topics[name]
		if t == nil {
			continue
		}
		for i := range t.Partitions {
			if _, err := p.store.Write(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: name, Partition: int32(i)}, t.ID, update); err != nil {
				return err
			}
		}
	}
	if r := p.run(mirror); r != nil {
		r.poke()
	}
	return nil
}

// waitStates waits until every partition of topics is in state s.
func (p *Plugin) waitStates(ctx context.Context, mirror string, topics []string, s mirrorstate.State) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	for {
		img := p.Image()
		want := map[topicPartition]uuid.UUID{}
		for _, name := range topics {
			t := img.Topics[name]
			for i := 0; t != nil && i < len(t.Partitions); i++ {
				want[topicPartition{Topic: name, Partition: int32(i)}] = t.ID
			}
		}
		states := p.store.ReadBatch(ctx, mirror, want) // one request per coordinating broker
		ok := true
		for k, id := range want {
			st, read := states[k]
			if !read {
				var err error
				st, err = p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: k.Topic, Partition: k.Partition}, id)
				read = err == nil
			}
			if ok = read && st.State == s; !ok {
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for mirror %s topics %v to reach %s: %w", mirror, topics, s, kerr.RequestTimedOut)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pause pauses (or resumes) topics of a mirror; it answers once paused.
func (p *Plugin) pause(ctx context.Context, mirror string, names []string, pause bool) error {
	m := p.awaitMirrors(ctx, mirror).Mirrors[mirror]
	if m == nil {
		return fmt.Errorf("mirror %s does not exist: %w", mirror, mirrorproto.ErrMirrorNotFound)
	}
	topics, err := admit.Select(m, names)
	if err != nil {
		return err
	}
	err = p.setTopicStates(ctx, mirror, topics, func(s *mirrorstate.PartitionState) error {
		switch {
		case pause && s.State != mirrorstate.Paused:
			s.State = mirrorstate.Pausing
		case !pause && s.State == mirrorstate.Failed:
			s.State, s.Reason = mirrorstate.Preparing, "" // resuming restarts a failed partition
		case !pause && s.State == mirrorstate.Paused:
			s.State = mirrorstate.Mirroring
		}
		return nil
	})
	if err != nil || !pause {
		return err
	}
	return p.waitStates(ctx, mirror, topics, mirrorstate.Paused)
}

// deleteMirror stops every topic of the mirror and deletes it.
func (p *Plugin) deleteMirror(ctx context.Context, mirror string) error {
	m := p.awaitMirrors(ctx, mirror).Mirrors[mirror]
	if m == nil {
		return fmt.Errorf("mirror %s does not exist: %w", mirror, mirrorproto.ErrMirrorNotFound)
	}
	if topics, _ := admit.Select(m, nil); len(topics) > 0 {
		if _, _, err := p.removeTopics(ctx, mirror, topics, mirrorproto.FailoverNow, 0, false); err != nil {
			return err
		}
	}
	return p.Host().Metadata().DeleteMirror(ctx, mirror)
}

// lastMirrored answers LastMirroredOffsets from whichever mirror holds (or
// held) each topic; the last mirror epoch is -1 for a partition never
// mirrored here.
func (p *Plugin) lastMirrored(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.LastMirroredOffsetsRequest) []mirrorproto.OffsetsTopic {
	img := p.Image()
	var out []mirrorproto.OffsetsTopic
	for _, t := range req.Topics {
		ot := mirrorproto.OffsetsTopic{Name: t.Name}
		mirror, mt, ok := img.LastMirrorOf(t.Name)
		allowed := rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Name)
		for _, idx := range t.Partitions {
			op := mirrorproto.OffsetsPartition{PartitionIndex: idx, LastMirroredOffset: -1, LastMirrorEpoch: -1}
			if !allowed {
				op.ErrorCode = kerr.TopicAuthorizationFailed.Code
			} else if here := img.Topics[t.Name]; !ok && here != nil {
				// No mirror holds the topic (any more): the epochs kept
				// for the topic alone when its mirroring last stopped.
				if st, err := p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: "", Topic: t.Name, Partition: idx}, here.ID); err == nil && st.TopicID == here.ID {
					op.LastMirroredOffset, op.LastMirrorEpoch = st.LMO, st.LME
				}
			} else if ok {
				st, err := p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: t.Name, Partition: idx}, mt.ID)
				switch {
				case err != nil:
					op.ErrorCode, _ = code(err)
				case st.State == mirrorstate.Stopped || st.State == mirrorstate.Stopping:
					op.LastMirroredOffset, op.LastMirrorEpoch = st.LMO, st.LME
				default:
					// Still mirroring: the latest source epoch it holds.
					if ep := p.Host().Partition(mt.ID, idx); ep != nil {
						offs := ep.Offsets()
						op.LastMirroredOffset = offs.LogEnd - 1
						if offs.LogEnd > offs.LogStart {
							op.LastMirrorEpoch = ep.EpochAt(offs.LogEnd - 1)
						}
					}
				}
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		out = append(out, ot)
	}
	return out
}

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
