package mirror

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/apply"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// What a fetcher's answer does to a partition (the truncation on a
// diverging epoch or a log start past our end, the append, the end
// offsets learned) is the apply package's (plugins/mirror/apply). Here
// is the run's side of it: the stage over the run's mutexes, and
// applyTarget, which is what the stage needs of the run. fetchTarget's
// Apply calls in here (fetchtarget.go).

// applier is the run's apply stage.
func (r *mirrorRun) applier() apply.Stage[*ledPartition] {
	t := applyTarget{r}
	return apply.Stage[*ledPartition]{Mu: &r.mu, ApplyMu: &r.applyMu, Log: r.log, Target: t, Source: t}
}

// applyTarget is the run as the apply stage sees it.
type applyTarget struct{ r *mirrorRun }

var (
	_ apply.Target[*ledPartition] = applyTarget{}
	_ apply.Source[*ledPartition] = applyTarget{}
	_ apply.Partition             = (*ledPartition)(nil)
)

// State implements apply.Target.
func (t applyTarget) State(pt *ledPartition) mirrorstate.State {
	st, _ := t.r.state(pt.topicPartition)
	return st
}

// Log implements apply.Target.
func (t applyTarget) Log(pt *ledPartition) (plugin.Log, error) { return t.r.partition(pt) }

// Truncate implements apply.Target with the divergence quarantine.
func (t applyTarget) Truncate(pt *ledPartition, ep plugin.Log, to int64, cause string) error {
	return t.r.truncate(pt, ep, to, cause)
}

// Fail implements apply.Target.
func (t applyTarget) Fail(pt *ledPartition, err error) error { return t.r.fail(pt, err) }

// Fence implements apply.Target: the control loop bumps the epoch.
func (t applyTarget) Fence(pt *ledPartition, batches []byte) error {
	t.r.scheduleBump(pt.Topic, pt.Partition, maxBatchEpoch(batches))
	return t.r.setState(pt, mirrorstate.EpochFencing, "")
}

// Troubled implements apply.Target: the source's metadata is asked
// again.
func (t applyTarget) Troubled(pt *ledPartition, err error) {
	t.r.setTrouble([]*ledPartition{pt}, err)
	t.r.markStale()
}

// Moved implements apply.Target.
func (t applyTarget) Moved() { t.r.changed() }

// ListOffsets implements apply.Source.
func (t applyTarget) ListOffsets(broker int32, ts int64, parts []*ledPartition) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	return t.r.listOffsets(broker, ts, parts)
}

// Name implements apply.Partition.
func (pt *ledPartition) Name() (topicPartition, uuid.UUID) { return pt.topicPartition, pt.id }

// Progress implements apply.Partition; r.mu is held.
func (pt *ledPartition) Progress() *apply.Progress { return &pt.progress }

// Leader implements apply.Partition; r.mu is held.
func (pt *ledPartition) Leader() int32 { return pt.leader }

// ClearTrouble implements apply.Partition; r.mu is held.
func (pt *ledPartition) ClearTrouble() { pt.trouble = "" }
