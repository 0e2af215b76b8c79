package mirror

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// What every view of a mirror may claim (DescribeMirrors, and through it
// tandem mirrors --describe and --json, the console, a failover's
// report; /healthz and /metrics from the same state): the rules live
// here, once, so that no two views disagree.

// sourceStaleAfter is how long a source end offset stays the source's
// end "now": a fetcher that works learns it with every fetch, at least
// every replica.fetch.wait.max.ms, and one failed fetch waits
// mirror.replica.fetch.backoff.ms before the next; twice both, and never
// less than five seconds, so that a loaded machine does not flap.
// Older than that, the source may have acknowledged records the
// destination never heard of: the lag is a lower bound.
func (p *Plugin) sourceStaleAfter() time.Duration {
	return max(5*time.Second, 2*(p.cfg.FetchMaxWait+p.cfg.Backoff))
}

// sourceCurrent reports whether the source end offset pt holds is the
// source's end now: learned within sourceStaleAfter, with the source
// answering (no trouble with the partition, no failure of the mirror's
// source). r.mu is held.
func (r *mirrorRun) sourceCurrent(pt *ledPartition, now time.Time) bool {
	trouble, _ := pt.troubleNow()
	return pt.srcEnd >= 0 && trouble == "" && r.failed == "" && now.Sub(pt.endAt()) < r.p.sourceStaleAfter()
}

// cutOff reports whether a partition that should be copied now cannot
// reach its source: the mirror's source fails it (unreachable, refusing
// its credentials, another cluster) or the partition's own source side
// does (its source broker unreachable, no leader there: pt.cutOff). A
// partition that cannot be copied for a reason of this cluster (not
// hosted here yet, say) keeps its state and says why. Every view shows such
// a partition FAILED, with the reason, until the source answers again:
// one model of "cannot reach its source" for --describe, --json, the
// console, /metrics (tandem_mirror_partitions{state="FAILED"}) and the
// alert on it. The state kept by the coordinator does not change (the
// mirror resumes by itself); a paused partition stays PAUSED (nothing
// is copied either way). r.mu is held.
func (r *mirrorRun) cutOff(pt *ledPartition) bool {
	switch pt.state {
	case mirrorstate.Preparing, mirrorstate.Mirroring, mirrorstate.EpochFencing:
		return r.failed != "" || pt.cutOffNow()
	}
	return false
}

// shownState is the state every view shows of a partition this broker
// leads: FAILED while it is cut off from its source, else its own.
// r.mu is held.
func (r *mirrorRun) shownState(pt *ledPartition) mirrorstate.State {
	if r.cutOff(pt) {
		return mirrorstate.Failed
	}
	return pt.state
}

// cutOffState is the same rule for a state by name, when the mirror's
// source fails it: what a broker that does not lead the partition shows.
func cutOffState(name string) bool {
	switch name {
	case mirrorstate.Preparing.String(), mirrorstate.Mirroring.String(), mirrorstate.EpochFencing.String():
		return true
	}
	return false
}

// staleReason is the REASON of a partition whose source end offset is
// not current though nothing failed yet (a source that stopped
// answering, before its requests time out).
func staleReason(at time.Time) string {
	return "the source's end offset was last learned at " + at.UTC().Format(time.RFC3339)
}

// minISR is min.insync.replicas for partition i of t as its leader
// checks acks=all: the topic's, else the leader's dynamic broker
// config, the cluster's, this broker's static property.
func (p *Plugin) minISR(img *metadata.Image, t *metadata.Topic, leader int32) int {
	const key = "min.insync.replicas"
	v, ok := t.Configs[key]
	if !ok {
		v, ok = img.NodeConfigs[leader][key]
	}
	if !ok {
		v, ok = img.BrokerConfigs[key]
	}
	if n, err := strconv.Atoi(v); ok && err == nil && n > 0 {
		return n
	}
	return max(1, p.cfg.MinISR)
}

// destinationIssue says why partition i of t on this (the destination)
// cluster does not hold its copy safely: it has no leader, so nothing is
// copied and nothing can be read, or its ISR is below
// min.insync.replicas, so one more failure may lose what was copied and
// a failover's acks=all producers would be refused. "" when neither.
func (p *Plugin) destinationIssue(img *metadata.Image, t *metadata.Topic, i int32) string {
	if int(i) >= len(t.Partitions) {
		return ""
	}
	part := t.Partitions[i]
	if part.Leader < 0 {
		return fmt.Sprintf("destination partition has no leader (replicas %v)", part.Replicas)
	}
	if n := p.minISR(img, t, part.Leader); len(part.ISR) < n {
		return fmt.Sprintf("destination ISR %v is below min.insync.replicas %d (replicas %v)", part.ISR, n, part.Replicas)
	}
	return ""
}

// Destination health, as tandem_mirror_destination_partitions labels it.
const (
	healthOK          = "ok"
	healthNoLeader    = "no_leader"
	healthUnderMinISR = "under_min_isr"
)

// destinationHealth is destinationIssue as a label.
func (p *Plugin) destinationHealth(img *metadata.Image, t *metadata.Topic, i int32) string {
	part := t.Partitions[i]
	switch {
	case part.Leader < 0:
		return healthNoLeader
	case len(part.ISR) < p.minISR(img, t, part.Leader):
		return healthUnderMinISR
	}
	return healthOK
}

// mirrorState is a mirror's state as every view shows it: STOPPED once
// every partition failed over (its source no longer matters), FAILED
// while the source fails it (unreachable, another cluster), PAUSED when
// every partition still mirrored is paused, else MIRRORING. A mirror
// without partitions is MIRRORING, or FAILED.
func mirrorState(failed bool, parts []mirrorproto.PartitionDetail) string {
	live, paused := 0, 0
	for _, pd := range parts {
		switch pd.State {
		case mirrorstate.Stopped.String():
			continue
		case mirrorstate.Paused.String():
			paused++
		}
		live++
	}
	switch {
	case len(parts) > 0 && live == 0:
		return mirrorstate.Stopped.String()
	case failed:
		return mirrorstate.Failed.String()
	case live > 0 && paused == live:
		return mirrorstate.Paused.String()
	}
	return mirrorstate.Mirroring.String()
}

// stateNeedsSource is needsSource for a state's name.
func stateNeedsSource(name string) bool {
	for s := mirrorstate.Preparing; s <= mirrorstate.Failed; s++ {
		if s.String() == name {
			return needsSource(s)
		}
	}
	return false
}

// destinationCounts counts the partitions of a mirror's topics (failed
// over ones included, as DescribeMirrors lists them) by
// destinationHealth.
func (p *Plugin) destinationCounts(mirror string) map[string]int {
	out := map[string]int{}
	img := p.Image()
	if img == nil || img.Mirrors[mirror] == nil {
		return out
	}
	for name := range img.Mirrors[mirror].Topics {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			out[p.destinationHealth(img, t, int32(i))]++
		}
	}
	return out
}
