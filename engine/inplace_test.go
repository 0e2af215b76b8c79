package engine

import (
	"bytes"
	"slices"
	"testing"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
)

// TestCopiedBatchesWrittenInPlace: batches a mirror copies are written
// from the caller's bytes without a copy, and the log keeps none of
// them: the caller may reuse its buffer as soon as Append returns (the
// mirror's fetcher reads its next answer into it).
func TestCopiedBatchesWrittenInPlace(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	a := mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2"))
	b := mkBatch(t, batchOpts{}, kv("c", "3"))
	recordbatch.Batch(b).SetBaseOffset(2)
	records := slices.Concat(a, b)
	want := slices.Clone(records)
	appendOK(t, p, OriginCrossCluster, records)
	clear(records) // the caller reuses its buffer
	got := bytes.Join(fetchAll(t, p, 0), nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("the log holds %d bytes that are not the %d appended", len(got), len(want))
	}
}
