package replication

import (
	"bytes"
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

// TestFollowerRefusesBatchAboveEpochBound is the KAFKA-18723 check on the
// follower: of a fetch response, the batches up to the first one whose
// epoch is above the bound are appended, the rest are not; a follower of
// a mirror partition learns its next bound from the response's
// MirrorLeaderEpoch and then takes the batch.
func TestFollowerRefusesBatchAboveEpochBound(t *testing.T) {
	e, err := engine.Open(engine.Config{Dir: "db", FS: vfs.NewMem(), SyncWrites: true, RetentionCheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	f := &fetcher{m: &Manager{cfg: Config{Log: testLogger()}}, leader: 1}
	ctx := context.Background()
	handle := func(fp *followed, bound, mle int32, batches ...[]byte) {
		t.Helper()
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.HighWatermark, rp.RecordBatches = 0, bytes.Join(batches, nil)
		if mle >= 0 {
			SetMirrorLeaderEpoch(&rp.UnknownTags, mle)
		}
		if err := f.handle(ctx, fp, &rp, bound); err != nil {
			t.Fatal(err)
		}
	}
	values := func(p *engine.Partition) []string {
		t.Helper()
		res, err := p.Fetch(0, 1<<20, engine.ReadLogEnd)
		if err != nil {
			t.Fatal(err)
		}
		_, vals := recordbatch.Values(t, bytes.Join(res.Batches, nil))
		return vals
	}

	// An ordinary partition followed at leader epoch 5: a forged batch
	// of epoch 6 and what follows it stay out.
	p, err := e.Create("plain", engine.TopicID{1}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	fp := &followed{topic: "plain", key: partKey{engine.TopicID{1}, 0}, ep: p, leaderEpoch: 5, truncated: true, mirrorEpoch: -1}
	handle(fp, fp.leaderEpoch, -1, recordbatch.At(0, 4, "a"), recordbatch.At(1, 5, "b"), recordbatch.At(2, 6, "forged"), recordbatch.At(3, 5, "c"))
	if got := values(p); len(got) != 2 || got[0] != "a" || got[1] != "b" || p.Offsets().LogEnd != 2 || p.LastFetchedEpoch() != 5 {
		t.Fatalf("plain partition holds %q (log end %d, epoch %d), want a, b", got, p.Offsets().LogEnd, p.LastFetchedEpoch())
	}

	// A mirror partition followed at local epoch 2 whose leader holds
	// source epochs 7 and 12: the batch of epoch 12 waits for the
	// follower to learn it; the local epoch plays no part.
	m, err := e.Create("mirrored", engine.TopicID{2}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	mp := &followed{topic: "mirrored", key: partKey{engine.TopicID{2}, 0}, ep: m, leaderEpoch: 2, truncated: true, mirrorEpoch: 7}
	handle(mp, mp.mirrorEpoch, 12, recordbatch.At(0, 7, "x"), recordbatch.At(1, 12, "y"))
	if got := values(m); len(got) != 1 || got[0] != "x" || mp.mirrorEpoch != 12 {
		t.Fatalf("mirror partition holds %q, bound %d; want x, 12", got, mp.mirrorEpoch)
	}
	handle(mp, mp.mirrorEpoch, 12, recordbatch.At(1, 12, "y"), recordbatch.At(2, 13, "forged"))
	if got := values(m); len(got) != 2 || got[1] != "y" || m.LastFetchedEpoch() != 12 || m.Offsets().LogEnd != 2 {
		t.Fatalf("mirror partition holds %q (log end %d, epoch %d), want x, y", got, m.Offsets().LogEnd, m.LastFetchedEpoch())
	}
}

// TestEpochStartOfMirrorPartition: the leader of a mirror partition,
// whose batches keep their source's epochs, puts the start of its own
// epoch at its log end when elected, not at its moving log end, so that
// a follower can rejoin the ISR while the mirror copies.
func TestEpochStartOfMirrorPartition(t *testing.T) {
	e, err := engine.Open(engine.Config{Dir: "db", FS: vfs.NewMem(), SyncWrites: true, RetentionCheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, err := e.Create("mirrored", engine.TopicID{3}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	appendAt := func(base int64, epoch int32) {
		t.Helper()
		if _, err := p.Append(context.Background(), &engine.AppendRequest{Origin: engine.OriginReplica, Records: recordbatch.At(base, epoch, "v"), Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	appendAt(0, 7)
	appendAt(1, 7)
	if err := p.SetLeaderEpoch(25); err != nil {
		t.Fatal(err)
	}
	lp := &ledPartition{ep: p, electedEnd: p.Offsets().LogEnd}
	lp.part.LeaderEpoch = 25
	appendAt(2, 12) // the mirror fetcher copies on, in source epochs
	appendAt(3, 12)
	if got := lp.epochStart(); got != 2 {
		t.Fatalf("epoch 25 starts at %d, want 2 (the log end at the election)", got)
	}
}
