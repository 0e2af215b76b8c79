package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/testing/fakeclock"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestAppendFetchOffsets(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	if err := p.SetLeaderEpoch(3); err != nil {
		t.Fatal(err)
	}
	wait := p.Wait()
	var sent [][]byte
	for i := range 5 {
		b := mkBatch(t, batchOpts{codec: int8(i % 5)}, kv("k", fmt.Sprint(i)), kv("k2", "v"))
		sent = append(sent, b)
		res := appendOK(t, p, OriginClient, b)
		if res.BaseOffset != int64(2*i) || res.LastOffset != int64(2*i+1) || res.LogAppendTime != -1 {
			t.Fatalf("append %d: %+v", i, res)
		}
	}
	select {
	case <-wait:
	default:
		t.Fatal("Wait channel not closed after the high watermark advanced")
	}
	if got, want := p.Offsets(), (Offsets{LogStart: 0, HighWatermark: 10, LastStable: 10, LogEnd: 10, LeaderEpoch: 3}); got != want {
		t.Fatalf("offsets %+v, want %+v", got, want)
	}
	got := fetchAll(t, p, 0)
	if len(got) != 5 {
		t.Fatalf("fetched %d batches", len(got))
	}
	for i, b := range got {
		want := bytes.Clone(sent[i])
		recordbatch.Batch(want).SetBaseOffset(int64(2 * i))
		recordbatch.Batch(want).SetLeaderEpoch(3)
		if !bytes.Equal(b, want) {
			t.Fatalf("batch %d differs from what was sent (apart from offset and epoch)", i)
		}
	}
	// A fetch inside a batch returns that whole batch.
	res, err := p.Fetch(3, 1, ReadUncommitted)
	if err != nil || len(res.Batches) != 1 || recordbatch.Batch(res.Batches[0]).BaseOffset() != 2 {
		t.Fatalf("fetch at 3: %v %d batches", err, len(res.Batches))
	}
	// maxBytes: whole batches only, at least one.
	res, _ = p.Fetch(0, len(got[0])+len(got[1])+len(got[2])-1, ReadUncommitted)
	if len(res.Batches) != 2 {
		t.Fatalf("fetch with room for 2.9 batches returned %d", len(res.Batches))
	}
	if res.HighWatermark != 10 || res.LastStableOffset != 10 || res.LogStartOffset != 0 {
		t.Fatalf("fetch result offsets %+v", res)
	}
	// At the end: empty; beyond: out of range.
	if res, err := p.Fetch(10, 100, ReadCommitted); err != nil || len(res.Batches) != 0 {
		t.Fatalf("fetch at the end: %v %d", err, len(res.Batches))
	}
	if _, err := p.Fetch(11, 100, ReadUncommitted); kcode(err) != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch past the end: %v", err)
	}

	// A fetch from inside a batch, without the cursor of the last read:
	// found through the index.
	if got2 := fetchAll(t, p, 3); len(got2) != 4 || !bytes.Equal(got2[0], got[1]) {
		t.Fatalf("read from offset 3 differs: %d batches", len(got2))
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	cfg := DefaultLogConfig()
	cfg.RetentionMs = 1234
	p := mkPart(t, e, cfg)
	p.SetLeaderEpoch(7)
	for i := range 3 {
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 9, seq: int32(i)}, kv("a", "b")))
	}
	want := fetchAll(t, p, 0)
	if _, err := e.Create("other", TopicID{9}, 4, DefaultLogConfig()); err != nil {
		t.Fatal(err)
	}
	e.Close()

	e = openTest(t, fs)
	stored := e.Stored()
	if len(stored) != 2 {
		t.Fatalf("stored: %+v", stored)
	}
	p = e.Partition(testID, 0)
	if p == nil || p.Config().RetentionMs != 1234 {
		t.Fatal("partition or its config lost")
	}
	if o := p.Offsets(); o.LogEnd != 3 || o.HighWatermark != 3 || o.LeaderEpoch != 7 {
		t.Fatalf("offsets after reopen %+v", o)
	}
	if got := fetchAll(t, p, 0); len(got) != 3 || !bytes.Equal(got[2], want[2]) {
		t.Fatal("data differs after reopen")
	}
	if ps := p.Producers(); len(ps) != 1 || ps[0].ProducerID != 9 || ps[0].LastSequence != 2 {
		t.Fatalf("producers after reopen %+v", ps)
	}
	if ep, end := p.EndOffsetForEpoch(7); ep != 7 || end != 3 {
		t.Fatalf("EndOffsetForEpoch(7) = %d, %d", ep, end)
	}
	if res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("x", "y"))); res.BaseOffset != 3 {
		t.Fatalf("append after reopen at %d", res.BaseOffset)
	}

	if err := e.Delete(testID, 0); err != nil {
		t.Fatal(err)
	}
	if e.Partition(testID, 0) != nil || len(e.Stored()) != 1 {
		t.Fatal("partition still there after Delete")
	}
	if err := appendErr(p, mkBatch(t, batchOpts{}, kv("x", "y"))); kcode(err) != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("append to a deleted partition: %v", err)
	}
	// Re-created: empty.
	p = mkPart(t, e, DefaultLogConfig())
	if o := p.Offsets(); o.LogEnd != 0 {
		t.Fatalf("re-created partition has offsets %+v", o)
	}
	if len(fetchAll(t, p, 0)) != 0 {
		t.Fatal("re-created partition has data")
	}
}

