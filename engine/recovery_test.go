package engine

import (
	"bytes"
	"context"
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
	"github.com/tandem-kafka/tandem/testing/fakeclock"
	"github.com/twmb/franz-go/pkg/kerr"
)

// storedBatch is what a test expects at an offset: the batch as stored.
type storedBatch struct {
	part int32
	data []byte
}

// appendStored appends one batch with acks=all and returns it as the log
// stores it (offset and epoch set).
func appendStored(t *testing.T, p *Partition, b []byte) storedBatch {
	t.Helper()
	res := appendOK(t, p, OriginClient, b)
	b = bytes.Clone(b)
	recordbatch.Batch(b).SetBaseOffset(res.BaseOffset)
	recordbatch.Batch(b).SetLeaderEpoch(p.Offsets().LeaderEpoch)
	return storedBatch{p.part, b}
}

// checkLog reads a partition from its log start with a fresh cursor at
// every batch: each batch must be whole and valid, offsets increasing,
// and every batch of want at or above the log start (and below end)
// present byte for byte.
func checkLog(t *testing.T, label string, p *Partition, want map[int64]storedBatch, end int64) {
	t.Helper()
	o := p.Offsets()
	got := map[int64][]byte{}
	next := o.LogStart
	for _, b := range fetchAll(t, p, o.LogStart) {
		if _, err := recordbatch.Split(b); err != nil {
			t.Fatalf("%s: batch at %d: %v", label, recordbatch.Batch(b).BaseOffset(), err)
		}
		if recordbatch.Batch(b).LastOffset() < next {
			t.Fatalf("%s: batch at %d goes back below %d", label, recordbatch.Batch(b).BaseOffset(), next)
		}
		got[recordbatch.Batch(b).BaseOffset()] = b
		next = recordbatch.Batch(b).LastOffset() + 1
		// The same batch found from scratch (index, not cursor).
		p.mu.Lock()
		p.gen++
		p.mu.Unlock()
		res, err := p.Fetch(recordbatch.Batch(b).BaseOffset(), 1, ReadUncommitted)
		if err != nil || len(res.Batches) != 1 || !bytes.Equal(res.Batches[0], b) {
			t.Fatalf("%s: fetch at %d from the index: %v", label, recordbatch.Batch(b).BaseOffset(), err)
		}
	}
	if next != o.LogEnd && len(got) > 0 {
		t.Fatalf("%s: data ends at %d, log end %d", label, next, o.LogEnd)
	}
	for off, sb := range want {
		if sb.part != p.part || off < o.LogStart || off >= end {
			continue
		}
		if !bytes.Equal(got[off], sb.data) {
			t.Fatalf("%s: partition %d: acknowledged batch at %d lost or changed (log %+v)", label, p.part, off, o)
		}
	}
}

