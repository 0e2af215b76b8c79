package fetch

import "github.com/tandem-kafka/tandem/engine"

// completeBatches returns the leading complete record batches of b: a
// fetch response may end with a partial batch.
func completeBatches(b []byte) []byte {
	return b[:engine.LeadingBatches(b, func(engine.BatchHeader) bool { return true })]
}

// notAbove keeps the leading batches whose partition leader epoch is at
// most epoch (all of them for epoch -1): a late response must not append
// batches of an epoch newer than the one the fetch was sent for
// (KAFKA-18723).
func notAbove(b []byte, epoch int32) []byte {
	if epoch < 0 {
		return b
	}
	return b[:engine.LeadingBatches(b, func(h engine.BatchHeader) bool { return h.PartitionLeaderEpoch <= epoch })]
}
