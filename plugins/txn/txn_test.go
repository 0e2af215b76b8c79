package txn_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/plugins/txn"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

var testProps = map[string]string{
	"offsets.topic.num.partitions":                                "3",
	"transaction.state.log.num.partitions":                        "3",
	"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
	"group.initial.rebalance.delay.ms":                            "50",
}

// startBroker runs a broker with the groups and transaction plugins on dir
// (a restart passes the same dir). stop closes it early.
func startBroker(t *testing.T, dir string) (b *server.Broker, stop func()) {
	t.Helper()
	return startBrokerAt(t, dir, nil)
}

// startBrokerAt is startBroker with the transaction coordinator on clk
// (nil: the wall clock).
func startBrokerAt(t *testing.T, dir string, clk *aheadClock) (b *server.Broker, stop func()) {
	t.Helper()
	log := tandemtest.Logger(t)
	tx := txn.New(testProps, log)
	if clk != nil {
		txn.SetClock(tx, clk.Now)
	}
	b, err := server.New(server.Config{DataDir: dir, Listen: "127.0.0.1:0", Props: testProps, Logger: log,
		Plugins: []any{groups.New(testProps, log), tx}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	closed := false
	stop = func() {
		if !closed {
			closed = true
			b.Close()
		}
	}
	t.Cleanup(stop)
	return b, stop
}

// aheadClock is the wall clock plus a lead the test adds to: the
// coordinator's timers still tick in real time, but a transaction's
// timeout passes when the test advances the clock past it, not before.
type aheadClock struct{ lead atomic.Int64 }

func (c *aheadClock) Now() time.Time { return time.Now().Add(time.Duration(c.lead.Load())) }

// Advance moves the clock d ahead.
func (c *aheadClock) Advance(d time.Duration) { c.lead.Add(int64(d)) }

// rawFetch reads a partition from offset 0 with the given isolation and
// returns the batches and the partition's response.
func rawFetch(t *testing.T, addr, topic string, partition int32, iso int8) (kmsg.FetchResponseTopicPartition, []kmsg.RecordBatch) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes, req.IsolationLevel, req.MaxWaitMillis = 11, 1<<20, iso, 10
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes = partition, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	raw, err := tandemtest.Dial(t, addr).Request(req) // the version as set: topics by name
	if err != nil {
		t.Fatal(err)
	}
	p := raw.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("fetch %s-%d: %v", topic, partition, kerr.ErrorForCode(p.ErrorCode))
	}
	var batches []kmsg.RecordBatch
	for rest := p.RecordBatches; len(rest) > 0; {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(rest); err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
		rest = rest[12+b.Length:]
	}
	return p, batches
}

// consumeAll reads every partition of topic from the start until idle.
func consumeAll(t *testing.T, addr, topic string, committed bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Read up to the end the broker reports now (the last stable offset for
	// read_committed, the high watermark otherwise), not until a quiet spell:
	// a loaded machine can be quiet for seconds in the middle of a topic.
	// Control records are kept so that a partition ending in a marker is
	// seen to end; they are not returned.
	adm := kadm.NewClient(tandemtest.Client(t, addr))
	iso := kgo.ReadUncommitted()
	list := adm.ListEndOffsets
	if committed {
		iso = kgo.ReadCommitted()
		list = adm.ListCommittedOffsets
	}
	ends, err := list(ctx, topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl := tandemtest.Client(t, addr, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	var out []string
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			// What is left is aborted data at a partition's end (skipped
			// without a marker after it yet): return what was read and
			// let the caller's assertions judge it.
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, string(r.Value))
			}
			if end, ok := want[r.Partition]; ok && r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
	}
	slices.Sort(out)
	return out
}

