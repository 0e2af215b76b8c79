package mirror

import (
	"time"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// What every view of a mirror may claim is mirrorview's, once, so that
// no two views disagree; here are the rules that read a run's own
// partitions (r.mu held).

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
	return pt.progress.SrcEnd >= 0 && trouble == "" && r.failed == "" && now.Sub(pt.endAt()) < r.p.sourceStaleAfter()
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