// TestCrashDuringRollRetentionCompaction takes crash images of the
// filesystem at the instants where the log's files and its metadata in
// Pebble disagree: a segment file created but not yet in any metadata, a
// retention pass committed but its files not deleted, a compacted segment
// marked, then renamed over the original but its index not yet replaced,
// a truncation committed but the files not yet cut, and before a group
// fsync. Each image must open to a log that holds every acknowledged
// batch (above the log start, below a truncation), reads from every
// offset, and keeps accepting appends.
func TestCrashDuringRollRetentionCompaction(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs)
	del := DefaultLogConfig()
	del.SegmentBytes = 1500
	del.RetentionMs = -1
	a, err := e.Create("del", testID, 0, del)
	if err != nil {
		t.Fatal(err)
	}
	cmp := DefaultLogConfig()
	cmp.Compact, cmp.Delete = true, false
	cmp.SegmentBytes = 20000 // batches of 4.5 KiB: an index entry each
	b, err := e.Create("cmp", testID, 1, cmp)
	if err != nil {
		t.Fatal(err)
	}
	type image struct {
		point string
		fs    *vfs.MemFS
		want  map[int64]storedBatch // partition 0
		keys  map[string]string     // partition 1: the latest value of each key
		end   int64                 // partition 0's log must end here (after a truncation)
	}
	var (
		images []image
		want   = map[int64]storedBatch{}
		keys   = map[string]string{}
		end    = int64(1 << 62)
		cutTo  int64
		rng    = rand.New(rand.NewPCG(3, 4))
	)
	// The hook runs on the test's goroutine and on the syncer's: a sync
	// round may end while retention or compaction runs.
	var mu sync.Mutex
	stopped := false
	e.testHook = func(point string) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if point == "truncate:committed" {
			end = cutTo // committed: the log must end there whatever happens next
		}
		for _, unsynced := range []int{0, 50} {
			cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced}
			if unsynced > 0 {
				cfg.RNG = rng
			}
			images = append(images, image{point, fs.CrashClone(cfg), maps(want), maps(keys), end})
		}
	}
	val := strings.Repeat("v", 200)
	for i := range 40 {
		sb := appendStored(t, a, mkBatch(t, batchOpts{pid: 7, seq: int32(i)}, kv(fmt.Sprint(i), val)))
		mu.Lock()
		want[recordbatch.Batch(sb.data).BaseOffset()] = sb
		mu.Unlock()
		k, v := fmt.Sprintf("k%d", i%5), fmt.Sprintf("%d-%s", i, strings.Repeat(val, 22))
		appendOK(t, b, OriginClient, mkBatch(t, batchOpts{baseTs: 1_000}, kv(k, v)))
		mu.Lock()
		keys[k] = v
		mu.Unlock()
	}
	a.SetConfig(func() LogConfig { c := del; c.RetentionBytes = 4000; return c }())
	if err := e.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	if o := a.Offsets(); o.LogStart == 0 {
		t.Fatal("retention deleted nothing")
	}
	if got := len(recordsOf(t, fetchAll(t, b, 0))); got >= 40 {
		t.Fatalf("compaction removed nothing: %d records", got)
	}
	mu.Lock()
	cutTo = a.Offsets().LogEnd - 3
	to := cutTo
	mu.Unlock()
	if err := a.Truncate(to); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	stopped = true
	mu.Unlock()
	points := map[string]int{}
	for _, im := range images {
		points[im.point]++
	}
	for _, p := range []string{"roll:created", "sync:before", "retention:committed", "compact:marked", "compact:renamed", "truncate:committed"} {
		if points[p] == 0 {
			t.Fatalf("no crash image at %s (have %v)", p, points)
		}
	}

	for i, im := range images {
		label := fmt.Sprintf("image %d (%s)", i, im.point)
		e2 := openTest(t, im.fs)
		pa, pb := e2.Partition(testID, 0), e2.Partition(testID, 1)
		checkLog(t, label, pa, im.want, im.end)
		if im.end < 1<<62 {
			if o := pa.Offsets(); o.LogEnd != im.end {
				t.Fatalf("%s: log end %d after a truncation to %d", label, o.LogEnd, im.end)
			}
		}
		checkLog(t, label, pb, nil, 0)
		latest := map[string]string{}
		recs := recordsOf(t, fetchAll(t, pb, 0))
		for _, off := range slices.Sorted(mapKeys(recs)) {
			k, v, _ := strings.Cut(recs[off], "=")
			latest[k] = v
		}
		// The latest value of each key is the one acknowledged last, or
		// one written after it (a crash may keep unacknowledged writes).
		seq := func(v string) int { n, _ := strconv.Atoi(strings.Split(v, "-")[0]); return n }
		for k, v := range im.keys {
			if got, ok := latest[k]; !ok || seq(got) < seq(v) {
				t.Fatalf("%s: key %s is %.10q, want %.10q or newer", label, k, got, v)
			}
		}
		// Appends continue where the log ends.
		for _, p := range []*Partition{pa, pb} {
			leo := p.Offsets().LogEnd
			if res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("after", "crash"))); res.BaseOffset != leo {
				t.Fatalf("%s: append after reopen at %d, log end was %d", label, res.BaseOffset, leo)
			}
		}
		e2.Close()
	}
}

