package engine

import (
	"context"
	"testing"
	"time"
)

// TestSyncDoesNotWaitForOthers: an append waits for its own partition's
// fsync, not for another partition's still running (a mirror catching up
// fsyncs tens of MiB at a time; a local producer's acks must not wait
// behind them), and the slow one is acknowledged once its own ends.
func TestSyncDoesNotWaitForOthers(t *testing.T) {
	e := openTest(t, nil)
	slow := mkPart(t, e, DefaultLogConfig())
	fast, err := e.Create("t", testID, 1, DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	e.testHook = func(point string) {
		if point == "sync:partition:t-0" {
			select {
			case <-entered:
			default:
				close(entered)
				<-release
			}
		}
	}
	slowDone := make(chan error, 1)
	go func() {
		_, err := slow.Append(context.Background(), &AppendRequest{Topic: "t", TopicID: testID, Origin: OriginClient, Records: mkBatch(t, batchOpts{}, kv("a", "1")), Acks: -1})
		slowDone <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow partition's sync never started")
	}
	fastDone := make(chan error, 1)
	go func() {
		_, err := fast.Append(context.Background(), &AppendRequest{Topic: "t", TopicID: testID, Partition: 1, Origin: OriginClient, Records: mkBatch(t, batchOpts{}, kv("b", "2")), Acks: -1})
		fastDone <- err
	}()
	select {
	case err := <-fastDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("an append waited for another partition's sync")
	}
	select {
	case <-slowDone:
		t.Fatal("the slow partition's append was acknowledged before its sync")
	default:
	}
	close(release)
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
	if got := fast.Offsets().HighWatermark; got != 1 {
		t.Fatalf("fast partition's high watermark %d, want 1", got)
	}
}

// TestSyncPartEndsWhatItTookOver: a partition left out of two rounds in
// a row (its sync still ran) hands its first part to the part of the
// round after, which hands both to the next: ending the last must wake
// the appends waiting on all three. Under franz-go's suite an append
// registered while a round was still starting other partitions' syncs
// waited forever, and the broker never stopped, since the part of the
// first round was handed over twice and only one level was woken.
func TestSyncPartEndsWhatItTookOver(t *testing.T) {
	first := &partSync{done: make(chan struct{})}
	second := &partSync{done: make(chan struct{}), also: []*partSync{first}}
	third := &partSync{done: make(chan struct{}), also: []*partSync{second}}
	third.end(nil)
	for i, ps := range []*partSync{first, second, third} {
		select {
		case <-ps.done:
		default:
			t.Errorf("part %d of 3 not woken", i+1)
		}
	}
}
