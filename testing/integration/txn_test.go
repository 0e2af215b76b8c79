package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// txnProps keep the transaction and group coordinators quick to test.
var txnProps = []string{
	"--set", "transaction.state.log.num.partitions=4",
	"--set", "offsets.topic.num.partitions=4",
	"--set", "group.initial.rebalance.delay.ms=100",
	"--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
}

// readAll consumes every partition of topic from the start, with the given
// isolation, until nothing arrives for a while; it returns the values.
func readAll(t *testing.T, addr, topic string, committed bool) []string {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl := tandemtest.Client(t, addr, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	var out []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if errors.Is(fs.Err0(), context.DeadlineExceeded) {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	slices.Sort(out)
	return out
}

// checkAbortThenCommit checks what consumers see after a transaction over
// 3 partitions (values prefix-aborted-*) aborted and one (prefix-committed-*)
// committed.
func checkAbortThenCommit(t *testing.T, addr, topic string, afterAbort bool) {
	t.Helper()
	rc, ru := readAll(t, addr, topic, true), readAll(t, addr, topic, false)
	if afterAbort {
		if len(rc) != 0 || len(ru) != 6 {
			t.Fatalf("after abort: read_committed %v, read_uncommitted %v", rc, ru)
		}
		return
	}
	if len(rc) != 6 || len(ru) != 12 {
		t.Fatalf("after commit: read_committed %d records %v, read_uncommitted %d", len(rc), rc, len(ru))
	}
}

// keyCounter counts the requests a client writes, by key.
type keyCounter struct {
	mu   sync.Mutex
	keys map[kmsg.Key]int
}

func (c *keyCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[kmsg.Key]int{}
	}
	if err == nil {
		c.keys[kmsg.Key(key)]++
	}
}

// take returns the counts and starts afresh.
func (c *keyCounter) take() map[kmsg.Key]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keys
	c.keys = nil
	return k
}