func txnClient(t *testing.T, addr, id string, opts ...kgo.Opt) *kgo.Client {
	return tandemtest.Client(t, addr, append([]kgo.Opt{kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

func produceTxn(t *testing.T, cl *kgo.Client, topic, prefix string, commit bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		for i := range 2 {
			r := &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", prefix, p, i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

func controlTypes(batches []kmsg.RecordBatch) (types []int16, data int) {
	for _, b := range batches {
		if b.Attributes&0x20 != 0 {
			types = append(types, int16(b.Records[len(b.Records)-9])) // key: version int16, type int16 (low byte)
		} else {
			data += int(b.NumRecords)
		}
	}
	return types, data
}

// TestAbortCommitIsolation: a transaction over 3 partitions that aborts is
// invisible to read_committed and visible with its ABORT markers to
// read_uncommitted; one that commits is visible to both.
func TestAbortCommitIsolation(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "t", 3)
	cl := txnClient(t, addr, "tx-iso")

	produceTxn(t, cl, "t", "aborted", false)
	if got := consumeAll(t, addr, "t", true); len(got) != 0 {
		t.Fatalf("read_committed saw aborted records: %v", got)
	}
	if got := consumeAll(t, addr, "t", false); len(got) != 6 {
		t.Fatalf("read_uncommitted saw %d records, want 6: %v", len(got), got)
	}
	for p := range int32(3) {
		rp, batches := rawFetch(t, addr, "t", p, 0)
		types, data := controlTypes(batches)
		if !slices.Equal(types, []int16{engine.ControlAbort}) || data != 2 {
			t.Fatalf("partition %d: control types %v, %d records", p, types, data)
		}
		rc, _ := rawFetch(t, addr, "t", p, 1)
		if len(rc.AbortedTransactions) != 1 || rc.AbortedTransactions[0].FirstOffset != 0 || rc.LastStableOffset != rp.HighWatermark {
			t.Fatalf("partition %d: aborted %v, LSO %d, HWM %d", p, rc.AbortedTransactions, rc.LastStableOffset, rp.HighWatermark)
		}
	}

	produceTxn(t, cl, "t", "committed", true)
	committed := consumeAll(t, addr, "t", true)
	if len(committed) != 6 || committed[0] != "committed-0-0" {
		t.Fatalf("read_committed after commit: %v", committed)
	}
	if got := consumeAll(t, addr, "t", false); len(got) != 12 {
		t.Fatalf("read_uncommitted after commit: %d records", len(got))
	}
	_, batches := rawFetch(t, addr, "t", 1, 0)
	if types, _ := controlTypes(batches); !slices.Equal(types, []int16{engine.ControlAbort, engine.ControlCommit}) {
		t.Fatalf("control types %v", types)
	}
}

// TestZombieFenced: a second producer with the same transactional id
// fences the first, whose open transaction is aborted.
func TestZombieFenced(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "z", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	zombie := txnClient(t, addr, "tx-z")
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.ProduceSync(ctx, &kgo.Record{Topic: "z", Partition: 0, Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fresh := txnClient(t, addr, "tx-z")
	produceTxn(t, fresh, "z", "fresh", true)

	err := zombie.ProduceSync(ctx, &kgo.Record{Topic: "z", Partition: 1, Value: []byte("zombie-2")}).FirstErr()
	if err == nil {
		err = zombie.EndTransaction(ctx, kgo.TryCommit)
	}
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("zombie: got %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", err)
	}
	got := consumeAll(t, addr, "z", true)
	if len(got) != 6 || slices.Contains(got, "zombie") {
		t.Fatalf("read_committed: %v", got)
	}
}

// TestTimeoutAbortAndRestart: a transaction left open past its timeout is
// aborted by the coordinator and the LSO advances; after a restart the
// LSO, the aborted index and the coordinator's state come back.
func TestTimeoutAbortAndRestart(t *testing.T) {
	dir := t.TempDir()
	clk := &aheadClock{}
	b, stop := startBrokerAt(t, dir, clk)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "o", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	committer := txnClient(t, addr, "tx-commit")
	produceTxn(t, committer, "o", "c", true)

	slow := txnClient(t, addr, "tx-slow", kgo.TransactionTimeout(time.Minute))
	if err := slow.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if err := slow.ProduceSync(ctx, &kgo.Record{Topic: "o", Partition: p, Value: []byte("slow")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	open := txnClient(t, addr, "tx-open", kgo.TransactionTimeout(10*time.Minute))
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := open.ProduceSync(ctx, &kgo.Record{Topic: "o", Partition: 2, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	lso := func(p int32) int64 {
		rp, _ := rawFetch(t, addr, "o", p, 1)
		return rp.LastStableOffset
	}
	if got := lso(0); got != 3 { // offsets 0-1 committed, 2 the COMMIT marker, 3 the open transaction
		t.Fatalf("LSO of partition 0 with the slow transaction open: %d, want 3", got)
	}
	clk.Advance(time.Minute) // past tx-slow's timeout, not tx-open's
	// The coordinator aborts in the background: it writes the markers of
	// partitions 0 and 1 at once, waits until each is replicated, then
	// records CompleteAbort. Partition 0's LSO moves when its marker is
	// appended, before the high watermark has passed it (or partition 1
	// has its marker): the abort is done once the coordinator says so.
	adm := kadm.NewClient(tandemtest.Client(t, addr))
	wait.Until(t, 10*time.Second, func() error {
		if lso(0) == 3 {
			return errors.New("the timed-out transaction is not aborted: the LSO is still 3")
		}
		d, err := adm.DescribeTransactions(ctx, "tx-slow")
		if err != nil {
			return err
		}
		if st := d["tx-slow"].State; st != "CompleteAbort" {
			return fmt.Errorf("the timed-out transaction is %s, not CompleteAbort", st)
		}
		return nil
	})
	rp, _ := rawFetch(t, addr, "o", 0, 1)
	if rp.LastStableOffset != rp.HighWatermark || len(rp.AbortedTransactions) != 1 {
		t.Fatalf("after abort: LSO %d HWM %d aborted %v", rp.LastStableOffset, rp.HighWatermark, rp.AbortedTransactions)
	}
	if err := slow.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("the timed-out producer committed")
	}

	describe := func(addr string) map[string]kadm.DescribedTransaction {
		d, err := kadm.NewClient(tandemtest.Client(t, addr)).DescribeTransactions(ctx, "tx-commit", "tx-slow", "tx-open")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]kadm.DescribedTransaction{}
		for id, tx := range d {
			if tx.Err != nil {
				t.Fatalf("describe %s: %v", id, tx.Err)
			}
			tx.Coordinator = 0
			out[id] = tx
		}
		return out
	}
	type state struct {
		lso     [3]int64
		aborted [3][]kmsg.FetchResponseTopicPartitionAbortedTransaction
		txns    map[string]kadm.DescribedTransaction
	}
	snapshot := func(addr string) state {
		var s state
		for p := range int32(3) {
			rp, _ := rawFetch(t, addr, "o", p, 1)
			s.lso[p], s.aborted[p] = rp.LastStableOffset, rp.AbortedTransactions
		}
		s.txns = describe(addr)
		return s
	}
	before := snapshot(addr)
	if st := before.txns["tx-open"].State; st != "Ongoing" {
		t.Fatalf("tx-open is %s", st)
	}
	if st := before.txns["tx-slow"].State; st != "CompleteAbort" {
		t.Fatalf("tx-slow is %s", st)
	}
	if before.lso[2] != 3 {
		t.Fatalf("LSO of partition 2 with tx-open: %d", before.lso[2])
	}
	open.Close()
	stop()

	b2, _ := startBrokerAt(t, dir, clk)
	after := snapshot(b2.Addr())
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("state changed across restart:\nbefore %+v\nafter  %+v", before, after)
	}
	l, err := kadm.NewClient(tandemtest.Client(t, b2.Addr())).ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil || len(l.TransactionalIDs()) != 1 || l.TransactionalIDs()[0] != "tx-open" {
		t.Fatalf("ListTransactions Ongoing: %v %v", l.TransactionalIDs(), err)
	}
}

// TestTxnOffsetCommitPending: offsets committed in a transaction are
// UNSTABLE_OFFSET_COMMIT for require_stable fetches until the COMMIT
// marker, then the group's offsets; an abort drops them.
func TestTxnOffsetCommitPending(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "in", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := txnClient(t, addr, "tx-offsets")
	admin := tandemtest.Client(t, addr)
	fetch := func() (int64, int16) {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group, req.RequireStable = "g", true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = "in", []int32{0}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Groups) > 0 {
			p := resp.Groups[0].Topics[0].Partitions[0]
			return p.Offset, p.ErrorCode
		}
		p := resp.Topics[0].Partitions[0]
		return p.Offset, p.ErrorCode
	}
	commitIn := func(offset int64, commit bool) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// AddOffsetsToTxn then TxnOffsetCommit, as a transactional
		// consumer-producer does.
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		id, epoch, err := cl.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "tx-offsets", id, epoch, "g"
		if resp, err := add.RequestWith(ctx, admin); err != nil || resp.ErrorCode != 0 {
			t.Fatalf("AddOffsetsToTxn: %v %v", err, kerr.ErrorForCode(resp.ErrorCode))
		}
		toc := kmsg.NewPtrTxnOffsetCommitRequest()
		toc.TransactionalID, toc.Group, toc.ProducerID, toc.ProducerEpoch, toc.Generation = "tx-offsets", "g", id, epoch, -1
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = "in"
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = 0, offset, -1
		rt.Partitions = append(rt.Partitions, rp)
		toc.Topics = append(toc.Topics, rt)
		resp, err := toc.RequestWith(ctx, admin)
		if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("TxnOffsetCommit: %v %+v", err, resp)
		}
		if _, code := fetch(); code != kerr.UnstableOffsetCommit.Code {
			t.Fatalf("require_stable fetch during the transaction: %v", kerr.ErrorForCode(code))
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	commitIn(5, true)
	if off, code := fetch(); code != 0 || off != 5 {
		t.Fatalf("after commit: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	commitIn(9, false)
	if off, code := fetch(); code != 0 || off != 5 {
		t.Fatalf("after abort: offset %d, %v", off, kerr.ErrorForCode(code))
	}
}
