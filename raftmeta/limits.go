package raftmeta

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// PartitionLimits bound what creating topics and partitions may allocate.
// They are checked against the counts a request asks for before anything
// is allocated for them: a 39-byte CreateTopics asking for 2^31 partitions
// must cost nothing. They apply to every creation, internal and automatic
// ones included (as KIP-578 proposed), since each is one request away from
// a client.
type PartitionLimits struct {
	// PerRequest is the most partitions one CreateTopics or
	// CreatePartitions decision may add, over all its topics
	// (tandem.max.partitions.per.request). Apache Kafka's controller has
	// the same kind of bound, a fixed 10,000 records per operation.
	PerRequest int
	// PerBroker is the most partition replicas one broker may host
	// (max.broker.partitions, KIP-578's name).
	PerBroker int
}

// The default limits let a 50,000-partition topic be created in one
// request on a single broker, and leave the same again for the internal
// topics and later growth.
const (
	DefaultMaxPartitionsPerRequest = 50_000
	DefaultMaxBrokerPartitions     = 100_000
)

func (l PartitionLimits) withDefaults() PartitionLimits {
	if l.PerRequest <= 0 {
		l.PerRequest = DefaultMaxPartitionsPerRequest
	}
	if l.PerBroker <= 0 {
		l.PerBroker = DefaultMaxBrokerPartitions
	}
	return l
}

// CheckCount refuses a topic asking for more partitions than any one
// request may add, with INVALID_PARTITIONS: a handler calls it before it
// allocates anything per partition, and the controller calls it again.
func (l PartitionLimits) CheckCount(topic string, n int64) error {
	if per := int64(l.withDefaults().PerRequest); n > per {
		return fmt.Errorf("topic %q: %d partitions exceed the limit of %d per request (tandem.max.partitions.per.request): %w",
			topic, n, per, kerr.InvalidPartitions)
	}
	return nil
}

// partitionBudget counts one decision's new partitions against the limits,
// on top of the replicas each broker hosts in the image.
type partitionBudget struct {
	limits PartitionLimits
	added  int64           // partitions this decision added so far
	hosted map[int32]int64 // replicas per broker, this decision's included
	total  int64           // sum of hosted
}

func newPartitionBudget(img *metadata.Image, l PartitionLimits) *partitionBudget {
	b := &partitionBudget{limits: l.withDefaults(), hosted: make(map[int32]int64, len(img.Brokers))}
	for _, t := range img.Topics {
		for _, p := range t.Partitions {
			for _, r := range p.Replicas {
				b.hosted[r]++
			}
			b.total += int64(len(p.Replicas))
		}
	}
	return b
}

// check refuses n new partitions of rf replicas each, to be spread over
// brokers, before anything is allocated for them: a count no request may
// ask for is INVALID_PARTITIONS, one the cluster has no room for now is
// POLICY_VIOLATION.
func (b *partitionBudget) check(topic string, n int64, rf, brokers int) error {
	if err := b.limits.CheckCount(topic, n); err != nil {
		return err
	}
	if per := int64(b.limits.PerRequest); b.added+n > per {
		return fmt.Errorf("topic %q: %d more partitions would take this request past its limit of %d (tandem.max.partitions.per.request): %w",
			topic, n, per, kerr.PolicyViolation)
	}
	if room := int64(b.limits.PerBroker)*int64(brokers) - b.total; n*int64(rf) > room {
		return fmt.Errorf("topic %q: %d partition replicas do not fit: %d brokers may host %d each (max.broker.partitions) and %d room is left: %w",
			topic, n*int64(rf), brokers, b.limits.PerBroker, max(room, 0), kerr.PolicyViolation)
	}
	return nil
}

// add counts assignments (which check admitted) and refuses them when one
// broker would host more than its limit; nothing is counted then.
func (b *partitionBudget) add(topic string, assignments [][]int32) error {
	more := map[int32]int64{}
	var n int64
	for _, reps := range assignments {
		for _, r := range reps {
			more[r]++
		}
		n += int64(len(reps))
	}
	for r, m := range more {
		if b.hosted[r]+m > int64(b.limits.PerBroker) {
			return fmt.Errorf("topic %q: broker %d would host %d partition replicas, more than max.broker.partitions %d: %w",
				topic, r, b.hosted[r]+m, b.limits.PerBroker, kerr.PolicyViolation)
		}
	}
	for r, m := range more {
		b.hosted[r] += m
	}
	b.added += int64(len(assignments))
	b.total += n
	return nil
}
