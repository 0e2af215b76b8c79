package engine

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestCrashSafety appends from several goroutines to several partitions
// with SyncWrites, takes crash clones of the filesystem while they run,
// and checks that each clone holds every append acknowledged before it,
// byte for byte, with offsets that continue without a gap.
func TestCrashSafety(t *testing.T) {
	testCrashSafety(t, false)
}

func testCrashSafety(t *testing.T, brokenSync bool) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs, func(c *Config) { c.SyncWrites = !brokenSync })
	const parts, writers, perWriter = 3, 6, 60
	ps := make([]*Partition, parts)
	for i := range ps {
		var err error
		if ps[i], err = e.Create("crash", testID, int32(i), DefaultLogConfig()); err != nil {
			t.Fatal(err)
		}
		ps[i].SetLeaderEpoch(int32(i + 1))
	}
	type acked struct {
		part int
		off  int64
		data []byte
	}
	var (
		mu   sync.Mutex
		acks []acked
	)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := int64(100 + w)
			for i := range perWriter {
				pi := (w + i) % parts
				codec := int8(i % 5)
				b := mkBatch(t, batchOpts{codec: codec, pid: pid + int64(pi)*1000, seq: int32(2 * (i / parts))}, kv(fmt.Sprint(w), fmt.Sprint(i)), kv("x", "y"))
				res, err := ps[pi].Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: b, Acks: -1})
				if err != nil {
					t.Error(err)
					return
				}
				recordbatch.Batch(b).SetBaseOffset(res.BaseOffset)
				recordbatch.Batch(b).SetLeaderEpoch(int32(pi + 1))
				mu.Lock()
				acks = append(acks, acked{pi, res.BaseOffset, b})
				mu.Unlock()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var clones []*vfs.MemFS
	var cloneAcks [][]acked
	for len(clones) < 6 {
		runtime.Gosched()
		mu.Lock()
		snap := append([]acked(nil), acks...)
		mu.Unlock()
		if len(snap) < len(clones)*writers*perWriter/6 {
			continue
		}
		cfg := vfs.CrashCloneCfg{}
		if len(clones)%2 == 1 {
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng}
		}
		clones = append(clones, fs.CrashClone(cfg))
		cloneAcks = append(cloneAcks, snap)
	}
	wg.Wait()
	mu.Lock()
	clones = append(clones, fs.CrashClone(vfs.CrashCloneCfg{}))
	cloneAcks = append(cloneAcks, acks)
	mu.Unlock()

	for ci, clone := range clones {
		t.Logf("clone %d: %d acknowledged appends", ci, len(cloneAcks[ci]))
		e2 := openTest(t, clone)
		for _, a := range cloneAcks[ci] {
			p := e2.Partition(testID, int32(a.part))
			if p == nil {
				t.Fatalf("clone %d: partition %d lost", ci, a.part)
			}
			res, err := p.Fetch(a.off, 1, ReadUncommitted)
			if err != nil || len(res.Batches) == 0 || !bytes.Equal(res.Batches[0], a.data) {
				t.Fatalf("clone %d: acknowledged batch %d@%d lost or changed (%v)", ci, a.part, a.off, err)
			}
		}
		for i := range parts {
			p := e2.Partition(testID, int32(i))
			// Offsets are contiguous from 0 to the log end.
			next := int64(0)
			for _, b := range fetchAll(t, p, 0) {
				if recordbatch.Batch(b).BaseOffset() != next {
					t.Fatalf("clone %d partition %d: gap at %d", ci, i, next)
				}
				next = recordbatch.Batch(b).LastOffset() + 1
			}
			if o := p.Offsets(); o.LogEnd != next || o.HighWatermark != next {
				t.Fatalf("clone %d partition %d: offsets %+v, data ends at %d", ci, i, o, next)
			}
			// Producer state came back with the data: a retry of the last
			// recovered batch of each producer is a duplicate, the next
			// sequence is accepted.
			for _, st := range p.Producers() {
				retry := mkBatch(t, batchOpts{pid: st.ProducerID, seq: st.LastSequence - 1}, kv("r", "r"), kv("r", "r"))
				res, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: retry, Acks: -1})
				if err != nil || !res.Duplicate {
					t.Fatalf("clone %d: retry of producer %d seq %d: %+v %v", ci, st.ProducerID, st.LastSequence, res, err)
				}
				gap := mkBatch(t, batchOpts{pid: st.ProducerID, seq: st.LastSequence + 2}, kv("r", "r"))
				if _, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: gap, Acks: -1}); kcode(err) != kerr.OutOfOrderSequenceNumber.Code {
					t.Fatalf("clone %d: gap accepted: %v", ci, err)
				}
			}
		}
		e2.Close()
	}
}

// TestCrashKeepsNewPartitionsAcknowledged: the directory entries of a
// partition's first segment are made durable by the sync round that
// acknowledges its first append, not at the roll; an acknowledged first
// append to each of many new partitions, written side by side, survives
// a crash that drops everything not synced, and appends not yet
// acknowledged leave no later segment without an earlier one.
func TestCrashKeepsNewPartitionsAcknowledged(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs)
	const parts = 40
	want := make([][]byte, parts)
	var wg sync.WaitGroup
	for i := range parts {
		p, err := e.Create("t", testID, int32(i), DefaultLogConfig())
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := mkBatch(t, batchOpts{}, kv(fmt.Sprint(i), "v"))
			if _, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: b, Acks: -1}); err != nil {
				t.Error(err)
				return
			}
			recordbatch.Batch(b).SetLeaderEpoch(0)
			want[i] = b
		}()
	}
	wg.Wait()
	e2 := openTest(t, fs.CrashClone(vfs.CrashCloneCfg{}))
	for i := range parts {
		p := e2.Partition(testID, int32(i))
		if p == nil {
			t.Fatalf("partition %d lost", i)
		}
		got := fetchAll(t, p, 0)
		if len(got) != 1 || !bytes.Equal(got[0], want[i]) {
			t.Fatalf("partition %d: %d batches after the crash, want its acknowledged one", i, len(got))
		}
	}
}
