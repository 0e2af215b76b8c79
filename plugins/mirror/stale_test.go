package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestStaleStateReadKeepsMirroring is the false last-mirror-epoch
// truncation seen at 10,000 partitions: the control loop read a
// partition's persisted PREPARING, the source loop then prepared it and
// wrote MIRRORING, and the control loop took in what it had read. The
// partition was back in PREPARING, prepared a second time, and its log,
// mirrored by then, truncated to the source's last mirror epoch (-1: to
// 0) and copied to <topic>.diverged. The hooks hold each loop where the
// race needs it: the source loop before its prepare until the control
// loop has read PREPARING, the control loop until the source loop has
// written MIRRORING, and the control loop's next step before its taking
// in until the source loop prepares again (or 3s pass, as when fixed).
func TestStaleStateReadKeepsMirroring(t *testing.T) {
	const topic, n = "orders", 100
	var (
		prepares  atomic.Int32
		preparing = make(chan struct{}) // the source loop holds t-0 before its prepare
		release   = make(chan struct{}) // the control loop read PREPARING: prepare
		staleRead = make(chan struct{}) // the stale PREPARING is being taken in
		once      sync.Once
		nextOnce  sync.Once
	)
	restorePrepare := mirror.OnPrepare(func(tp string, p int32) {
		if tp != topic {
			return
		}
		if prepares.Add(1) == 1 {
			close(preparing)
			select {
			case <-release:
			case <-time.After(time.Minute):
			}
		}
	})
	restoreRead := mirror.OnStatesRead(func(tp string, p int32, read mirrorstate.State, held func() mirrorstate.State) {
		if tp != topic {
			return
		}
		select {
		case <-preparing:
		default:
			return
		}
		select {
		case <-staleRead:
			// The next step, before it takes in what it read: the
			// source loop acts on the state the last step took in.
			nextOnce.Do(func() {
				deadline := time.Now().Add(3 * time.Second)
				for prepares.Load() < 2 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
			})
			return
		default:
		}
		if read != mirrorstate.Preparing || held() != mirrorstate.Preparing {
			return
		}
		once.Do(func() {
			close(release)
			deadline := time.Now().Add(30 * time.Second)
			for held() != mirrorstate.Mirroring && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			close(staleRead)
		})
	})
	t.Cleanup(func() { restorePrepare(); restoreRead() }) // after the brokers closed

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dst, _, _ := mirrorOne(ctx, t, topic, n)
	select {
	case <-preparing:
	case <-ctx.Done():
		t.Fatal("the source loop never prepared the partition")
	}
	// A new topic changes the destination's image: the control loop reads
	// every state again, the partition's PREPARING among them.
	tandemtest.CreateTopic(t, dst.Addr(), "unrelated", 1)
	select {
	case <-staleRead:
	case <-ctx.Done():
		t.Fatal("the control loop never read the partition's PREPARING while the source loop prepared it")
	}

	// The destination holds the source's records at the same offsets, and
	// nothing was truncated: no second prepare, no <topic>.diverged.
	dc := tandemtest.Client(t, dst.Addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	for got := 0; got < n; {
		fs := dc.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading the destination after %d records: %v", got, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if want := fmt.Sprintf("v%03d", r.Offset); string(r.Value) != want || r.Offset != int64(got) {
				t.Fatalf("destination %s-0: record %d at offset %d is %q, want offset %d, %q", topic, got, r.Offset, r.Value, got, want)
			}
			got++
		})
	}
	if p := prepares.Load(); p != 1 {
		t.Errorf("the partition was prepared %d times, once expected", p)
	}
	topics, err := kadm.NewClient(tandemtest.Client(t, dst.Addr())).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has(topic + mirrorstate.DivergedSuffix) {
		t.Errorf("the destination has %s: the mirrored partition was truncated", topic+mirrorstate.DivergedSuffix)
	}
}