func TestEpochs(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	if ep, off := p.EndOffsetForEpoch(0); ep != 0 || off != 0 {
		t.Fatalf("empty log in epoch 0: %d %d", ep, off)
	}
	if ep, off := p.EndOffsetForEpoch(1); ep != -1 || off != -1 {
		t.Fatalf("empty log, epoch 1: %d %d", ep, off)
	}
	b := func() []byte { return mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2")) }
	p.SetLeaderEpoch(1)
	appendOK(t, p, OriginClient, b()) // 0-1 epoch 1
	appendOK(t, p, OriginClient, b()) // 2-3
	p.SetLeaderEpoch(4)
	appendOK(t, p, OriginClient, b()) // 4-5 epoch 4
	p.SetLeaderEpoch(6)               // no batch yet in epoch 6
	for _, tc := range []struct {
		req, ep int32
		end     int64
	}{
		{0, 0, 0}, // below the first epoch: Kafka answers the requested epoch and the first start
		{1, 1, 4},
		{2, 1, 4},
		{4, 4, 6},
		{5, 4, 6},
		{6, 6, 6},
		{7, -1, -1},
	} {
		if ep, end := p.EndOffsetForEpoch(tc.req); ep != tc.ep || end != tc.end {
			t.Errorf("EndOffsetForEpoch(%d) = %d, %d; want %d, %d", tc.req, ep, end, tc.ep, tc.end)
		}
	}
	for off, want := range map[int64]int32{0: 1, 3: 1, 4: 4, 5: 4, 6: 6} {
		if got := p.EpochAt(off); got != want {
			t.Errorf("EpochAt(%d) = %d, want %d", off, got, want)
		}
	}

	// Mirror appends keep their offsets and epochs; the cache follows them.
	m := mkPart(t, e, DefaultLogConfig())
	m, _ = e.Create("m", TopicID{7}, 0, DefaultLogConfig())
	m.SetLeaderEpoch(50)
	src := func(base int64, epoch int32) []byte {
		x := recordbatch.Batch(b())
		x.SetBaseOffset(base)
		x.SetLeaderEpoch(epoch)
		return x
	}
	appendOK(t, m, OriginCrossCluster, append(src(0, 2), src(2, 2)...))
	appendOK(t, m, OriginCrossCluster, src(4, 5))
	if _, err := m.Append(context.Background(), &AppendRequest{Origin: OriginCrossCluster, Records: src(3, 5)}); !errors.Is(err, ErrUnexpectedAppendOffset) {
		t.Fatalf("mirror append below the end: %v", err)
	}
	got := fetchAll(t, m, 0)
	if len(got) != 3 || recordbatch.Batch(got[2]).LeaderEpoch() != 5 || recordbatch.Batch(got[2]).BaseOffset() != 4 {
		t.Fatal("mirrored batches were not kept as sent")
	}
	if ep, end := m.EndOffsetForEpoch(3); ep != 2 || end != 4 {
		t.Fatalf("mirror EndOffsetForEpoch(3) = %d %d", ep, end)
	}
}

func TestTimestamps(t *testing.T) {
	clk := fakeclock.New(time.UnixMilli(1_700_000_000_123))
	e := openTest(t, nil, func(c *Config) { c.Now = clk.Now })
	p := mkPart(t, e, DefaultLogConfig())
	if _, _, _, ok := p.MaxTimestamp(); ok {
		t.Fatal("MaxTimestamp on an empty log")
	}
	p.SetLeaderEpoch(2)
	// Batch 0: offsets 0-2 at 1000, 1050, 1020; batch 1: 3-4 at 1010, 1030.
	for _, tc := range []struct {
		base  int64
		codec int8
		ds    []int64
	}{{1000, recordbatch.CodecNone, []int64{0, 50, 20}}, {1010, recordbatch.CodecZstd, []int64{0, 20}}} {
		var recs []rec
		for _, d := range tc.ds {
			recs = append(recs, rec{key: []byte("k"), val: []byte("v"), tsDelta: d})
		}
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{baseTs: tc.base, codec: tc.codec}, recs...))
	}
	for _, tc := range []struct {
		ts, off, got int64
		ok           bool
	}{
		{0, 0, 1000, true}, {1000, 0, 1000, true}, {1001, 1, 1050, true}, {1021, 1, 1050, true},
		{1050, 1, 1050, true}, {1051, -1, -1, false},
	} {
		off, ts, ep, ok := p.OffsetForTimestamp(tc.ts)
		if off != tc.off || ts != tc.got || ok != tc.ok || (ok && ep != 2) {
			t.Errorf("OffsetForTimestamp(%d) = %d %d %d %v, want %d %d", tc.ts, off, ts, ep, ok, tc.off, tc.got)
		}
	}
	if off, ts, ep, ok := p.MaxTimestamp(); off != 1 || ts != 1050 || ep != 2 || !ok {
		t.Fatalf("MaxTimestamp = %d %d %d %v", off, ts, ep, ok)
	}
	// Offset order, not timestamp order: offset 1 (1050) precedes offset 4 (1030).
	if off, _, _, _ := p.OffsetForTimestamp(1025); off != 1 {
		t.Fatalf("OffsetForTimestamp(1025) = %d", off)
	}

	// LogAppendTime: the broker stamps the batch and the CRC stays valid.
	cfg := DefaultLogConfig()
	cfg.LogAppendTime = true
	la, _ := e.Create("la", TopicID{3}, 0, cfg)
	now := clk.Now().UnixMilli()
	res := appendOK(t, la, OriginClient, mkBatch(t, batchOpts{baseTs: 5}, kv("a", "1")))
	if res.LogAppendTime != now {
		t.Fatalf("LogAppendTime %d, want the engine's clock's %d", res.LogAppendTime, now)
	}
	b := recordbatch.Batch(fetchAll(t, la, 0)[0])
	if !b.LogAppendTime() || b.MaxTimestamp() != res.LogAppendTime {
		t.Fatal("batch not stamped with LogAppendTime")
	}
	if _, err := recordbatch.Split(b); err != nil {
		t.Fatalf("stamped batch invalid: %v", err)
	}
	if off, ts, _, ok := la.OffsetForTimestamp(now); !ok || off != 0 || ts != res.LogAppendTime {
		t.Fatalf("OffsetForTimestamp on LogAppendTime: %d %d %v", off, ts, ok)
	}
}

