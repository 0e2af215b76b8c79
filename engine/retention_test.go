package engine

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/testing/fakeclock"
	"github.com/tandem-kafka/tandem/testing/wait"
)

func TestRetentionByTime(t *testing.T) {
	e := openTest(t, nil)
	cfg := DefaultLogConfig()
	cfg.RetentionMs = 60_000
	cfg.SegmentBytes = 1 // a segment per batch
	p := mkPart(t, e, cfg)
	now := time.UnixMilli(10_000_000)
	for i, age := range []time.Duration{5 * time.Minute, 3 * time.Minute, 30 * time.Second, 2 * time.Hour} {
		ts := now.Add(-age).UnixMilli()
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{baseTs: ts}, kv("k", fmt.Sprint(i))))
	}
	// Batch 2 (30s old) stops the pass even though batch 3 is older: Kafka
	// deletes a prefix of segments.
	if err := e.EnforceRetention(now); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != 2 || o.LogEnd != 4 {
		t.Fatalf("offsets %+v", o)
	}
	if got := fetchAll(t, p, 2); len(got) != 2 {
		t.Fatalf("%d batches left", len(got))
	}
	// Later everything goes, the active segment too (a new one is
	// rolled), and offsets continue.
	if err := e.EnforceRetention(now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != 4 || o.LogEnd != 4 {
		t.Fatalf("offsets %+v", o)
	}
	if got := fetchAll(t, p, 4); len(got) != 0 {
		t.Fatalf("%d batches left", len(got))
	}
	if res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("a", "b"))); res.BaseOffset != 4 || res.LogStartOffset != 4 {
		t.Fatalf("append after retention %+v", res)
	}
	if got := recordsOf(t, fetchAll(t, p, 4)); got[4] != "a=b" {
		t.Fatalf("after retention: %v", got)
	}
}

func TestRetentionByBytes(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	cfg := DefaultLogConfig()
	cfg.RetentionMs = -1
	cfg.SegmentBytes = 1 // a segment per batch
	p := mkPart(t, e, cfg)
	var size int64
	for i := range 10 {
		b := mkBatch(t, batchOpts{}, kv("k", fmt.Sprintf("%0100d", i)))
		size = int64(len(b))
		appendOK(t, p, OriginClient, b)
	}
	cfg.RetentionBytes = 3*size + size/2 // Kafka never goes below retention.bytes: 4 batches stay
	p.SetConfig(cfg)
	if err := e.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != 6 {
		t.Fatalf("log start %d, want 6", o.LogStart)
	}
	cfg.RetentionBytes = 3 * size
	p.SetConfig(cfg)
	if err := e.EnforceRetention(time.Now()); err != nil || p.Offsets().LogStart != 7 {
		t.Fatalf("log start %d (%v), want 7", p.Offsets().LogStart, err)
	}
	// Whole segments go: the files of batches 0 to 6 are deleted.
	if names, _ := fs.List(p.dir); len(names) != 3 {
		t.Fatalf("segment files after retention: %v, want those of batches 7 to 9", names)
	}
	e.Close()
	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	if got := recordsOf(t, fetchAll(t, p, 7)); len(got) != 3 || got[7] != fmt.Sprintf("k=%0100d", 7) {
		t.Fatalf("after reopen: %v", got)
	}
	if o := p.Offsets(); o.LogStart != 7 || o.LogEnd != 10 {
		t.Fatalf("after reopen: %+v", o)
	}
}