// TestTxnFranzGoAbortCommit: a franz-go transactional producer writes to 3
// partitions and aborts, then commits. The broker finalizes
// transaction.version 2, so from its second transaction on (its first
// connection's ApiVersions v5 gets the feature-less KIP-511 fallback)
// the client skips AddPartitionsToTxn and its EndTxn v5 bumps the epoch.
func TestTxnFranzGoAbortCommit(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir(), txnProps...)
	tandemtest.CreateTopic(t, p.Addr, "txf", 3)
	var keys keyCounter
	cl := tandemtest.Client(t, p.Addr, kgo.TransactionalID("txf"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.WithHooks(&keys))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(prefix string, commit bool) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			r := &kgo.Record{Topic: "txf", Partition: int32(i % 3), Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	run("aborted", false)
	checkAbortThenCommit(t, p.Addr, "txf", true)
	keys.take()
	_, before, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run("committed", true)
	checkAbortThenCommit(t, p.Addr, "txf", false)
	_, after, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if k := keys.take(); k[kmsg.AddPartitionsToTxn] != 0 || k[kmsg.EndTxn] != 1 || after != before+1 {
		t.Fatalf("transaction.version 2: %d AddPartitionsToTxn, %d EndTxn, epoch %d -> %d", k[kmsg.AddPartitionsToTxn], k[kmsg.EndTxn], before, after)
	}
}

// TestTxnSaramaAbortCommit: the same with sarama's transactional producer.
func TestTxnSaramaAbortCommit(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir(), txnProps...)
	tandemtest.CreateTopic(t, p.Addr, "txs", 3)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Transaction.ID = "txs"
	cfg.Net.MaxOpenRequests = 1
	prod, err := sarama.NewSyncProducer([]string{p.Addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	run := func(prefix string, commit bool) {
		if err := prod.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: "txs", Partition: int32(i % 3),
				Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", prefix, i))}); err != nil {
				t.Fatal(err)
			}
		}
		end := prod.AbortTxn
		if commit {
			end = prod.CommitTxn
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
	}
	run("aborted", false)
	checkAbortThenCommit(t, p.Addr, "txs", true)
	run("committed", true)
	checkAbortThenCommit(t, p.Addr, "txs", false)
}

// TestTxnGroupTransactSessionKill9: franz-go's GroupTransactSession copies
// an input topic to an output topic in consume-transform-produce
// transactions while the broker is killed with SIGKILL and restarted twice;
// the output read with read_committed holds every input record exactly
// once.
func TestTxnGroupTransactSessionKill9(t *testing.T) {
	const n = 3000
	p := tandemtest.StartProcess(t, t.TempDir(), txnProps...)
	tandemtest.CreateTopic(t, p.Addr, "eos-in", 3)
	tandemtest.CreateTopic(t, p.Addr, "eos-out", 3)
	// Small batches and small fetches: the session runs many small
	// transactions, so that the kills land in the middle of the work.
	for i := 0; i < n; i += 50 {
		produceValues(t, p.Addr, "eos-in", i, i+50)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var committed atomic.Int64 // records in transactions the session saw commit
	var keys keyCounter
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(p.Addr), kgo.TransactionalID("eos"), kgo.WithHooks(&keys),
			kgo.ConsumerGroup("eos-g"), kgo.ConsumeTopics("eos-in"), kgo.DefaultProduceTopic("eos-out"),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(),
			kgo.TransactionTimeout(10*time.Second), kgo.FetchMaxPartitionBytes(1<<10), kgo.FetchMaxBytes(3<<10),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Error(err)
			return
		}
		defer sess.Close()
		for ctx.Err() == nil {
			fs := sess.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			if err := sess.Begin(); err != nil {
				t.Errorf("begin: %v", err)
				return
			}
			var recs int64
			fs.EachRecord(func(r *kgo.Record) {
				recs++
				sess.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value}, nil)
			})
			ok, err := sess.End(ctx, kgo.TryCommit)
			if ok && err == nil {
				committed.Add(recs)
			}
			// Errors while the broker is down abort the transaction:
			// the session rewinds to the last committed offsets. When
			// the client could not even reach the broker to abort
			// (its retries ran out while the broker restarted), it
			// stays in the transaction; franz-go's documented way out
			// is to end it again with TryAbort until that succeeds.
			for err != nil && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
				_, err = sess.End(ctx, kgo.TryAbort)
			}
		}
	}()

	for _, at := range []int64{n / 3, 2 * n / 3} {
		eventually(t, fmt.Sprintf("%d records committed", at), func() bool { return committed.Load() >= at })
		p.Kill9()
		p.Restart()
	}

	// Read the output as a read_committed consumer until every value
	// arrived, and a little longer to catch duplicates.
	out := tandemtest.Client(t, p.Addr, kgo.ConsumeTopics("eos-out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]int{}
	poll := func() {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		fs := out.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	wait.Until(t, 90*time.Second, func() error {
		if poll(); len(seen) < n {
			return fmt.Errorf("only %d of %d records reached the output", len(seen), n)
		}
		return nil
	})
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		poll() // a little longer, for duplicates
	}
	cancel()
	wg.Wait()
	for i := range n {
		if c := seen[groupValue(i)]; c != 1 {
			t.Errorf("%s seen %d times", groupValue(i), c)
		}
	}
	if len(seen) != n {
		t.Errorf("output has %d distinct values, want %d", len(seen), n)
	}
	// transaction.version 2: offsets go in with TxnOffsetCommit v5
	// alone, AddOffsetsToTxn only before the client opted in.
	k := keys.take()
	t.Logf("requests: %d TxnOffsetCommit, %d AddOffsetsToTxn, %d EndTxn", k[kmsg.TxnOffsetCommit], k[kmsg.AddOffsetsToTxn], k[kmsg.EndTxn])
	if k[kmsg.TxnOffsetCommit] == 0 || k[kmsg.AddOffsetsToTxn] >= k[kmsg.TxnOffsetCommit] {
		t.Errorf("%d AddOffsetsToTxn for %d TxnOffsetCommit: the session did not use transaction.version 2", k[kmsg.AddOffsetsToTxn], k[kmsg.TxnOffsetCommit])
	}
}