func TestTruncate(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	b := func() []byte { return mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2")) }
	p.SetLeaderEpoch(1)
	appendOK(t, p, OriginClient, b()) // 0-1
	p.SetLeaderEpoch(2)
	appendOK(t, p, OriginClient, b()) // 2-3
	p.SetLeaderEpoch(3)
	appendOK(t, p, OriginClient, b()) // 4-5
	appendOK(t, p, OriginClient, b()) // 6-7
	if err := p.Truncate(4); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogEnd != 4 || o.HighWatermark != 4 {
		t.Fatalf("after truncate: %+v", o)
	}
	if ep, end := p.EndOffsetForEpoch(2); ep != 2 || end != 4 {
		t.Fatalf("epoch 2 after truncate: %d %d", ep, end)
	}
	if got := p.EpochAt(3); got != 2 {
		t.Fatalf("EpochAt(3) = %d", got)
	}
	// A straddled batch goes whole.
	if err := p.Truncate(3); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogEnd != 2 {
		t.Fatalf("after straddling truncate: %+v", o)
	}
	if res := appendOK(t, p, OriginClient, b()); res.BaseOffset != 2 {
		t.Fatalf("append after truncate at %d", res.BaseOffset)
	}
	e.Close()
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	if o := p.Offsets(); o.LogEnd != 4 {
		t.Fatalf("after reopen: %+v", o)
	}
	if ep, end := p.EndOffsetForEpoch(1); ep != 1 || end != 2 {
		t.Fatalf("epoch 1 after reopen: %d %d", ep, end)
	}
	if got := recordsOf(t, fetchAll(t, p, 0)); len(got) != 4 {
		t.Fatalf("records after truncate and reopen: %v", got)
	}
	// Below the log start: the log restarts there.
	if _, err := p.DeleteRecords(3); err != nil {
		t.Fatal(err)
	}
	if err := p.Truncate(1); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogEnd != 1 || o.LogStart != 1 || len(fetchAll(t, p, 1)) != 0 {
		t.Fatalf("after truncate below log start: %+v", o)
	}
}

func TestDeleteRecords(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	for range 4 {
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2"))) // 0-1 2-3 4-5 6-7
	}
	if _, err := p.DeleteRecords(9); kcode(err) != kerr.OffsetOutOfRange.Code {
		t.Fatalf("delete past the high watermark: %v", err)
	}
	if ls, err := p.DeleteRecords(3); err != nil || ls != 3 {
		t.Fatalf("DeleteRecords(3) = %d %v", ls, err)
	}
	if _, err := p.Fetch(2, 100, ReadUncommitted); kcode(err) != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch below the log start: %v", err)
	}
	res, err := p.Fetch(3, 1, ReadUncommitted)
	if err != nil || recordbatch.Batch(res.Batches[0]).BaseOffset() != 2 || res.LogStartOffset != 3 {
		t.Fatalf("fetch at the log start: %v %+v", err, res)
	}
	if ls, _ := p.DeleteRecords(1); ls != 3 {
		t.Fatalf("DeleteRecords backwards moved the start to %d", ls)
	}
	if ls, err := p.DeleteRecords(-1); err != nil || ls != 8 {
		t.Fatalf("DeleteRecords(-1) = %d %v", ls, err)
	}
	if o := p.Offsets(); o.LogStart != 8 || o.LogEnd != 8 {
		t.Fatalf("offsets %+v", o)
	}
	if res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("a", "1"))); res.BaseOffset != 8 || res.LogStartOffset != 8 {
		t.Fatalf("append after deleting everything: %+v", res)
	}
}

