package diverged

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// TestCopiedUpTo: an interrupted quarantine copy resumes after the
// batches the diverged partition already holds, recognized by CRC.
func TestCopiedUpTo(t *testing.T) {
	e, err := engine.Open(engine.Config{Dir: "/data", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	src, err := e.Create("t", engine.TopicID{1}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	dst, err := e.Create("t.diverged", engine.TopicID{2}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var stored [][]byte
	for i := range 5 {
		raw := coord.EncodeBatch(time.Now(), []coord.Record{{Value: []byte{byte(i)}}, {Value: []byte{byte(i), 1}}})
		if _, err := src.Append(ctx, &engine.AppendRequest{Topic: "t", TopicID: engine.TopicID{1}, Records: raw, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := eachBatch(src, 0, func(bs [][]byte) error { stored = append(stored, bs...); return nil }); err != nil || len(stored) != 5 {
		t.Fatalf("read back %d batches: %v", len(stored), err)
	}
	// Two batches copied before the crash (from offset 2: batches 1 and 2).
	for _, b := range stored[1:3] {
		if _, err := dst.Append(ctx, &engine.AppendRequest{Topic: "t.diverged", TopicID: engine.TopicID{2}, Origin: engine.OriginPluginControl, Records: b, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	if next, err := copiedUpTo(dst, 0, src, 2); err != nil || next != 6 {
		t.Fatalf("copiedUpTo = %d, %v; want 6 (after the second copied batch)", next, err)
	}
	if next, err := copiedUpTo(dst, 4, src, 2); err != nil || next != 2 {
		t.Fatalf("copiedUpTo from the end of the copies = %d, %v; want 2 (nothing copied yet)", next, err)
	}
}

// fakeManifest is a partition's manifest in a map, keyed by CopyStart as
// __mirror_state keys it. It records every write with the diverged
// partition's log end at the time, which tells whether an entry was
// written before or after the copy.
type fakeManifest struct {
	dp      *engine.Partition
	entries map[int64]mirrorstate.ManifestEntry
	writes  []manifestWrite
}

type manifestWrite struct {
	e      mirrorstate.ManifestEntry
	logEnd int64 // of the diverged partition when it was written
}

func newFakeManifest(dp *engine.Partition) *fakeManifest {
	return &fakeManifest{dp: dp, entries: map[int64]mirrorstate.ManifestEntry{}}
}

func (m *fakeManifest) Pending(context.Context) (*mirrorstate.ManifestEntry, error) {
	for _, k := range slices.Sorted(maps.Keys(m.entries)) {
		if e := m.entries[k]; !e.Done {
			return &e, nil
		}
	}
	return nil, nil
}

func (m *fakeManifest) Write(_ context.Context, e *mirrorstate.ManifestEntry) error {
	m.entries[e.CopyStart] = *e
	m.writes = append(m.writes, manifestWrite{*e, m.dp.Offsets().LogEnd})
	return nil
}

// quarantineLogs opens an engine on a temp dir with a mirror partition
// t-0 and its diverged partition t.diverged-0, and writes to t-0 one
// batch per element of records (that many records each), the first two
// in leader epoch 1, the next two in epoch 2, the rest in 3, the fourth
// stamped an hour later than the others; then one transaction marker
// (a control batch: no records). It returns the partitions and the
// batches of t-0 as stored.
func quarantineLogs(t *testing.T, records ...int) (ep, dp *engine.Partition, stored [][]byte) {
	t.Helper()
	e, err := engine.Open(engine.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if ep, err = e.Create("t", engine.TopicID{1}, 0, engine.DefaultLogConfig()); err != nil {
		t.Fatal(err)
	}
	if dp, err = e.Create("t"+mirrorstate.DivergedSuffix, engine.TopicID{2}, 0, engine.DefaultLogConfig()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	for i, n := range records {
		if err := ep.SetLeaderEpoch(int32(1 + min(i/2, 2))); err != nil {
			t.Fatal(err)
		}
		ts := now.Add(time.Duration(i) * time.Millisecond)
		if i == 3 {
			ts = now.Add(time.Hour)
		}
		var recs []coord.Record
		for j := range n {
			recs = append(recs, coord.Record{Key: []byte{byte(i)}, Value: []byte{byte(i), byte(j)}})
		}
		if _, err := ep.Append(ctx, &engine.AppendRequest{Topic: "t", TopicID: engine.TopicID{1}, Records: coord.EncodeBatch(ts, recs), Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ep.WriteTxnMarkers(ctx, engine.Marker{ProducerID: 7, ProducerEpoch: 1, Commit: true}); err != nil {
		t.Fatal(err)
	}
	stored = batchesOf(t, ep, 0)
	if len(stored) != len(records)+1 {
		t.Fatalf("t-0 holds %d batches, want %d", len(stored), len(records)+1)
	}
	return ep, dp, stored
}

// batchesOf returns the batches of p from offset on.
func batchesOf(t *testing.T, p *engine.Partition, offset int64) [][]byte {
	t.Helper()
	var out [][]byte
	for offset < p.Offsets().LogEnd {
		res, err := p.Fetch(offset, 1<<20, engine.ReadUncommitted)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Batches) == 0 {
			break
		}
		for _, b := range res.Batches {
			h, err := engine.ParseBatchHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			if h.LastOffset() >= offset {
				out = append(out, b)
			}
			offset = h.LastOffset() + 1
		}
	}
	return out
}

// copyBatches appends batches to the diverged partition dp as the
// quarantine does.
func copyBatches(t *testing.T, dp *engine.Partition, bs ...[]byte) {
	t.Helper()
	for _, b := range bs {
		if _, err := dp.Append(context.Background(), &engine.AppendRequest{Topic: dp.Topic(), TopicID: dp.TopicID(), Partition: dp.Index(),
			Origin: engine.OriginPluginControl, Records: b, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
}

// header reads a stored batch's header.
func header(t *testing.T, b []byte) engine.BatchHeader {
	t.Helper()
	h, err := engine.ParseBatchHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// sameCopies fails unless dp holds, from copyStart to its end, exactly
// the batches want, each byte for byte from the batch attributes on (the
// base offset and leader epoch are dp's own).
func sameCopies(t *testing.T, dp *engine.Partition, copyStart int64, want [][]byte) {
	t.Helper()
	got := batchesOf(t, dp, copyStart)
	if len(got) != len(want) {
		t.Fatalf("%s holds %d batches from %d, want %d", dp.Topic(), len(got), copyStart, len(want))
	}
	const attributes = 21 // base offset 8, length 4, leader epoch 4, magic 1, CRC 4
	for i := range want {
		if !bytes.Equal(got[i][attributes:], want[i][attributes:]) {
			t.Fatalf("copy %d differs from the batch at %d from the attributes on", i, header(t, want[i]).BaseOffset)
		}
	}
}

// rangeOf is the manifest's description of batches bs of t-0, as the
// quarantine must write it.
func rangeOf(t *testing.T, bs [][]byte) mirrorproto.DivergedRange {
	first, last := header(t, bs[0]), header(t, bs[len(bs)-1])
	r := mirrorproto.DivergedRange{Topic: "t", Partition: 0, FirstOffset: first.BaseOffset, FirstEpoch: first.PartitionLeaderEpoch, FirstTimestamp: first.BaseTimestamp,
		LastOffset: last.LastOffset(), LastEpoch: last.PartitionLeaderEpoch}
	for _, b := range bs {
		h := header(t, b)
		r.LastTimestamp = max(r.LastTimestamp, h.MaxTimestamp)
		if !h.Control() {
			r.Records += int64(h.NumRecords)
		}
	}
	return r
}

// A truncation into the middle of a batch quarantines that whole batch
// and every one after it, byte for byte, in one entry written before the
// copy and marked done after it, which says what was removed and where
// the copies are.
func TestQuarantine(t *testing.T) {
	ep, dp, stored := quarantineLogs(t, 1, 2, 3, 1, 2)
	copyBatches(t, dp, stored[0]) // an earlier copy: this one starts after it
	m := newFakeManifest(dp)
	opened := 0
	open := func() (plugin.Log, error) { opened++; return dp, nil }
	end := ep.Offsets().LogEnd
	e, err := Quarantine(context.Background(), ep, 2, "diverging epoch 2", m, open) // offset 2: the second record of batch 1
	if err != nil {
		t.Fatal(err)
	}
	removed := stored[1:]
	sameCopies(t, dp, 1, removed)
	want := mirrorstate.ManifestEntry{DivergedRange: rangeOf(t, removed), Done: true}
	want.CopyStart, want.CopyEnd, want.Cause = 1, dp.Offsets().LogEnd, "diverging epoch 2"
	if e == nil || e.TruncatedAt <= 0 {
		t.Fatalf("entry %+v, want one with the time of the truncation", e)
	}
	want.TruncatedAt = e.TruncatedAt
	if *e != want || m.entries[1] != want || len(m.entries) != 1 {
		t.Fatalf("entry %+v (manifest %+v), want %+v", *e, m.entries, want)
	}
	if want.Records != 8 || want.FirstOffset != 1 || want.FirstEpoch != 1 || want.LastEpoch != 3 || want.LastOffset != end-1 {
		t.Fatalf("the batches written are not the ones the test means: %+v", want.DivergedRange)
	}
	// Crash safety: the entry is written before the first copy, marked
	// done after the last.
	pending := want
	pending.CopyEnd, pending.Done = -1, false
	if len(m.writes) != 2 || m.writes[0] != (manifestWrite{pending, 1}) || m.writes[1] != (manifestWrite{want, want.CopyEnd}) {
		t.Fatalf("writes %+v, want the pending entry at log end 1, then the done one", m.writes)
	}
	if opened != 1 || ep.Offsets().LogEnd != end {
		t.Fatalf("opened %d times, t-0 ends at %d: want 1 and %d (the caller truncates)", opened, ep.Offsets().LogEnd, end)
	}
}

// A copy interrupted after any number of batches resumes after the last
// one copied: every removed batch ends up in the diverged partition
// once, under the entry written before the interruption.
func TestQuarantineResumes(t *testing.T) {
	for copied := 0; copied <= 3; copied++ {
		t.Run(fmt.Sprint(copied), func(t *testing.T) {
			ep, dp, stored := quarantineLogs(t, 2, 1, 3)
			copyBatches(t, dp, stored[0], stored[0]) // earlier copies
			removed := stored[1:]                    // to offset 2: batch 1 on, 3 batches
			pending := mirrorstate.ManifestEntry{DivergedRange: rangeOf(t, removed)}
			start := dp.Offsets().LogEnd
			pending.CopyStart, pending.CopyEnd, pending.TruncatedAt, pending.Cause = start, -1, 42, "last mirror epoch 1"
			m := newFakeManifest(dp)
			m.entries[pending.CopyStart] = pending
			copyBatches(t, dp, removed[:copied]...)
			e, err := Quarantine(context.Background(), ep, 2, "last mirror epoch 1", m, func() (plugin.Log, error) { return dp, nil })
			if err != nil {
				t.Fatal(err)
			}
			sameCopies(t, dp, start, removed)
			want := pending
			want.CopyEnd, want.Done = dp.Offsets().LogEnd, true
			if *e != want || len(m.writes) != 1 || m.writes[0].e != want || len(m.entries) != 1 {
				t.Fatalf("entry %+v, writes %+v; want only %+v", *e, m.writes, want)
			}
		})
	}
}

// A pending entry of another range (a copy interrupted before a new
// truncation, with the partition's log changed since) is closed as it
// is, with what it copied, before the new range gets its entry.
func TestQuarantineClosesOtherPending(t *testing.T) {
	ep, dp, stored := quarantineLogs(t, 1, 1, 1, 2)
	other := mirrorstate.ManifestEntry{DivergedRange: mirrorproto.DivergedRange{Topic: "t", FirstOffset: 100, LastOffset: 120, Records: 21}}
	other.CopyStart, other.CopyEnd, other.TruncatedAt, other.Cause = 0, -1, 42, "diverging epoch 5"
	m := newFakeManifest(dp)
	m.entries[0] = other
	copyBatches(t, dp, stored[0]) // part of the other range's copy
	e, err := Quarantine(context.Background(), ep, 3, "the source's log ends earlier", m, func() (plugin.Log, error) { return dp, nil })
	if err != nil {
		t.Fatal(err)
	}
	removed := stored[3:]
	sameCopies(t, dp, 1, removed)
	closed := other
	closed.CopyEnd, closed.Done = 1, true
	want := mirrorstate.ManifestEntry{DivergedRange: rangeOf(t, removed), Done: true}
	want.CopyStart, want.CopyEnd, want.TruncatedAt, want.Cause = 1, dp.Offsets().LogEnd, e.TruncatedAt, "the source's log ends earlier"
	pending := want
	pending.CopyEnd, pending.Done = -1, false
	if wantWrites := []manifestWrite{{closed, 1}, {pending, 1}, {want, want.CopyEnd}}; !slices.Equal(m.writes, wantWrites) {
		t.Fatalf("writes %+v, want %+v", m.writes, wantWrites)
	}
	if len(m.entries) != 2 || m.entries[0] != closed || m.entries[1] != want {
		t.Fatalf("manifest %+v", m.entries)
	}
}

// A truncation at or past the log end removes nothing: no diverged
// partition, no entry, even with another range's copy pending.
func TestQuarantineNothingRemoved(t *testing.T) {
	ep, dp, _ := quarantineLogs(t, 1, 2)
	m := newFakeManifest(dp)
	other := mirrorstate.ManifestEntry{DivergedRange: mirrorproto.DivergedRange{Topic: "t", FirstOffset: 100, CopyEnd: -1}}
	m.entries[0] = other
	for _, to := range []int64{ep.Offsets().LogEnd, ep.Offsets().LogEnd + 5} {
		e, err := Quarantine(context.Background(), ep, to, "x", m, func() (plugin.Log, error) {
			t.Fatal("opened the diverged partition")
			return nil, nil
		})
		if err != nil || e != nil || len(m.writes) != 0 || m.entries[0] != other || dp.Offsets().LogEnd != 0 {
			t.Fatalf("to %d: entry %+v, %v, writes %+v, diverged log end %d; want nothing", to, e, err, m.writes, dp.Offsets().LogEnd)
		}
	}
}

// Manifests gathered from several brokers merge into one, each entry
// once, oldest first.
func TestMerge(t *testing.T) {
	d := func(topic string, at, copyStart int64) mirrorproto.DivergedRange {
		return mirrorproto.DivergedRange{Topic: topic, CopyStart: copyStart, TruncatedAt: at}
	}
	got := Merge([]mirrorproto.DivergedRange{d("b", 30, 0), d("a", 10, 0)}, []mirrorproto.DivergedRange{d("a", 10, 0), d("a", 20, 5), d("b", 10, 7)})
	want := []mirrorproto.DivergedRange{d("a", 10, 0), d("b", 10, 7), d("a", 20, 5), d("b", 30, 0)}
	if !slices.Equal(got, want) {
		t.Fatalf("merged %+v, want %+v", got, want)
	}
	// Two copies of a partition truncated in the same millisecond are
	// two entries: CopyStart tells them apart.
	if got := Merge([]mirrorproto.DivergedRange{d("a", 10, 0)}, []mirrorproto.DivergedRange{d("a", 10, 3)}); len(got) != 2 {
		t.Fatalf("merged %+v, want both", got)
	}
}
