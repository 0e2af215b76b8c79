package mirror

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/plugins/mirror/admit"
	"github.com/tandem-kafka/tandem/plugins/mirror/cutover"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorview"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// removeTopics is RemoveTopicsFromMirror (failover): the topics'
// partitions go STOPPING, at once (FailoverNow, the KIP's meaning) or once
// a safe or forced failover's wait is over, and the answer comes when
// they are STOPPED and writable. It reports where each partition was
// left: the lag a forced failover gave up, or why a safe one refused.
// Topics named that failed over before are reported as such
// (AlreadyStopped, where their stop left them), so that a failover can
// be repeated. A consistent failover stops the topics newly stopping at
// one cut (plugins/mirror/cutover); the report then says its time and
// what each partition gave up beyond it.
func (p *Plugin) removeTopics(ctx context.Context, mirror string, names []string, mode int8, timeout time.Duration, consistent bool) ([]string, []mirrorproto.FailoverPartition, error) {
	start := time.Now()
	m := p.awaitMirrors(ctx, mirror).Mirrors[mirror]
	if m == nil {
		return nil, nil, fmt.Errorf("mirror %s does not exist: %w", mirror, mirrorproto.ErrMirrorNotFound)
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("no topic named: %w", kerr.InvalidRequest)
	}
	topics, stopped, err := admit.SelectAll(m, names)
	if err != nil {
		return nil, nil, err
	}
	done := p.stoppedReport(ctx, mirror, stopped)
	if len(topics) == 0 {
		return nil, done, nil
	}
	if mode != mirrorproto.FailoverNow {
		if err := p.awaitCaughtUp(ctx, mirror, topics, mode, timeout); err != nil {
			return nil, append(p.failoverReport(ctx, mirror, topics, p.sourceSnapshot(ctx, mirror)), done...), err
		}
	}
	// What the leaders know of the source side, before their fetchers
	// let go of it. What a failover gives up is exact only where the
	// source answered after the failover began: an end offset learned
	// before may be behind records the source acknowledged since (it
	// may have become unreachable a moment ago, before any fetch could
	// fail), so the report says "at least".
	before := p.sourceSnapshot(ctx, mirror)
	for k, d := range before {
		if d.SourceOffsetTime < start.UnixMilli() {
			d.SourceStale = true
			before[k] = d
		}
	}
	set := cutover.SetOf(topics)
	if err := p.setTopicStates(ctx, mirror, topics, func(s *mirrorstate.PartitionState) error {
		if consistent && s.State != mirrorstate.Stopping && s.State != mirrorstate.Stopped {
			s.Cut = mirrorstate.Cut{Set: set, At: -1}
		}
		s.State, s.Reason = mirrorstate.Stopping, ""
		return nil
	}); err != nil {
		return nil, nil, err
	}
	err = p.waitStates(ctx, mirror, topics, mirrorstate.Stopped)
	return topics, append(p.failoverReport(ctx, mirror, topics, before), done...), err
}

// stoppedReport is where the failover of topics, done before, left each
// of their partitions: the end of the mirrored data (StopAt).
func (p *Plugin) stoppedReport(ctx context.Context, mirror string, topics []string) []mirrorproto.FailoverPartition {
	img := p.Image()
	var out []mirrorproto.FailoverPartition
	for _, name := range topics {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			fp := mirrorproto.FailoverPartition{Topic: name, Partition: int32(i), SourceOffset: -1, DestinationOffset: -1, Lag: -1, LagMs: -1, AlreadyStopped: true}
			if st, err := p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: name, Partition: int32(i)}, t.ID); err == nil && st.StopAt >= 0 {
				fp.DestinationOffset = st.StopAt
				fp.CutTime, fp.CutRecords, fp.CutMs = cutover.Report(st)
			}
			out = append(out, fp)
		}
	}
	return out
}