// TestFailedStatesReadIsReadAgain: the control loop's read of persisted
// states fails part way, after it read the local __mirror_state shards
// (another broker's coordinator did not answer, as right after
// TestPartitionMirror's faults). What it had read was dropped, but the
// shards' marks said read: the next steps read only shards that changed
// since, and a partition alone in its shard was never taken in. It never
// got a fetcher and stayed empty, with its lag unknown (orders/2 of
// TestPartitionMirror: "MIRRORING at 0 (source end 3707, lag -1)").
func TestFailedStatesReadIsReadAgain(t *testing.T) {
	const topic, n = "orders", 50
	var failed atomic.Bool
	restore := mirror.FailStatesRead(func(wanted []string) error {
		if slices.Contains(wanted, topic+"-0") && failed.CompareAndSwap(false, true) {
			return errors.New("another broker's __mirror_state coordinator did not answer (test)")
		}
		return nil
	})
	t.Cleanup(restore) // after the brokers closed

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, da, _ := mirrorOne(ctx, t, topic, n)
	// The mirror copies the partition within seconds once its state is
	// taken in; 20 s is ample, and no later change of the image (which
	// reads every state again) is due meanwhile.
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ms, err := da.DescribeMirrors(ctx, "m")
		if err != nil || len(ms) != 1 || len(ms[0].Topics) != 1 || len(ms[0].Topics[0].Partitions) != 1 {
			last = fmt.Sprintf("describe: %v (%d mirrors)", err, len(ms))
			continue
		}
		p := ms[0].Topics[0].Partitions[0]
		if p.State == mirrorstate.Mirroring.String() && p.DestinationOffset >= n && p.Lag == 0 {
			if !failed.Load() {
				t.Fatal("the states read never failed: the test tested nothing")
			}
			return
		}
		last = fmt.Sprintf("%s at %d (source %d, lag %d)", p.State, p.DestinationOffset, p.SourceOffset, p.Lag)
	}
	t.Fatalf("after a failed read of its state, %s-0 is %s, not MIRRORING at %d; the read failed: %v", topic, last, n, failed.Load())
}

// TestMissedStateStartsNothing: a read of persisted states that misses a
// MIRRORING partition's state (it reads UNKNOWN, as a read from before
// the partition's first write would) must not start the partition again:
// PREPARING over MIRRORING would prepare it a second time and send its
// mirrored log back through the last mirror epoch's truncation. The
// write of PREPARING checks the saved state is still the one read.
func TestMissedStateStartsNothing(t *testing.T) {
	const topic, n = "orders", 50
	var prepares, rewrites atomic.Int32
	var armed atomic.Bool
	restorePrepare := mirror.OnPrepare(func(tp string, p int32) {
		if tp == topic {
			prepares.Add(1)
		}
	})
	t.Cleanup(restorePrepare)
	restoreRewrite := mirror.RewriteStatesRead(func(tp string, p int32, st *mirrorstate.PartitionState) {
		if tp == topic && st.State == mirrorstate.Mirroring && armed.Load() {
			*st = mirrorstate.NewPartitionState()
			rewrites.Add(1)
		}
	})
	t.Cleanup(restoreRewrite)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dst, da, _ := mirrorOne(ctx, t, topic, n)
	mirrored := func() (bool, string) {
		ms, err := da.DescribeMirrors(ctx, "m")
		if err != nil || len(ms) != 1 || len(ms[0].Topics) != 1 || len(ms[0].Topics[0].Partitions) != 1 {
			return false, fmt.Sprintf("describe: %v (%d mirrors)", err, len(ms))
		}
		p := ms[0].Topics[0].Partitions[0]
		return p.State == mirrorstate.Mirroring.String() && p.DestinationOffset >= n && p.Lag == 0,
			fmt.Sprintf("%s at %d (source %d, lag %d)", p.State, p.DestinationOffset, p.SourceOffset, p.Lag)
	}
	waitMirrored := func(what string) {
		t.Helper()
		var last string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			var ok bool
			if ok, last = mirrored(); ok {
				return
			}
		}
		t.Fatalf("%s: %s-0 is %s, not MIRRORING at %d", what, topic, last, n)
	}
	waitMirrored("before")
	if got := prepares.Load(); got != 1 {
		t.Fatalf("prepared %d times before the missed read, want 1", got)
	}

	// A change of the image makes the control loop read every state
	// again; that read misses orders-0's MIRRORING.
	armed.Store(true)
	tandemtest.CreateTopic(t, dst.Addr(), "other", 1)
	for deadline := time.Now().Add(30 * time.Second); rewrites.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	armed.Store(false)
	if rewrites.Load() == 0 {
		t.Fatal("no read of orders-0's state after the image changed: the test tested nothing")
	}
	waitMirrored("after the missed read")
	time.Sleep(2 * time.Second) // a second prepare would come within the source loop's next steps
	waitMirrored("2 s after the missed read")
	if got := prepares.Load(); got != 1 {
		t.Fatalf("prepared %d times, want 1: the missed read started the MIRRORING partition again", got)
	}
	dc := tandemtest.Client(t, dst.Addr())
	topics, err := kadm.NewClient(dc).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has(topic + ".diverged") {
		t.Fatalf("%s.diverged exists: the mirrored log was truncated", topic)
	}
}