func maps[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestRecoveryCutsTornTail writes garbage and a batch with a bad CRC after
// the last batch of a closed log, as a crash midway through writes can
// leave them: the next Open cuts them off, repairs nothing else, and
// appends continue at the old log end.
func TestRecoveryCutsTornTail(t *testing.T) {
	for _, tail := range []string{"garbage", "bad-crc", "half-batch"} {
		t.Run(tail, func(t *testing.T) {
			fs := vfs.NewMem()
			e := openTest(t, fs)
			p := mkPart(t, e, DefaultLogConfig())
			want := map[int64]storedBatch{}
			for i := range 10 {
				sb := appendStored(t, p, mkBatch(t, batchOpts{pid: 5, seq: int32(i)}, kv("k", fmt.Sprint(i))))
				want[recordbatch.Batch(sb.data).BaseOffset()] = sb
			}
			path := p.active().file.Path
			e.Close()

			extra := mkBatch(t, batchOpts{}, kv("torn", "tail"))
			recordbatch.Batch(extra).SetBaseOffset(10)
			switch tail {
			case "garbage":
				extra = bytes.Repeat([]byte{0xff, 0, 7}, 50)
			case "bad-crc":
				extra[len(extra)-1] ^= 1
			case "half-batch":
				extra = extra[:len(extra)/2]
			}
			f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := f.Stat()
			size := st.Size()
			if _, err := f.WriteAt(extra, size); err != nil {
				t.Fatal(err)
			}
			f.Close()

			e = openTest(t, fs)
			p = e.Partition(testID, 0)
			if o := p.Offsets(); o.LogEnd != 10 || o.HighWatermark != 10 {
				t.Fatalf("offsets after recovery %+v", o)
			}
			if st, err := fs.Stat(path); err != nil || st.Size() != size {
				t.Fatalf("segment is %d bytes after recovery, want %d (%v)", st.Size(), size, err)
			}
			checkLog(t, tail, p, want, 1<<62)
			// Producer state is that of the intact log: the next sequence
			// is accepted, a retry of the last batch is a duplicate.
			if res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 5, seq: 9}, kv("k", "9"))); !res.Duplicate || res.BaseOffset != 9 {
				t.Fatalf("retry of the last batch: %+v", res)
			}
			if res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 5, seq: 10}, kv("k", "10"))); res.BaseOffset != 10 {
				t.Fatalf("append after recovery: %+v", res)
			}
		})
	}
}

// TestRecoveryReplaysUnsyncedTail crashes a log written without fsync
// (acks=0): the images keep a random part of what was written. Each must
// recover to a prefix of the appends, with producer state matching it,
// and with whole, readable batches.
func TestRecoveryReplaysUnsyncedTail(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs)
	cfg := DefaultLogConfig()
	cfg.SegmentBytes = 4096
	p := mkPart(t, e, cfg)
	var sent [][]byte
	rng := rand.New(rand.NewPCG(5, 6))
	var images []*vfs.MemFS
	for i := range 200 {
		b := mkBatch(t, batchOpts{pid: 9, seq: int32(i), codec: int8(i % 5)}, kv(fmt.Sprint(i), strings.Repeat("x", i%90)))
		if _, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: b, Acks: 0}); err != nil {
			t.Fatal(err)
		}
		recordbatch.Batch(b).SetBaseOffset(int64(i))
		recordbatch.Batch(b).SetLeaderEpoch(0)
		sent = append(sent, b)
		if i%40 == 39 {
			images = append(images, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 70, RNG: rng}))
		}
	}
	for i, clone := range images {
		e2 := openTest(t, clone)
		p2 := e2.Partition(testID, 0)
		got := fetchAll(t, p2, 0)
		for j, b := range got {
			if !bytes.Equal(b, sent[j]) {
				t.Fatalf("image %d: batch %d differs from what was appended", i, j)
			}
		}
		n := int64(len(got))
		if o := p2.Offsets(); o.LogEnd != n {
			t.Fatalf("image %d: log end %d with %d batches", i, o.LogEnd, n)
		}
		// The producer continues after the recovered prefix.
		if res := appendOK(t, p2, OriginClient, mkBatch(t, batchOpts{pid: 9, seq: int32(n)}, kv("next", "1"))); res.BaseOffset != n || res.Duplicate {
			t.Fatalf("image %d: next sequence after %d recovered batches: %+v", i, n, res)
		}
		e2.Close()
	}
}

