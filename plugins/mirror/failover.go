package mirror

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta"
)

// removeTopics is RemoveTopicsFromMirror (failover): the topics'
// partitions go STOPPING, at once (FailoverNow, the KIP's meaning) or once
// a safe or forced failover's wait is over, and the answer comes when
// they are STOPPED and writable. It reports where each partition was
// left: the lag a forced failover gave up, or why a safe one refused.
func (p *Plugin) removeTopics(ctx context.Context, mirror string, names []string, mode int8, timeout time.Duration) ([]string, []FailoverPartition, error) {
	m := p.awaitMirrors(ctx, mirror).Mirrors[mirror]
	if m == nil {
		return nil, nil, fmt.Errorf("mirror %s does not exist: %w", mirror, ErrMirrorNotFound)
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("no topic named: %w", kerr.InvalidRequest)
	}
	topics, err := mirrorTopics(m, names)
	if err != nil {
		return nil, nil, err
	}
	if mode != FailoverNow {
		if err := p.awaitCaughtUp(ctx, mirror, topics, mode, timeout); err != nil {
			return nil, p.failoverReport(ctx, mirror, topics, p.remoteDetailsOnly(ctx, mirror)), err
		}
	}
	// What the other leaders know of the source side, before their
	// fetchers let go of it.
	before := p.remoteDetailsOnly(ctx, mirror)
	if err := p.setTopicStates(ctx, mirror, topics, func(s *pstate) error {
		s.State, s.Reason = Stopping, ""
		return nil
	}); err != nil {
		return nil, nil, err
	}
	err = p.waitStates(ctx, mirror, topics, Stopped)
	return topics, p.failoverReport(ctx, mirror, topics, before), err
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
		case len(broken) > 0 && mode == FailoverForce:
			return nil
		case len(broken) > 0:
			return fmt.Errorf("mirror %s: the source cannot confirm that nothing would be lost: %s (--force fails over anyway): %w",
				mirror, strings.Join(broken, "; "), ErrMirrorSourceUnavailable)
		case time.Now().After(deadline) && mode == FailoverForce:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("mirror %s: still behind the source after %v: %s (--force fails over anyway): %w",
				mirror, timeout, strings.Join(lagging, "; "), kerr.RequestTimedOut)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// caughtUp lists the partitions of topics that are behind a source end
// offset learned since start, and those whose source cannot tell. The
// partitions other brokers lead are as their leaders describe them.
func (p *Plugin) caughtUp(ctx context.Context, mirror string, topics []string, start time.Time) (lagging, broken []string) {
	img := p.Image()
	r := p.run(mirror)
	var remote map[tpKey]PartitionDetail
	for _, name := range topics {
		if t := img.Topics[name]; t != nil && slices.ContainsFunc(t.Partitions, func(pp raftmeta.Partition) bool { return pp.Leader != p.Host().NodeID() }) {
			remote, _ = p.remoteView(ctx, mirror)
			break
		}
	}
	for _, name := range topics {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			k := tpKey{name, int32(i)}
			id := fmt.Sprintf("%s-%d", name, i)
			var pt part
			found := false
			if r != nil {
				r.mu.Lock()
				if pp := r.parts[k]; pp != nil {
					pt, found = *pp, true
				}
				r.mu.Unlock()
			}
			leo := int64(-1)
			if ep := p.Host().Engine().Partition(t.ID, int32(i)); ep != nil {
				leo = ep.Offsets().LogEnd
			}
			fresh := found && pt.srcEnd >= 0 && !pt.srcEndAt.Before(start)
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
				case pd.State == Failed.String() || pd.State == Stopping.String() || pd.State == Stopped.String():
					broken = append(broken, fmt.Sprintf("%s is %s", id, pd.State))
				case pd.State == Paused.String() || pd.State == Pausing.String():
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
			case fresh && leo >= pt.srcEnd:
				// caught up
			case pt.state == Failed || !needsSource(pt.state):
				broken = append(broken, fmt.Sprintf("%s is %s", id, pt.state))
			case pt.state == Paused || pt.state == Pausing:
				broken = append(broken, fmt.Sprintf("%s is %s with lag %d (resume it first)", id, pt.state, max(0, pt.srcEnd-leo)))
			case !fresh && pt.trouble != "":
				broken = append(broken, fmt.Sprintf("%s: %s", id, pt.trouble))
			case !fresh:
				lagging = append(lagging, id+": no source end offset learned yet")
			default:
				lagging = append(lagging, fmt.Sprintf("%s: lag %d", id, pt.srcEnd-leo))
			}
		}
	}
	return lagging, broken
}

// failoverReport says where each partition of topics is: the source end
// offset last learned and when, the end of the mirrored data (where a
// stop left it), and the lag between them. remote is what the leaders of
// the partitions other brokers lead knew of their source side.
func (p *Plugin) failoverReport(ctx context.Context, mirror string, topics []string, remote map[tpKey]PartitionDetail) []FailoverPartition {
	img := p.Image()
	r := p.run(mirror)
	var out []FailoverPartition
	for _, name := range topics {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			fp := FailoverPartition{Topic: name, Partition: int32(i), SourceOffset: -1, DestinationOffset: -1, Lag: -1, LagMs: -1}
			if st, err := p.readState(ctx, pkey{mirror, name, int32(i)}, t.ID); err == nil && st.StopAt >= 0 {
				fp.DestinationOffset = st.StopAt
			} else if ep := p.Host().Engine().Partition(t.ID, int32(i)); ep != nil {
				fp.DestinationOffset = ep.Offsets().LogEnd
			}
			if rd, ok := remote[tpKey{name, int32(i)}]; ok && rd.SourceOffset >= 0 && fp.DestinationOffset >= 0 {
				fp.SourceOffset, fp.SourceOffsetTime = rd.SourceOffset, rd.SourceOffsetTime
				fp.Lag, fp.LagMs = max(0, rd.SourceOffset-fp.DestinationOffset), rd.LagMs
				if fp.Lag == 0 {
					fp.LagMs = 0
				}
			} else if r != nil {
				r.mu.Lock()
				if pt := r.parts[tpKey{name, int32(i)}]; pt != nil && pt.srcEnd >= 0 && fp.DestinationOffset >= 0 {
					fp.SourceOffset, fp.SourceOffsetTime = pt.srcEnd, pt.srcEndAt.UnixMilli()
					fp.Lag, fp.LagMs = max(0, pt.srcEnd-fp.DestinationOffset), pt.lagMs
					if fp.Lag == 0 {
						fp.LagMs = 0
					}
				}
				r.mu.Unlock()
			}
			out = append(out, fp)
		}
	}
	return out
}
