package fetch

import "github.com/tandem-kafka/tandem/engine"

// trimmed is a partition's answer after the trims: the batches to apply,
// how many bytes of whole batches the answer had, and the header of the
// last batch kept.
type trimmed struct {
	keep  []byte
	whole int
	last  engine.BatchHeader
}

// trim keeps the leading whole record batches of an answer (it may end
// with a partial batch) whose partition leader epoch is at most epoch
// (all of them for epoch -1): a late answer must not append batches of
// an epoch newer than the one the fetch was sent for (KAFKA-18723). The
// batch headers are walked once.
func trim(b []byte, epoch int32) trimmed {
	var t trimmed
	above := false
	t.whole = engine.LeadingBatches(b, func(h engine.BatchHeader) bool {
		if !above && (epoch < 0 || h.PartitionLeaderEpoch <= epoch) {
			t.last = h
			t.keep = b[:len(t.keep)+int(h.Size())]
		} else {
			above = true
		}
		return true
	})
	return t
}
