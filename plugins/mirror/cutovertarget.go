package mirror

import (
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/cutover"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// A consistent failover (issue 30) stops a set of topics at one cut:
// deciding it, truncating to it and clamping the groups to it is the
// cutover package's (plugins/mirror/cutover). Here is the run's side of
// it: the stage over the run's state store, and cutoverTarget, which is
// what the stage needs of the run.

// cutover is the run's consistent failovers.
func (r *mirrorRun) cutover() cutover.Stage {
	return cutover.Stage{Mirror: r.name, Store: r.p.store, Log: r.log, Target: cutoverTarget{r}}
}

// applyCut is STOPPING's consistent-cut step (cutover.Stage.Apply):
// pt's truncation to its cut quarantines what it removes, and an error
// of it fails the partition.
func (r *mirrorRun) applyCut(pt *ledPartition, ep plugin.Log, st mirrorstate.PartitionState) (mirrorstate.PartitionState, bool, error) {
	return r.cutover().Apply(r.ctx, pt.topicPartition, pt.id, st, func(to int64, cause string) error {
		if err := r.truncate(pt, ep, to, cause); err != nil {
			return r.fail(pt, err)
		}
		return nil
	})
}

// cutoverTarget is the run as the cutover stage sees it.
type cutoverTarget struct{ r *mirrorRun }

var _ cutover.Target = cutoverTarget{}

// Image implements cutover.Target.
func (t cutoverTarget) Image() *metadata.Image { return t.r.p.Image() }

// Led implements cutover.Target.
func (t cutoverTarget) Led(leader int32, id uuid.UUID, partition int32) plugin.Log {
	host := t.r.p.Host()
	if leader != host.NodeID() {
		return nil
	}
	return host.Partition(id, partition)
}

// Reached implements cutover.Target with the plugin's stop hook.
func (t cutoverTarget) Reached(tp topicPartition, step string) {
	t.r.p.stopHook(tp.Topic, tp.Partition, StopStep(step))
}

// Decided implements cutover.Target: the run's loops look at their
// partitions again.
func (t cutoverTarget) Decided() { t.r.poke() }