// TestPauseDuringPrepareHolds: a partition paused while it is prepared
// (after its LME truncation, before prepare writes MIRRORING) stays
// PAUSED: prepare's MIRRORING is written only over the PREPARING it
// started from, where PAUSED -> MIRRORING (a resume) is a move the
// state machine allows.
func TestPauseDuringPrepareHolds(t *testing.T) {
	const topic, n = "orders", 50
	var (
		held    = make(chan struct{})
		release = make(chan struct{})
		once    sync.Once
	)
	restore := mirror.OnTruncated(func(tp string, p int32) {
		if tp != topic {
			return
		}
		once.Do(func() {
			close(held)
			select {
			case <-release:
			case <-time.After(time.Minute):
			}
		})
	})
	t.Cleanup(restore)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, da, produce := mirrorOne(ctx, t, topic, n)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the partition was never prepared")
	}
	paused := make(chan error, 1)
	go func() { paused <- da.PauseMirror(ctx, "m", topic) }()
	// The pause is written (PREPARING -> PAUSING) while prepare holds;
	// then prepare goes on and writes its MIRRORING.
	state := func() string {
		ms, err := da.DescribeMirrors(ctx, "m")
		if err != nil || len(ms) != 1 || len(ms[0].Topics) != 1 || len(ms[0].Topics[0].Partitions) != 1 {
			return fmt.Sprintf("describe: %v", err)
		}
		return ms[0].Topics[0].Partitions[0].State
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st := state(); st == mirrorstate.Pausing.String() || st == mirrorstate.Paused.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pause was not written while prepare held: %s", state())
		}
	}
	close(release)
	if err := <-paused; err != nil {
		t.Fatalf("pause: %v", err)
	}
	produce(n, n)
	time.Sleep(2 * time.Second) // a resumed partition would fetch the new records meanwhile
	if st := state(); st != mirrorstate.Paused.String() {
		t.Fatalf("%s-0 is %s after it was paused during its prepare, want PAUSED", topic, st)
	}
	ms, err := da.DescribeMirrors(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if p := ms[0].Topics[0].Partitions[0]; p.DestinationOffset > n {
		t.Fatalf("%s-0 copied to %d while paused, want at most %d", topic, p.DestinationOffset, n)
	}
}

// mirrorOne starts a source and a destination broker, writes n records
// to partition 0 of a new one-partition topic on the source, and mirrors
// it to the destination (mirror "m"). produce writes count more records
// from value number from.
func mirrorOne(ctx context.Context, t *testing.T, topic string, n int) (dst *server.Broker, da *admin.Client, produce func(from, count int)) {
	t.Helper()
	src := tandemtest.StartInProcess(t, nil)
	dst = tandemtest.StartInProcess(t, nil)
	tandemtest.CreateTopic(t, src.Addr(), topic, 1)
	pc := tandemtest.Client(t, src.Addr(), kgo.DefaultProduceTopic(topic))
	produce = func(from, count int) {
		t.Helper()
		for i := from; i < from+count; i++ {
			if err := pc.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, "v%03d", i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, n)
	da = admin.New(tandemtest.Client(t, dst.Addr(), admin.Opt()))
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.Addr()}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{topic: "m"}); err != nil {
		t.Fatalf("add topic: %v", err)
	}
	return dst, da, produce
}