func TestCompaction(t *testing.T) {
	for _, codec := range []int8{recordbatch.CodecNone, recordbatch.CodecGzip, recordbatch.CodecSnappy, recordbatch.CodecLZ4, recordbatch.CodecZstd} {
		t.Run(fmt.Sprint("codec", codec), func(t *testing.T) {
			fs := vfs.NewMem()
			e := openTest(t, fs)
			cfg := DefaultLogConfig()
			cfg.Compact, cfg.Delete = true, false
			cfg.MinCompactionLag = time.Minute
			cfg.DeleteRetention = time.Hour
			cfg.SegmentBytes = 1 // a segment per batch; the active one is never compacted
			p := mkPart(t, e, cfg)
			now := time.UnixMilli(100_000_000)
			old := now.Add(-10 * time.Minute).UnixMilli()
			add := func(ts int64, recs ...rec) {
				appendOK(t, p, OriginClient, mkBatch(t, batchOpts{codec: codec, baseTs: ts}, recs...))
			}
			add(old, kv("a", "1"), kv("b", "1"), kv("c", "1")) // 0-2
			add(old, kv("a", "2"), kv("d", "1"))               // 3-4
			add(old, kv("b", ""), kv("d", "2"))                // 5-6: b deleted
			add(old, kv("e", "1"))                             // 7: all live
			add(now.UnixMilli(), kv("a", "3"))                 // 8: too recent
			add(now.UnixMilli(), kv("f", "1"))                 // 9: the active segment
			if err := e.EnforceRetention(now); err != nil {
				t.Fatal(err)
			}
			want := map[int64]string{2: "c=1", 5: "b=<nil>", 6: "d=2", 7: "e=1", 8: "a=3", 9: "f=1"}
			check := func(want map[int64]string) {
				t.Helper()
				got := recordsOf(t, fetchAll(t, p, 0))
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("after compaction\n got %v\nwant %v", got, want)
				}
			}
			check(want)
			// Batches keep their offsets and stay valid; batch 3-4 (all dead) is gone.
			bs := fetchAll(t, p, 0)
			if len(bs) != 5 || recordbatch.Batch(bs[0]).BaseOffset() != 0 || recordbatch.Batch(bs[0]).LastOffset() != 2 || recordbatch.Batch(bs[0]).Codec() != codec {
				t.Fatalf("rewritten batches: %d", len(bs))
			}
			for _, b := range bs {
				if _, err := recordbatch.Split(b); err != nil {
					t.Fatal(err)
				}
			}
			if o := p.Offsets(); o.LogStart != 0 || o.LogEnd != 10 {
				t.Fatalf("offsets %+v", o)
			}
			// The tombstone goes after delete.retention.
			if err := e.EnforceRetention(now.Add(2 * time.Hour)); err != nil {
				t.Fatal(err)
			}
			delete(want, 5)
			check(want)
			e.Close()
			e = openTest(t, fs)
			p = e.Partition(testID, 0)
			check(want)
			// Fetching at an offset that compaction removed starts at the next batch.
			res, err := p.Fetch(3, 1, ReadUncommitted)
			if err != nil || recordbatch.Batch(res.Batches[0]).BaseOffset() != 5 {
				t.Fatalf("fetch in a compacted gap: %v", err)
			}
		})
	}
}