type rejectAll struct{ n int }

func (r *rejectAll) ValidateAppend(req *AppendRequest) error {
	r.n++
	if req.Origin == OriginClient && req.Topic == "ro" {
		return fmt.Errorf("read only: %w", kerr.InvalidTopicException)
	}
	return nil
}

type recorder struct {
	mu    sync.Mutex
	infos []AppendInfo
}

func (r *recorder) OnAppend(i AppendInfo) { r.mu.Lock(); r.infos = append(r.infos, i); r.mu.Unlock() }

func TestValidatorsAndObservers(t *testing.T) {
	v, o := &rejectAll{}, &recorder{}
	e := openTest(t, nil, func(c *Config) { c.Validators = []AppendValidator{v}; c.Observers = []AppendObserver{o} })
	p := mkPart(t, e, DefaultLogConfig())
	b := mkBatch(t, batchOpts{pid: 5, seq: 0}, kv("a", "1"), kv("b", "2"))
	_, err := p.Append(context.Background(), &AppendRequest{Topic: "ro", TopicID: testID, Origin: OriginClient, Records: b, Acks: -1})
	if kcode(err) != kerr.InvalidTopicException.Code {
		t.Fatalf("validator error not returned: %v", err)
	}
	if o := p.Offsets(); o.LogEnd != 0 || len(p.Producers()) != 0 || len(fetchAll(t, p, 0)) != 0 {
		t.Fatal("rejected append changed the partition")
	}
	if len(o.infos) != 0 {
		t.Fatal("observer called for a rejected append")
	}
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("x", "y")))
	res := appendOK(t, p, OriginClient, b) // the same producer batch: sequence 0 still accepted
	if res.BaseOffset != 1 || res.LastOffset != 2 {
		t.Fatalf("append %+v", res)
	}
	want := AppendInfo{Topic: "t", TopicID: testID, Partition: 0, Origin: OriginClient, BaseOffset: 1, LastOffset: 2,
		Batches: 1, Bytes: len(b), HighWatermark: 3}
	if len(o.infos) != 2 || o.infos[1] != want {
		t.Fatalf("observer got %+v, want %+v", o.infos, want)
	}
	if v.n != 3 {
		t.Fatalf("validator called %d times", v.n)
	}
}

