package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
	"github.com/tandem-kafka/tandem/testing/fakeclock"
)

// TestDataDriven runs the files in testdata/log: one partition of a real
// engine (Pebble and segment files in a temporary directory) appended
// to, truncated, cut by retention and reopened, its log printed after.
// The engine's clock (Config.Now) is a fake one, which starts at Unix
// time 0 and moves only when told. The commands are:
//
//	open [segment-bytes=N] [segment-ms=N] [log-append-time]
//	    opens the engine and creates the partition (retention off).
//	reopen
//	    closes the engine and opens it on the same directory: recovery.
//	config [segment-bytes=N] [segment-ms=N] [retention-ms=N] [retention-bytes=N]
//	    changes the partition's config.
//	tick ms=N
//	    moves the clock forward.
//	append [records=N] [batches=K] [ts=MS] [epoch=E] [origin=replica base=B]
//	    appends K batches (default 1) of N records (default 1) in one
//	    request; the records' timestamps are MS (default 1000), MS+1...
//	    epoch=E sets the leader epoch first; origin=replica appends copies
//	    at base offset B, stamped with epoch E, as a follower does.
//	    Prints the offsets appended, or the error.
//	truncate to=N / start-over at=N / delete-records before=N
//	    Truncate, StartOver, DeleteRecords.
//	retain [bytes=N] [ms=N] [now=MS]
//	    sets retention.bytes and retention.ms (-1 when not given) and runs
//	    a retention pass, with the clock moved to MS first if given.
//	hwm to=N
//	    makes the partition replicated and lets its high watermark go
//	    up to N.
//	log
//	    prints the offsets, the segments (offsets, bytes, largest
//	    timestamp, when rolled), the epoch cache and every batch up to
//	    the log end.
//	epoch-end epoch=E / offset-for-ts ts=MS
//	    EndOffsetForEpoch, OffsetForTimestamp.
//
// go test ./engine -run TestDataDriven -rewrite rewrites the expected
// output.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/log", func(t *testing.T, path string) {
		h := &logHarness{dir: t.TempDir(), clock: fakeclock.New(time.UnixMilli(0))}
		t.Cleanup(func() {
			if h.e != nil {
				h.e.Close()
			}
		})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type logHarness struct {
	dir   string
	clock *fakeclock.Clock
	e     *Engine
	p     *Partition
}