// TestRetentionLoopAndMetrics: the background loop's passes delete by
// the engine's clock. It stands in the next century, so that a pass by
// the wall clock would keep the batches, stamped at the clock's now.
func TestRetentionLoopAndMetrics(t *testing.T) {
	clk := fakeclock.New(time.UnixMilli(5_000_000_000_000))
	e := openTest(t, nil, func(c *Config) { c.RetentionCheckInterval = 5 * time.Millisecond; c.Now = clk.Now })
	cfg := DefaultLogConfig()
	cfg.RetentionMs = 1000
	p := mkPart(t, e, cfg)
	n := 0
	for range 3 {
		b := mkBatch(t, batchOpts{baseTs: clk.Now().UnixMilli()}, kv("a", "1"))
		n += len(b)
		appendOK(t, p, OriginClient, b)
	}
	clk.Advance(1001 * time.Millisecond) // past retention.ms
	wait.Until(t, 5*time.Second, func() error {
		if o := p.Offsets(); o.LogStart != 3 {
			return fmt.Errorf("the retention loop has not run: %+v", o)
		}
		return nil
	})
	st := e.Metrics()
	if st.BytesWritten != int64(n) || st.Appends != 3 || st.Partitions != 1 || st.DiskUsage == 0 {
		t.Fatalf("metrics %+v", st)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := appendErr(p, mkBatch(t, batchOpts{}, kv("a", "1"))); err == nil {
		t.Fatal("append after Close succeeded")
	}
}

// TestCompactionWhileAppending runs compaction passes while producers
// append: the latest value of every key survives and reads stay valid.
func TestCompactionWhileAppending(t *testing.T) {
	e := openTest(t, nil)
	cfg := DefaultLogConfig()
	cfg.Compact, cfg.Delete = true, false
	cfg.SegmentBytes = 512 // a few batches per segment
	p := mkPart(t, e, cfg)
	const writers, perWriter = 3, 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			if err := e.EnforceRetention(time.Now().Add(time.Duration(i) * time.Hour)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				appendOK(t, p, OriginClient, mkBatch(t, batchOpts{codec: int8(i % 5)}, kv(fmt.Sprintf("w%d-k%d", w, i%7), fmt.Sprint(i))))
			}
		}()
	}
	wg.Wait()
	<-done
	if err := e.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	latest := map[string]string{}
	recs := recordsOf(t, fetchAll(t, p, 0))
	if len(recs) > writers*7+10 { // the active segment is not compacted
		t.Fatalf("%d records left after compaction", len(recs))
	}
	for _, kv := range recs {
		k, v, _ := strings.Cut(kv, "=")
		if old, ok := latest[k]; ok {
			a, _ := strconv.Atoi(old)
			b, _ := strconv.Atoi(v)
			v = fmt.Sprint(max(a, b))
		}
		latest[k] = v
	}
	for w := range writers {
		for k := range 7 {
			want := perWriter - 7 + (k-perWriter%7+7)%7
			if got := latest[fmt.Sprintf("w%d-k%d", w, k)]; got != fmt.Sprint(want) {
				t.Fatalf("w%d-k%d = %s, want %d", w, k, got, want)
			}
		}
	}
	if o := p.Offsets(); o.LogEnd != writers*perWriter {
		t.Fatalf("offsets %+v", o)
	}
}

// TestCompactionMapBounded compacts a log with more keys than the map of
// one pass may hold (an eighth of the memory budget): each pass maps what
// fits and cleans up to there, and passes together reach the same result
// as one unbounded pass.
func TestCompactionMapBounded(t *testing.T) {
	e := openTest(t, nil, func(c *Config) { c.MemoryBudget = 16 << 10 }) // a map of about 27 keys
	cfg := DefaultLogConfig()
	cfg.Compact, cfg.Delete = true, false
	cfg.SegmentBytes = 1 // a segment per batch
	cfg.MinCleanableDirtyRatio = 0.01
	p := mkPart(t, e, cfg)
	for round := range 2 {
		for k := range 50 {
			appendOK(t, p, OriginClient, mkBatch(t, batchOpts{baseTs: 1000}, kv(fmt.Sprintf("key-%04d", k), fmt.Sprint(round))))
		}
	}
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("active", "x")))
	passes := 0
	for ; passes < 10; passes++ {
		before := len(recordsOf(t, fetchAll(t, p, 0)))
		if err := e.EnforceRetention(time.Now()); err != nil {
			t.Fatal(err)
		}
		after := len(recordsOf(t, fetchAll(t, p, 0)))
		if passes == 0 && after != before {
			t.Fatalf("the first pass mapped only first-round keys, yet removed %d records", before-after)
		}
		if after == 51 {
			break
		}
	}
	if passes < 2 || passes == 10 {
		t.Fatalf("%d passes to compact 50 keys with a map of about 27", passes+1)
	}
	for off, kv := range recordsOf(t, fetchAll(t, p, 0)) {
		if k, v, _ := strings.Cut(kv, "="); k != "active" && (v != "1" || off < 50) {
			t.Fatalf("record %d %s survived compaction", off, kv)
		}
	}
}
