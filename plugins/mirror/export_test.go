package mirror

import "github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"

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