// TestRecoveryRebuildsMetadataAheadOfLog removes the last batches from a
// segment file behind the engine's back, as a disk losing writes that
// Pebble's metadata already describes would: the index, producer state
// and epochs are rebuilt from the segments, so that the lost batches are
// not taken for duplicates of their producers' retries.
func TestRecoveryRebuildsMetadataAheadOfLog(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	p.SetLeaderEpoch(3)
	var sizes []int64
	for i := range 6 {
		if i == 4 {
			p.SetLeaderEpoch(4)
		}
		sb := appendStored(t, p, mkBatch(t, batchOpts{pid: 11, seq: int32(i)}, kv("k", fmt.Sprint(i))))
		sizes = append(sizes, int64(len(sb.data)))
	}
	path := p.active().file.Path
	e.Close()
	keep := sizes[0] + sizes[1] + sizes[2]
	f, _ := fs.Open(path)
	buf := make([]byte, keep)
	f.ReadAt(buf, 0)
	f.Close()
	nf, _ := fs.Create(path, vfs.WriteCategoryUnspecified)
	nf.Write(buf)
	nf.Close()

	e = openTest(t, fs)
	p = e.Partition(testID, 0)
	if o := p.Offsets(); o.LogEnd != 3 {
		t.Fatalf("offsets %+v", o)
	}
	if ep, end := p.EndOffsetForEpoch(3); ep != 3 || end != 3 {
		// Epoch 4's entry went with its batches: the current epoch (4)
		// starts at the log end.
		t.Fatalf("EndOffsetForEpoch(3) = %d, %d", ep, end)
	}
	res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 11, seq: 3}, kv("k", "3")))
	if res.Duplicate || res.BaseOffset != 3 {
		t.Fatalf("retry of a lost batch: %+v", res)
	}
	checkLog(t, "rebuilt", p, nil, 0)
}

// TestSegmentRolls checks segment.bytes and segment.ms: a new segment file
// when the next append would pass the size, or when the active one is
// older than segment.ms (by the engine's clock); reads cross segments.
func TestSegmentRolls(t *testing.T) {
	fs := vfs.NewMem()
	clk := fakeclock.New(time.Unix(1_000_000, 0))
	e := openTest(t, fs, func(c *Config) { c.Now = clk.Now })
	cfg := DefaultLogConfig()
	cfg.SegmentBytes = 1000
	p := mkPart(t, e, cfg)
	one := mkBatch(t, batchOpts{}, kv("k", strings.Repeat("x", 300)))
	for range 10 {
		appendOK(t, p, OriginClient, one)
	}
	names, _ := fs.List(p.dir)
	per := 1000 / len(one)
	if want := (10 + per - 1) / per; len(p.segs) != want || len(names) != want {
		t.Fatalf("%d segments (%v), want %d of %d batches", len(p.segs), names, want, per)
	}
	for i, s := range p.segs {
		if s.size > cfg.SegmentBytes || s.base != int64(i*per) || fs.PathBase(s.file.Path) != segfile.Name(s.base) {
			t.Fatalf("segment %d: base %d, %d bytes, %s", i, s.base, s.size, s.file.Path)
		}
	}
	if n := len(fetchAll(t, p, 0)); n != 10 {
		t.Fatalf("%d batches read", n)
	}
	// A batch larger than segment.bytes gets a segment of its own.
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("big", strings.Repeat("y", 3000))))
	if s := p.active(); s.base != 10 || s.size < 3000 {
		t.Fatalf("large batch: active segment at %d with %d bytes", s.base, s.size)
	}
	cfg.SegmentBytes, cfg.SegmentMs = 1<<30, 1000
	p.SetConfig(cfg)
	clk.Advance(time.Second) // the active segment is segment.ms old
	appendOK(t, p, OriginClient, one)
	before := len(p.segs)
	clk.Advance(999 * time.Millisecond)
	appendOK(t, p, OriginClient, one)
	if len(p.segs) != before {
		t.Fatalf("rolled %d segments before segment.ms passed", len(p.segs)-before)
	}
	clk.Advance(time.Millisecond)
	appendOK(t, p, OriginClient, one)
	if len(p.segs) != before+1 {
		t.Fatalf("segment.ms did not roll: %d segments, had %d", len(p.segs), before)
	}
}