func (h *logHarness) run(t *testing.T, d *datadriven.TestData) string {
	if h.p == nil && d.Cmd != "open" {
		d.Fatalf(t, "%s before open", d.Cmd)
	}
	switch d.Cmd {
	case "open":
		return h.open(t, d)
	case "reopen":
		if err := h.e.Close(); err != nil {
			return "error: " + err.Error()
		}
		h.e, h.p = nil, nil
		return h.open(t, d)
	case "config":
		cfg := h.p.Config()
		configArgs(t, d, &cfg)
		h.p.SetConfig(cfg)
		return "ok"
	case "append":
		return h.append(t, d)
	case "truncate", "start-over", "delete-records":
		return h.cut(t, d)
	case "tick":
		var ms int64
		d.ScanArgs(t, "ms", &ms)
		h.clock.Advance(time.Duration(ms) * time.Millisecond)
		return fmt.Sprintf("now=%d", h.clock.Now().UnixMilli())
	case "retain":
		var now int64
		if d.MaybeScanArgs(t, "now", &now) {
			if now < h.clock.Now().UnixMilli() {
				d.Fatalf(t, "now=%d: the clock is at %d already", now, h.clock.Now().UnixMilli())
			}
			h.clock.Advance(time.Duration(now-h.clock.Now().UnixMilli()) * time.Millisecond)
		}
		cfg := h.p.Config()
		cfg.RetentionBytes, cfg.RetentionMs = -1, -1
		d.MaybeScanArgs(t, "bytes", &cfg.RetentionBytes)
		d.MaybeScanArgs(t, "ms", &cfg.RetentionMs)
		h.p.SetConfig(cfg)
		return result(h.e.EnforceRetention(h.clock.Now()))
	case "hwm":
		var to int64
		d.ScanArgs(t, "to", &to)
		if err := h.p.SetReplicated(true); err != nil {
			return result(err)
		}
		return fmt.Sprintf("hwm=%d", h.p.SetHighWatermark(to))
	case "log":
		return h.render(t)
	case "epoch-end":
		var epoch int64
		d.ScanArgs(t, "epoch", &epoch)
		e, end := h.p.EndOffsetForEpoch(int32(epoch))
		return fmt.Sprintf("epoch=%d end=%d", e, end)
	case "offset-for-ts":
		var ts int64
		d.ScanArgs(t, "ts", &ts)
		off, at, epoch, ok := h.p.OffsetForTimestamp(ts)
		if !ok {
			return "none"
		}
		return fmt.Sprintf("offset=%d ts=%d epoch=%d", off, at, epoch)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// open opens the engine on the test's directory and the partition in
// it, creating it the first time.
func (h *logHarness) open(t *testing.T, d *datadriven.TestData) string {
	if h.e != nil {
		d.Fatalf(t, "open: the engine is open")
	}
	e, err := Open(Config{Dir: h.dir, FS: vfs.Default, SyncWrites: true, RetentionCheckInterval: -1, Now: h.clock.Now})
	if err != nil {
		return "error: " + err.Error()
	}
	h.e = e
	if h.p = e.Partition(testID, 0); h.p != nil {
		return "ok"
	}
	cfg := DefaultLogConfig()
	cfg.RetentionMs, cfg.RetentionBytes = -1, -1
	cfg.LogAppendTime = d.HasArg("log-append-time")
	configArgs(t, d, &cfg)
	if h.p, err = e.Create("t", testID, 0, cfg); err != nil {
		return "error: " + err.Error()
	}
	return "created"
}

func configArgs(t *testing.T, d *datadriven.TestData, cfg *LogConfig) {
	d.MaybeScanArgs(t, "segment-bytes", &cfg.SegmentBytes)
	d.MaybeScanArgs(t, "segment-ms", &cfg.SegmentMs)
	d.MaybeScanArgs(t, "retention-ms", &cfg.RetentionMs)
	d.MaybeScanArgs(t, "retention-bytes", &cfg.RetentionBytes)
}

func (h *logHarness) append(t *testing.T, d *datadriven.TestData) string {
	records, batches, ts, epoch, base := int64(1), int64(1), int64(1000), int64(-1), int64(-1)
	d.MaybeScanArgs(t, "records", &records)
	d.MaybeScanArgs(t, "batches", &batches)
	d.MaybeScanArgs(t, "ts", &ts)
	d.MaybeScanArgs(t, "epoch", &epoch)
	origin := "client"
	d.MaybeScanArgs(t, "origin", &origin)
	req := &AppendRequest{Topic: "t", TopicID: testID, Origin: OriginClient, Acks: -1}
	switch origin {
	case "client":
		if epoch >= 0 {
			if err := h.p.SetLeaderEpoch(int32(epoch)); err != nil {
				return result(err)
			}
		}
	case "replica":
		req.Origin = OriginReplica
		d.ScanArgs(t, "base", &base)
	default:
		d.Fatalf(t, "unknown origin %q", origin)
	}
	for i := range batches {
		recs := make([]rec, records)
		for j := range recs {
			recs[j] = rec{key: []byte("k"), val: []byte(fmt.Sprintf("v%06d", i*records+int64(j))), tsDelta: int64(j)}
		}
		b := recordbatch.Batch(mkBatch(t, batchOpts{baseTs: ts + i*records}, recs...))
		if base >= 0 {
			b.SetBaseOffset(base + i*records)
			b.SetLeaderEpoch(int32(epoch))
		}
		req.Records = append(req.Records, b...)
	}
	res, err := h.p.Append(context.Background(), req)
	if err != nil {
		return result(err)
	}
	return fmt.Sprintf("appended %d-%d", res.BaseOffset, res.LastOffset)
}

// cut runs truncate, start-over and delete-records.
func (h *logHarness) cut(t *testing.T, d *datadriven.TestData) string {
	var at int64
	switch d.Cmd {
	case "truncate":
		d.ScanArgs(t, "to", &at)
		return result(h.p.Truncate(at))
	case "start-over":
		d.ScanArgs(t, "at", &at)
		return result(h.p.StartOver(at))
	}
	d.ScanArgs(t, "before", &at)
	start, err := h.p.DeleteRecords(at)
	if err != nil {
		return result(err)
	}
	return fmt.Sprintf("log-start=%d", start)
}

// result prints err, with the name of the Kafka error code it wraps but
// not franz-go's description of it, or ok.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return "error: " + strings.Replace(err.Error(), ke.Error(), ke.Message, 1)
	}
	return "error: " + err.Error()
}

