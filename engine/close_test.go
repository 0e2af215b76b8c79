package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCloseEndsEveryWait: Close while appends are in flight and others
// wait on the partition. Every append returns (acknowledged, or errClosed
// for those that came too late), every wait ends, and what was
// acknowledged is there after reopening.
func TestCloseEndsEveryWait(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs)
	p := mkPart(t, e, LogConfig{MaxMessageBytes: 1 << 20, SegmentBytes: 1 << 20})
	if err := p.SetReplicated(true); err != nil { // the high watermark waits for the replication layer
		t.Fatal(err)
	}

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = map[int64]string{}
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				v := fmt.Sprintf("w%d-%d", w, i)
				res, err := p.Append(context.Background(), &AppendRequest{Topic: "t", TopicID: testID, Origin: OriginClient,
					Records: mkBatch(t, batchOpts{}, kv("k", v)), Acks: -1})
				if errors.Is(err, errClosed) {
					return
				}
				if err != nil {
					t.Errorf("append %s: %v", v, err)
					return
				}
				mu.Lock()
				acked[res.BaseOffset] = v
				mu.Unlock()
			}
		}()
	}
	// Waits for a high watermark and a log end that will not move.
	for range 4 {
		wg.Add(2)
		go func() { defer wg.Done(); <-p.Wait() }()
		go func() { defer wg.Done(); <-p.WaitEnd() }()
	}
	time.Sleep(50 * time.Millisecond)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("appends or waits still blocked a minute after Close")
	}
	select {
	case <-p.Wait():
	default:
		t.Fatal("a wait begun after Close blocks")
	}
	if len(acked) == 0 {
		t.Fatal("no append was acknowledged before Close")
	}

	e2 := openTest(t, fs)
	p2 := e2.Partition(testID, 0)
	if p2 == nil {
		t.Fatal("partition gone after reopening")
	}
	if err := p2.SetReplicated(false); err != nil {
		t.Fatal(err)
	}
	got := recordsOf(t, fetchAll(t, p2, 0))
	for off, v := range acked {
		if got[off] != "k="+v {
			t.Errorf("offset %d: acknowledged %q, read back %q", off, v, got[off])
		}
	}
}