// TestOpenFilesBounded keeps more segments than MaxOpenFiles allows open:
// appends and reads reopen files as needed, and the open count stays at
// the bound when nothing holds them.
func TestOpenFilesBounded(t *testing.T) {
	e := openTest(t, nil, func(c *Config) { c.MaxOpenFiles = 3 })
	var parts []*Partition
	for i := range 8 {
		cfg := DefaultLogConfig()
		cfg.SegmentBytes = 200
		p, err := e.Create("many", testID, int32(i), cfg)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	for round := range 5 {
		for _, p := range parts {
			appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("k", fmt.Sprint(round))))
		}
	}
	for _, p := range parts {
		if got := recordsOf(t, fetchAll(t, p, 0)); len(got) != 5 || got[4] != "k=4" {
			t.Fatalf("partition %d: %v", p.part, got)
		}
	}
	if n := e.Metrics().OpenFiles; n > 3 {
		t.Fatalf("%d segment files open, bound 3", n)
	}
}

// TestFormatVersionRefused opens a store of a format newer than the
// engine's: the error names both versions, and nothing is changed.
func TestFormatVersionRefused(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	mkPart(t, e, DefaultLogConfig())
	if err := e.DB().Set(keys.Version, []byte{0, 0, 0, 9}, nil); err != nil {
		t.Fatal(err)
	}
	e.Close()
	_, err := Open(Config{Dir: "db", FS: fs, RetentionCheckInterval: -1})
	if err == nil || !strings.Contains(err.Error(), "format version 9") || !strings.Contains(err.Error(), fmt.Sprint(formatVersion)) {
		t.Fatalf("open of a newer format: %v", err)
	}
}

// TestSyncFailureRollsBack fails the fsync of an append: the append gets
// KAFKA_STORAGE_ERROR, its batch is gone from the log (whatever the page
// cache still holds), and the producer's retry is appended at the same
// offset.
func TestSyncFailureRollsBack(t *testing.T) {
	var fail atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSyncData && strings.Contains(op.Path, segmentsDir) && fail.CompareAndSwap(true, false) {
			return syscall.EIO
		}
		return nil
	}))
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 3, seq: 0}, kv("a", "1")))
	fail.Store(true)
	_, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: mkBatch(t, batchOpts{pid: 3, seq: 1}, kv("b", "2")), Acks: -1})
	if kcode(err) != kerr.KafkaStorageError.Code {
		t.Fatalf("append with a failed sync: %v", err)
	}
	if o := p.Offsets(); o.LogEnd != 1 || o.HighWatermark != 1 {
		t.Fatalf("offsets after the failed sync %+v", o)
	}
	res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 3, seq: 1}, kv("b", "2")))
	if res.Duplicate || res.BaseOffset != 1 {
		t.Fatalf("retry after the failed sync: %+v", res)
	}
	if got := recordsOf(t, fetchAll(t, p, 0)); len(got) != 2 || got[1] != "b=2" {
		t.Fatalf("log %v", got)
	}
}
