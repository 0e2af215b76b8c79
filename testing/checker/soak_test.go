package checker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestSoak runs a three-broker cluster of `tandem serve` processes under a
// steady mixed load (an idempotent acks=all producer, a transactional
// producer committing and aborting, a consumer group and a share group)
// with a fault at a fixed interval, in turn: kill -9 of a partition
// leader, kill -9 of the active controller, a broker paused (SIGSTOP) past
// the session timeout, a full disk on broker 3 (its data dir is a tmpfs),
// and a rolling restart. Then it reads everything back: every
// acknowledged record once at its offset, every committed transaction
// whole, nothing of an aborted one, and it reports each broker's RSS and
// open files at the start and the end.
//
// The test command runs it for 100 s with a fault every 20 s (each kind
// once); the long run is
//
//	TANDEM_SOAK=30m TANDEM_SOAK_EVERY=2m go test -count=1 -v -timeout 45m -run TestSoak ./testing/checker/
func TestSoak(t *testing.T) {
	tandemtest.Long(t)
	length, every := envDuration(t, "TANDEM_SOAK", 100*time.Second), envDuration(t, "TANDEM_SOAK_EVERY", 20*time.Second)
	c := tandemtest.StartProcCluster(t, 3, map[string]string{
		"min.insync.replicas":              "2",
		"group.initial.rebalance.delay.ms": "100",
		"transaction.max.timeout.ms":       "60000",
	})
	diskFull := onTmpfs(t, c.Broker(3))
	ctx, cancel := context.WithTimeout(context.Background(), length+10*time.Minute)
	defer cancel()
	seeds := kgo.SeedBrokers(c.Addrs()...)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], seeds))
	for _, topic := range []string{"soak", "soak-txn"} {
		resp, err := adm.CreateTopic(ctx, 3, 3, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	var (
		h                 checker.History
		unacked           atomic.Int64
		txns              = checker.TxnLog{Topic: "soak-txn", ID: "soak-txn"}
		grouped, shared   atomic.Int64
		wg                sync.WaitGroup
		loadCtx, stopLoad = context.WithCancel(ctx)
	)
	worker := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && loadCtx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	// Idempotent acks=all producer, 500 records a second.
	worker("producer", func() error {
		cl, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic("soak"), kgo.RecordDeliveryTimeout(30*time.Second))
		if err != nil {
			return err
		}
		defer cl.Close()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; loadCtx.Err() == nil; i++ {
			<-tick.C
			v := fmt.Sprintf("v%08d", i)
			cl.Produce(loadCtx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err != nil {
					unacked.Add(1)
					return
				}
				h.Acked(v, checker.Place{Partition: r.Partition, Offset: r.Offset})
			})
		}
		return cl.Flush(context.Background())
	})
	worker("transactions", func() error { return txns.Run(loadCtx, seeds) })
	worker("consumer group", func() error {
		cl, err := kgo.NewClient(seeds, kgo.ConsumerGroup("soak-group"), kgo.ConsumeTopics("soak"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return err
		}
		defer cl.Close()
		for loadCtx.Err() == nil {
			grouped.Add(int64(cl.PollFetches(loadCtx).NumRecords()))
		}
		return nil
	})
	worker("share group", func() error {
		cl, err := kgo.NewClient(seeds, kgo.ShareGroup("soak-share"), kgo.ConsumeTopics("soak"), kgo.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return err
		}
		defer cl.Close()
		for loadCtx.Err() == nil {
			shared.Add(int64(cl.PollFetches(loadCtx).NumRecords()))
		}
		return nil
	})

	progress := func(what string) {
		t.Helper()
		n := h.Len()
		waitCond(t, time.Minute, what, func() error {
			if h.Len() < n+100 {
				return fmt.Errorf("no acknowledged writes (%d so far, %d not acknowledged)", h.Len(), unacked.Load())
			}
			return nil
		})
	}
	fullISR := func() {
		t.Helper()
		for _, topic := range []string{"soak", "soak-txn"} {
			c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool {
				for _, p := range ps {
					if len(p.ISR) != 3 || p.Leader < 0 {
						return false
					}
				}
				return len(ps) == 3
			})
		}
	}
	leader := func(topic string, p int32) int32 {
		return c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool { return ps[p].Leader > 0 })[p].Leader
	}
	progress("start")
	start := sampleProcs(c)

	faults := []struct {
		name string
		do   func()
	}{
		{"kill -9 a leader", func() {
			b := c.Broker(leader("soak", 0))
			b.Kill9()
			progress("leader killed")
			b.Restart()
		}},
		{"kill -9 the active controller", func() {
			md, err := adm.BrokerMetadata(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b := c.Broker(md.Controller)
			b.Kill9()
			progress("controller killed")
			b.Restart()
		}},
		{"pause a broker past its session timeout", func() {
			b := c.Broker(leader("soak", 1))
			b.Pause()
			time.Sleep(5 * time.Second) // broker.session.timeout.ms is 3 s
			progress("broker paused")
			b.Resume()
		}},
		{"full disk on broker 3", func() {
			if diskFull == nil {
				t.Log("soak: no tmpfs here; the full-disk fault is left out")
				return
			}
			diskFull(true)
			time.Sleep(5 * time.Second)
			progress("disk full")
			diskFull(false)
		}},
		{"rolling restart", func() {
			for _, b := range c.Brokers {
				if err := b.Stop(30 * time.Second); err != nil {
					t.Errorf("stop: %v", err)
				}
				b.Restart()
				fullISR()
			}
		}},
	}
	began := time.Now()
	var done []string
	for i := 0; ; i++ {
		next := began.Add(time.Duration(i+1) * every)
		if next.After(began.Add(length)) {
			break
		}
		time.Sleep(time.Until(next))
		f := faults[i%len(faults)]
		f.do()
		fullISR()
		progress("after " + f.name)
		done = append(done, f.name)
	}
	time.Sleep(time.Until(began.Add(length)))
	end := sampleProcs(c)
	stopLoad()
	wg.Wait()

	read, err := checker.ReadAll(ctx, "soak", seeds)
	if err != nil {
		t.Fatal(err)
	}
	rep := h.Check(read)
	txnRep, err := txns.Check(ctx, seeds)
	if err != nil {
		t.Fatal(err)
	}
	if !txnRep.OK() || !txnRep.Ran() {
		t.Errorf("soak: %s", txnRep)
	}
	t.Logf("soak: %v over %v, faults %d (%s); %d records not acknowledged", rep, length, len(done), strings.Join(done, ", "), unacked.Load())
	t.Logf("soak: %s", txnRep)
	t.Logf("soak: consumer group read %d records, share group %d", grouped.Load(), shared.Load())
	for i := range c.Brokers {
		t.Logf("soak: broker %d RSS %d MiB -> %d MiB, open files %d -> %d", i+1, start[i].rss>>20, end[i].rss>>20, start[i].files, end[i].files)
	}
	if !rep.OK() {
		t.Fatal(rep)
	}
	if grouped.Load() == 0 || shared.Load() == 0 {
		t.Errorf("the consumer group read %d records, the share group %d", grouped.Load(), shared.Load())
	}
	for i := range c.Brokers {
		// Flat: a leak of one descriptor per request or per fault would
		// show many times over.
		if end[i].files > 2*start[i].files+64 {
			t.Errorf("broker %d: open files %d at the start, %d at the end", i+1, start[i].files, end[i].files)
		}
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// onTmpfs moves broker b's data dir to a 512 MiB tmpfs and returns a
// switch that fills it (true) and frees it (false); nil where no tmpfs
// can be mounted (not root).
func onTmpfs(t *testing.T, b *tandemtest.Proc) func(full bool) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=512m"); err != nil {
		t.Logf("soak: cannot mount a tmpfs (%v)", err)
		return nil
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) }) // after the broker is killed
	if err := b.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.MoveDataDir(dir); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	filler := filepath.Join(dir, "filler")
	return func(full bool) {
		if !full {
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			return
		}
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		chunk := make([]byte, 1<<20)
		for {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
	}
}

type procSample struct {
	rss   int64
	files int
}

func sampleProcs(c *tandemtest.ProcCluster) []procSample {
	var out []procSample
	for _, b := range c.Brokers {
		rss, _, _ := b.Mem()
		files, _ := b.OpenFiles()
		out = append(out, procSample{rss, files})
	}
	return out
}