// render prints the partition: offsets, segments, epochs and batches.
// It also checks that the segment files on disk are the segments the
// partition holds, and that no batch starts before the one before ends.
func (h *logHarness) render(t *testing.T) string {
	var b strings.Builder
	o := h.p.Offsets()
	fmt.Fprintf(&b, "log-start=%d log-end=%d hwm=%d lso=%d leader-epoch=%d size=%d\n",
		o.LogStart, o.LogEnd, o.HighWatermark, o.LastStable, o.LeaderEpoch, h.p.Size())
	h.p.mu.Lock()
	var bases []int64
	for _, s := range h.p.segs {
		bases = append(bases, s.base)
		if s.size == 0 {
			fmt.Fprintf(&b, "segment %d: empty, rolled at %d\n", s.base, s.created)
			continue
		}
		fmt.Fprintf(&b, "segment %d-%d: %d bytes, max-ts=%d at %d, rolled at %d\n", s.base, s.next-1, s.size, s.maxTs, s.maxTsOff, s.created)
	}
	var epochs []string
	for _, en := range h.p.epochs {
		epochs = append(epochs, fmt.Sprintf("%d@%d", en.Epoch, en.Start))
	}
	dir := h.p.dir
	h.p.mu.Unlock()
	if len(epochs) == 0 {
		epochs = append(epochs, "none")
	}
	fmt.Fprintf(&b, "epochs: %s\n", strings.Join(epochs, " "))
	if files := segmentFiles(t, dir); !slices.Equal(files, bases) {
		fmt.Fprintf(&b, "SEGMENT FILES ON DISK %v, SEGMENTS %v\n", files, bases)
	}

	next := int64(-1) // the first batch may start before the log start
	for _, raw := range h.batches(t, o.LogStart) {
		bt := recordbatch.Batch(raw)
		if bt.BaseOffset() < next {
			fmt.Fprintf(&b, "BATCH %d-%d BEFORE %d\n", bt.BaseOffset(), bt.LastOffset(), next)
		}
		next = bt.LastOffset() + 1
		fmt.Fprintf(&b, "batch %d-%d epoch=%d ts=%d..%d\n", bt.BaseOffset(), bt.LastOffset(), bt.LeaderEpoch(), bt.BaseTimestamp(), bt.MaxTimestamp())
	}
	return b.String()
}

// batches reads every batch from offset to the log end.
func (h *logHarness) batches(t *testing.T, offset int64) [][]byte {
	var out [][]byte
	for {
		res, err := h.p.Fetch(offset, 1<<20, ReadLogEnd)
		if err != nil {
			t.Fatalf("fetch %d: %v", offset, err)
		}
		if len(res.Batches) == 0 {
			return out
		}
		out = append(out, res.Batches...)
		offset = recordbatch.Batch(res.Batches[len(res.Batches)-1]).LastOffset() + 1
	}
}

// segmentFiles lists the bases of the segment files in dir, without
// segfile.List's removal of leftovers.
func segmentFiles(t *testing.T, dir string) []int64 {
	names, err := vfs.Default.List(dir)
	if err != nil {
		return nil // not created yet
	}
	var bases []int64
	for _, n := range names {
		base, ok := strings.CutSuffix(n, ".log")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(base, 10, 64)
		if err != nil || segfile.Name(v) != n {
			t.Fatalf("segment file %q", n)
		}
		bases = append(bases, v)
	}
	slices.Sort(bases)
	return bases
}
