package checker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
		txns              txnLog
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
	worker("transactions", func() error { return txns.run(loadCtx, seeds) })
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
		for deadline := time.Now().Add(time.Minute); h.Len() < n+100; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no acknowledged writes for a minute (%d so far, %d not acknowledged)", what, h.Len(), unacked.Load())
			}
		}
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
	txnRep := txns.check(t, ctx, seeds)
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

// txnLog runs a transactional producer and remembers what it meant each
// transaction to be: committed (acknowledged), aborted, or in doubt (the
// commit failed: all of it or nothing).
type txnLog struct {
	mu                          sync.Mutex
	committed, aborted, inDoubt map[string]bool // transaction -> true
	values                      map[string][]string
}

func (l *txnLog) note(kind map[string]bool, txn string, values []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kind[txn] = true
	l.values[txn] = values
}

func (l *txnLog) run(ctx context.Context, seeds kgo.Opt) error {
	l.committed, l.aborted, l.inDoubt, l.values = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string][]string{}
	newClient := func() (*kgo.Client, error) {
		return kgo.NewClient(seeds, kgo.DefaultProduceTopic("soak-txn"), kgo.TransactionalID("soak-txn"),
			kgo.TransactionTimeout(10*time.Second), kgo.RecordDeliveryTimeout(20*time.Second))
	}
	cl, err := newClient()
	if err != nil {
		return err
	}
	defer func() { cl.Close() }()
	for n := 0; ctx.Err() == nil; n++ {
		txn := fmt.Sprintf("t%06d", n)
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin %s: %w", txn, err)
		}
		var values []string
		var perr error
		for i := range 4 {
			v := fmt.Sprintf("%s-%d", txn, i)
			values = append(values, v)
			if perr = cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); perr != nil {
				break
			}
		}
		commit := kgo.TransactionEndTry(n%4 != 3 && perr == nil)
		endCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cl.EndTransaction(endCtx, commit)
		cancel()
		switch {
		case commit == kgo.TryAbort:
			// An abort that failed is never committed: the coordinator
			// aborts it on timeout or when the next client fences it.
			l.note(l.aborted, txn, values)
		case err == nil:
			l.note(l.committed, txn, values)
		default:
			l.note(l.inDoubt, txn, values)
		}
		if err != nil || perr != nil {
			// A new client, as an application would after an error it
			// cannot tell apart from a fatal one.
			cl.Close()
			if cl, err = newClient(); err != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// check reads soak-txn committed once every transaction has ended (the
// last stable offsets caught up with the ends) and compares.
func (l *txnLog) check(t *testing.T, ctx context.Context, seeds kgo.Opt) string {
	t.Helper()
	cl, err := kgo.NewClient(seeds)
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		ends, err1 := adm.ListEndOffsets(ctx, "soak-txn")
		stable, err2 := adm.ListCommittedOffsets(ctx, "soak-txn")
		if err1 == nil && err2 == nil && ends.Error() == nil && stable.Error() == nil {
			same := true
			ends.Each(func(o kadm.ListedOffset) {
				s, _ := stable.Lookup("soak-txn", o.Partition)
				same = same && s.Offset == o.Offset
			})
			if same {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("soak-txn: a transaction is still open two minutes after the load stopped")
		}
	}
	cl.Close()

	read := readCommitted(t, ctx, seeds, "soak-txn")
	seen := map[string]int{}
	byTxn := map[string][]string{}
	for _, v := range read {
		seen[v]++
		txn, _, _ := strings.Cut(v, "-")
		byTxn[txn] = append(byTxn[txn], v)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var problems []string
	for v, n := range seen {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("%s read %d times", v, n))
		}
	}
	whole := func(txn string) bool {
		got := slices.Sorted(slices.Values(byTxn[txn]))
		return slices.Equal(got, l.values[txn])
	}
	for txn := range l.committed {
		if !whole(txn) {
			problems = append(problems, fmt.Sprintf("committed %s: read %v, want %v", txn, byTxn[txn], l.values[txn]))
		}
	}
	for txn := range l.aborted {
		if len(byTxn[txn]) > 0 {
			problems = append(problems, fmt.Sprintf("aborted %s: read %v", txn, byTxn[txn]))
		}
	}
	inDoubtVisible := 0
	for txn := range l.inDoubt {
		if len(byTxn[txn]) > 0 {
			inDoubtVisible++
			if !whole(txn) {
				problems = append(problems, fmt.Sprintf("in-doubt %s: part of it read: %v", txn, byTxn[txn]))
			}
		}
	}
	for txn := range byTxn {
		if !l.committed[txn] && !l.aborted[txn] && !l.inDoubt[txn] {
			problems = append(problems, fmt.Sprintf("%s read but never ended: %v", txn, byTxn[txn]))
		}
	}
	slices.Sort(problems)
	if len(problems) > 0 {
		t.Errorf("transactions: %d problems: %s", len(problems), strings.Join(first(problems, 20), "; "))
	}
	if len(l.committed) == 0 || len(l.aborted) == 0 {
		t.Errorf("transactions: %d committed, %d aborted: the load did not run", len(l.committed), len(l.aborted))
	}
	return fmt.Sprintf("transactions: %d committed (read whole), %d aborted (none read), %d in doubt (%d read whole), %d problems",
		len(l.committed), len(l.aborted), len(l.inDoubt), inDoubtVisible, len(problems))
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}

// readCommitted reads a topic at read_committed until a few seconds pass
// with nothing new (every transaction has ended: see check).
func readCommitted(t *testing.T, ctx context.Context, seeds kgo.Opt, topic string) []string {
	cl, err := kgo.NewClient(seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []string
	for quiet := time.Now(); time.Since(quiet) < 5*time.Second; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, string(r.Value))
			quiet = time.Now()
		})
	}
	return out
}
