package fetch

import "github.com/tandem-kafka/tandem/engine"

// completeBatches returns the leading complete record batches of b: a
// fetch response may end with a partial batch.
func completeBatches(b []byte) []byte {
	return b[:leading(b, func(engine.BatchHeader) bool { return true })]
}

// notAbove keeps the leading batches whose partition leader epoch is at
// most epoch (all of them for epoch -1): a late response must not append
// batches of an epoch newer than the one the fetch was sent for
// (KAFKA-18723).
func notAbove(b []byte, epoch int32) []byte {
	if epoch < 0 {
		return b
	}
	return b[:leading(b, func(h engine.BatchHeader) bool { return h.PartitionLeaderEpoch <= epoch })]
}

// leading is how many bytes the leading whole magic-2 record batches of
// b that keep accepts take: it stops at the first batch keep refuses, or
// at the first bytes that are not a whole batch.
func leading(b []byte, keep func(engine.BatchHeader) bool) int {
	n := 0
	for {
		h, err := engine.ParseBatchHeader(b[n:])
		if err != nil || h.Size() > int64(len(b)-n) || !keep(h) {
			return n
		}
		n += int(h.Size())
	}
}