// sourceSnapshot is what the leaders of the mirror's partitions know of
// their source side now: this broker's runs and the others' (remoteView),
// each with SourceStale as sourceCurrent says at this moment.
func (p *Plugin) sourceSnapshot(ctx context.Context, mirror string) map[topicPartition]mirrorproto.PartitionDetail {
	out := p.remoteDetailsOnly(ctx, mirror)
	r := p.run(mirror)
	if r == nil {
		return out
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, pt := range r.parts {
		if pt.progress.SrcEnd < 0 {
			continue
		}
		out[k] = mirrorproto.PartitionDetail{PartitionIndex: k.Partition, SourceOffset: pt.progress.SrcEnd, SourceOffsetTime: pt.endAt().UnixMilli(),
			LagMs: pt.progress.LagMs, SourceStale: !r.sourceCurrent(pt, now), DestinationOffset: -1, Lag: -1}
	}
	return out
}

// awaitCaughtUp waits until every partition of topics has lag 0 against a
// source end offset learned after the call began. A partition whose
// source cannot tell (unreachable, leaderless, paused, failed) ends the
// wait at once: a safe failover refuses, naming it; a forced one goes on.
// So does the end of the time: a safe failover refuses, naming the
// partitions still behind.
func (p *Plugin) awaitCaughtUp(ctx context.Context, mirror string, topics []string, mode int8, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		lagging, broken := p.caughtUp(ctx, mirror, topics, start)
		switch {
		case len(lagging) == 0 && len(broken) == 0:
			return nil
		case len(broken) > 0 && mode == mirrorproto.FailoverForce:
			return nil
		case len(broken) > 0:
			return fmt.Errorf("mirror %s: the source cannot confirm that nothing would be lost: %s (--force fails over anyway): %w",
				mirror, byReason(broken), mirrorproto.ErrMirrorSourceUnavailable)
		case time.Now().After(deadline) && mode == mirrorproto.FailoverForce:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("mirror %s: still behind the source after %v: %s (--force fails over anyway): %w",
				mirror, timeout, byReason(lagging), kerr.RequestTimedOut)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// byReason joins "partition: reason" items, each reason once with the
// partitions it holds for, in the order first seen: an unreachable
// source is one reason for every partition, and the error that says so
// is read by an operator. What the final error adds anyway (the mirror
// error's own text) and when a reason began are left out.
func byReason(items []string) string {
	var reasons []string
	parts := map[string][]string{}
	for _, it := range items {
		id, reason, ok := strings.Cut(it, ": ")
		if !ok {
			reasons, parts[it] = append(reasons, it), nil
			continue
		}
		if i := strings.LastIndex(reason, " (since "); i > 0 && strings.HasSuffix(reason, ")") {
			reason = reason[:i]
		}
		for _, e := range mirrorproto.Errors {
			reason = strings.TrimSuffix(reason, ": "+e.Error())
		}
		if _, seen := parts[reason]; !seen {
			reasons = append(reasons, reason)
		}
		parts[reason] = append(parts[reason], id)
	}
	out := make([]string, len(reasons))
	for i, r := range reasons {
		if ids := parts[r]; len(ids) > 0 {
			r = strings.Join(ids, ", ") + ": " + r
		}
		out[i] = r
	}
	return strings.Join(out, "; ")
}

// caughtUp lists the partitions of topics that are behind a source end
// offset learned since start, and those whose source cannot tell. The
// partitions other brokers lead are as their leaders describe them.
func (p *Plugin) caughtUp(ctx context.Context, mirror string, topics []string, start time.Time) (lagging, broken []string) {
	img := p.Image()
	r := p.run(mirror)
	var remote map[topicPartition]mirrorproto.PartitionDetail
	for _, name := range topics {
		if t := img.Topics[name]; t != nil && slices.ContainsFunc(t.Partitions, func(pp metadata.Partition) bool { return pp.Leader != p.Host().NodeID() }) {
			remote = p.remoteDetailsOnly(ctx, mirror)
			break
		}
	}
	for _, name := range topics {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			k := topicPartition{Topic: name, Partition: int32(i)}
			id := fmt.Sprintf("%s-%d", name, i)
			var pt ledPartition
			found := false
			if r != nil {
				r.mu.Lock()
				if pp := r.parts[k]; pp != nil {
					pt, found = pp.view(), true
				}
				r.mu.Unlock()
			}
			leo := int64(-1)
			if ep := p.Host().Partition(t.ID, int32(i)); ep != nil {
				leo = ep.Offsets().LogEnd
			}
			fresh := found && pt.progress.SrcEnd >= 0 && !pt.progress.SrcEndAt.Before(start)
			if l := t.Partitions[i].Leader; l != p.Host().NodeID() {
				pd, ok := remote[k]
				rfresh := ok && pd.SourceOffset >= 0 && pd.SourceOffsetTime >= start.UnixMilli()
				switch {
				case l < 0:
					broken = append(broken, id+" has no leader")
				case !ok:
					lagging = append(lagging, fmt.Sprintf("%s: its leader, broker %d, did not answer", id, l))
				case rfresh && pd.Lag == 0:
					// caught up
				case pd.State == mirrorstate.Failed.String() && pd.Reason != "":
					broken = append(broken, fmt.Sprintf("%s: %s", id, pd.Reason)) // cut off from its source, say why
				case pd.State == mirrorstate.Failed.String() || pd.State == mirrorstate.Stopping.String() || pd.State == mirrorstate.Stopped.String():
					broken = append(broken, fmt.Sprintf("%s is %s", id, pd.State))
				case pd.State == mirrorstate.Paused.String() || pd.State == mirrorstate.Pausing.String():
					broken = append(broken, fmt.Sprintf("%s is %s with lag %d (resume it first)", id, pd.State, pd.Lag))
				case !rfresh && pd.Reason != "":
					broken = append(broken, fmt.Sprintf("%s: %s", id, pd.Reason))
				case !rfresh:
					lagging = append(lagging, id+": no source end offset learned yet")
				default:
					lagging = append(lagging, fmt.Sprintf("%s: lag %d", id, pd.Lag))
				}
				continue
			}
			switch {
			case !found || leo < 0:
				lagging = append(lagging, id+": not mirroring yet")
			case fresh && leo >= pt.progress.SrcEnd:
				// caught up
			case pt.state == mirrorstate.Failed || !mirrorview.NeedsSource(pt.state):
				broken = append(broken, fmt.Sprintf("%s is %s", id, pt.state))
			case pt.state == mirrorstate.Paused || pt.state == mirrorstate.Pausing:
				broken = append(broken, fmt.Sprintf("%s is %s with lag %d (resume it first)", id, pt.state, max(0, pt.progress.SrcEnd-leo)))
			case !fresh && pt.trouble != "":
				broken = append(broken, fmt.Sprintf("%s: %s", id, pt.trouble))
			case !fresh:
				lagging = append(lagging, id+": no source end offset learned yet")
			default:
				lagging = append(lagging, fmt.Sprintf("%s: lag %d", id, pt.progress.SrcEnd-leo))
			}
		}
	}
	return lagging, broken
}

// failoverReport says where each partition of topics is: the source end
// offset last learned and when, whether it was still the source's end
// (snapshot, taken before the stop), the end of the mirrored data (where
// a stop left it), and the lag between them.
func (p *Plugin) failoverReport(ctx context.Context, mirror string, topics []string, snapshot map[topicPartition]mirrorproto.PartitionDetail) []mirrorproto.FailoverPartition {
	img := p.Image()
	var out []mirrorproto.FailoverPartition
	for _, name := range topics {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			fp := mirrorproto.FailoverPartition{Topic: name, Partition: int32(i), SourceOffset: -1, DestinationOffset: -1, Lag: -1, LagMs: -1}
			if st, err := p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: name, Partition: int32(i)}, t.ID); err == nil && st.StopAt >= 0 {
				fp.DestinationOffset = st.StopAt
				fp.CutTime, fp.CutRecords, fp.CutMs = cutover.Report(st)
			} else if ep := p.Host().Partition(t.ID, int32(i)); ep != nil {
				fp.DestinationOffset = ep.Offsets().LogEnd
			}
			if sd, ok := snapshot[topicPartition{Topic: name, Partition: int32(i)}]; ok && sd.SourceOffset >= 0 && fp.DestinationOffset >= 0 {
				fp.SourceOffset, fp.SourceOffsetTime, fp.SourceStale = sd.SourceOffset, sd.SourceOffsetTime, sd.SourceStale
				fp.Lag, fp.LagMs = max(0, sd.SourceOffset-fp.DestinationOffset), sd.LagMs
				if fp.Lag == 0 {
					fp.LagMs = 0
				}
			}
			out = append(out, fp)
		}
	}
	return out
}