func TestWaitWakesOnAppend(t *testing.T) {
	e := openTest(t, nil)
	p := mkPart(t, e, DefaultLogConfig())
	w := p.Wait()
	done := make(chan struct{})
	go func() {
		<-w
		res, err := p.Fetch(0, 100, ReadUncommitted)
		if err != nil || len(res.Batches) != 1 {
			t.Errorf("woken fetch: %v %d", err, len(res.Batches))
		}
		close(done)
	}()
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("a", "1")))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken")
	}
}

// TestLargeLogFromDisk writes a log over many segments, with batches
// large and small, and reads it all back from anywhere, before and after
// reopening.
func TestLargeLogFromDisk(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	cfg := DefaultLogConfig()
	cfg.SegmentBytes = 1 << 20
	p := mkPart(t, e, cfg)
	var want [][]byte
	val := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB
	for i := range 100 {
		v := val
		if i%3 == 1 {
			v = val[:100] // small batches between the large ones: the index is sparse
		}
		b := mkBatch(t, batchOpts{codec: int8(i % 4 / 3 * recordbatch.CodecZstd)}, rec{key: []byte(fmt.Sprint(i)), val: v})
		res := appendOK(t, p, OriginClient, b)
		recordbatch.Batch(b).SetBaseOffset(res.BaseOffset)
		recordbatch.Batch(b).SetLeaderEpoch(0)
		want = append(want, b)
	}
	if n := len(p.segs); n < 3 {
		t.Fatalf("%d segments, want several", n)
	}
	check := func() {
		t.Helper()
		got := fetchAll(t, p, 0)
		if len(got) != len(want) {
			t.Fatalf("%d batches, want %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("batch %d differs", i)
			}
		}
		// Every offset, without a cursor: a small maxBytes still returns
		// one whole batch, the one holding the offset.
		for o := int64(99); o >= 0; o -= 7 {
			p.mu.Lock()
			p.gen++ // forget the cursors
			p.mu.Unlock()
			if res, err := p.Fetch(o, 10, ReadUncommitted); err != nil || len(res.Batches) != 1 || !bytes.Equal(res.Batches[0], want[o]) {
				t.Fatalf("fetch at %d: %v", o, err)
			}
		}
	}
	check()
	e.Close()
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	check()
}

func TestNoSyncAndAcks0(t *testing.T) {
	for _, sync := range []bool{false, true} {
		e := openTest(t, nil, func(c *Config) { c.SyncWrites = sync })
		p := mkPart(t, e, DefaultLogConfig())
		for _, acks := range []int16{0, 1, -1} {
			res, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: mkBatch(t, batchOpts{}, kv("a", "1")), Acks: acks})
			if err != nil {
				t.Fatal(err)
			}
			if o := p.Offsets(); o.HighWatermark != res.LastOffset+1 {
				t.Fatalf("sync=%v acks=%d: high watermark %d after append at %d", sync, acks, o.HighWatermark, res.BaseOffset)
			}
		}
	}
}
