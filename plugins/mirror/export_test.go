package mirror

import (
	"fmt"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// OnStatesRead sets the control loop's hook between its read of
// persisted states and their taking in: f is called for each partition
// read, with the state read and a func that gives the state the run holds
// now. restore unsets it; call it after the brokers closed.
func OnStatesRead(f func(topic string, partition int32, read mirrorstate.State, held func() mirrorstate.State)) (restore func()) {
	statesRead = func(r *mirrorRun, states map[topicPartition]mirrorstate.PartitionState) {
		for k, st := range states {
			f(k.Topic, k.Partition, st.State, func() mirrorstate.State {
				s, _ := r.state(k)
				return s
			})
		}
	}
	return func() { statesRead = nil }
}

// OnPrepare sets the source loop's hook before it prepares partitions:
// f is called for each.
func OnPrepare(f func(topic string, partition int32)) (restore func()) {
	beforePrepare = func(_ *mirrorRun, parts []*ledPartition) {
		for _, pt := range parts {
			f(pt.Topic, pt.Partition)
		}
	}
	return func() { beforePrepare = nil }
}

// FailStatesRead sets the control loop's hook in its read of persisted
// states, after the local __mirror_state shards and before other
// brokers': f is called with the partitions wanted ("topic-partition"),
// and an error it returns fails the read there, as a coordinator that
// does not answer does. restore unsets it; call it after the brokers
// closed.
func FailStatesRead(f func(wanted []string) error) (restore func()) {
	statesFail = func(r *mirrorRun) error {
		var wanted []string
		for k := range r.ctl.want {
			wanted = append(wanted, fmt.Sprintf("%s-%d", k.Topic, k.Partition))
		}
		return f(wanted)
	}
	return func() { statesFail = nil }
}

// RewriteStatesRead sets the control loop's hook between its read of
// persisted states and its start of the new ones: f may change each
// state read, as a read that missed a write would. restore unsets it;
// call it after the brokers closed.
func RewriteStatesRead(f func(topic string, partition int32, st *mirrorstate.PartitionState)) (restore func()) {
	statesRewrite = func(states map[topicPartition]mirrorstate.PartitionState) {
		for k, st := range states {
			f(k.Topic, k.Partition, &st)
			states[k] = st
		}
	}
	return func() { statesRewrite = nil }
}

// OnTruncated sets the source loop's hook between a partition's LME
// truncation and its write of MIRRORING. restore unsets it; call it
// after the brokers closed.
func OnTruncated(f func(topic string, partition int32)) (restore func()) {
	afterTruncate = func(pt *ledPartition) { f(pt.Topic, pt.Partition) }
	return func() { afterTruncate = nil }
}
