package txn_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// requestLog counts the requests a client writes, by key
// (kgo.HookBrokerWrite).
type requestLog struct {
	mu   sync.Mutex
	keys map[int16]int
}

func (l *requestLog) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[int16]int{}
	}
	if err == nil {
		l.keys[key]++
	}
}

func (l *requestLog) count(key int16) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys[key]
}

// TestApiVersionsFeature: ApiVersions v3+ finalizes transaction.version 2;
// v0-v2 carry no features.
func TestApiVersionsFeature(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	c := tandemtest.Dial(t, b.Addr())
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version, req.ClientSoftwareName, req.ClientSoftwareVersion = 3, "test", "1"
	raw, err := c.Request(req)
	if err != nil {
		t.Fatal(err)
	}
	resp := raw.(*kmsg.ApiVersionsResponse)
	if resp.FinalizedFeaturesEpoch < 0 || len(resp.FinalizedFeatures) != 1 || resp.FinalizedFeatures[0].Name != "transaction.version" ||
		resp.FinalizedFeatures[0].MaxVersionLevel != 2 || len(resp.SupportedFeatures) != 1 || resp.SupportedFeatures[0].MaxVersion != 2 {
		t.Fatalf("features: epoch %d finalized %+v supported %+v", resp.FinalizedFeaturesEpoch, resp.FinalizedFeatures, resp.SupportedFeatures)
	}
	if i := slices.IndexFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == 26 }); i < 0 || resp.ApiKeys[i].MaxVersion != 5 {
		t.Fatalf("EndTxn not served at v5: %+v", resp.ApiKeys)
	}
}

// TestTV2ClientSkipsAddPartitions: franz-go with default settings sees
// transaction.version 2 and runs its transactions without
// AddPartitionsToTxn (Produce v12+ adds the partitions) and with EndTxn
// v5, whose epoch bump it adopts; abort and commit isolation hold.
func TestTV2ClientSkipsAddPartitions(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "tv2", 3)
	var log requestLog
	cl := txnClient(t, addr, "tx-tv2", kgo.WithHooks(&log))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The client decides at BeginTransaction from the ApiVersions
	// answers it holds. Its first connections ask ApiVersions v5, which
	// we do not serve: the KIP-511 fallback (a v0 body listing every
	// key) has no features, so franz-go runs its first transaction with
	// AddPartitionsToTxn and opts in from its next one, after a
	// connection negotiated v4.
	produceTxn(t, cl, "tv2", "warmup", true)
	log.mu.Lock()
	log.keys = nil
	log.mu.Unlock()

	produceTxn(t, cl, "tv2", "aborted", false)
	_, epoch1, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	produceTxn(t, cl, "tv2", "committed", true)
	_, epoch2, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if epoch2 != epoch1+1 {
		t.Fatalf("epoch after the commit %d, want %d (bumped by EndTxn v5)", epoch2, epoch1+1)
	}
	if n := log.count(int16(kmsg.AddPartitionsToTxn)); n != 0 {
		t.Fatalf("client sent %d AddPartitionsToTxn; a transaction.version 2 client sends none", n)
	}
	if n := log.count(int16(kmsg.EndTxn)); n != 2 {
		t.Fatalf("client sent %d EndTxn, want 2", n)
	}
	if got := consumeAll(t, addr, "tv2", true); len(got) != 12 || got[0] != "committed-0-0" || slices.ContainsFunc(got, func(v string) bool { return v[0] == 'a' }) {
		t.Fatalf("read_committed: %v", got)
	}
	if got := consumeAll(t, addr, "tv2", false); len(got) != 18 {
		t.Fatalf("read_uncommitted: %d records, want 18", len(got))
	}
	// Every marker carries the bumped epoch of its transaction.
	_, batches := rawFetch(t, addr, "tv2", 2, 0)
	var markers []int16
	for _, bt := range batches {
		if bt.Attributes&0x20 != 0 {
			markers = append(markers, bt.ProducerEpoch)
		}
	}
	if len(markers) != 3 || !slices.Equal(markers[1:], []int16{epoch1, epoch2}) {
		t.Fatalf("marker epochs %v, want [_ %d %d]", markers, epoch1, epoch2)
	}
}

// TestTV1ClientUnchanged: a client held to EndTxn v4 and Produce v11
// keeps transaction.version 0/1: AddPartitionsToTxn, no epoch bump.
func TestTV1ClientUnchanged(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "tv1", 3)
	var log requestLog
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	v.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	cl := txnClient(t, addr, "tx-tv1", kgo.WithHooks(&log), kgo.MaxVersions(v))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	produceTxn(t, cl, "tv1", "a", false)
	_, e1, _ := cl.ProducerID(ctx)
	produceTxn(t, cl, "tv1", "c", true)
	_, e2, _ := cl.ProducerID(ctx)
	if e1 != e2 {
		t.Fatalf("epoch moved from %d to %d without transaction.version 2", e1, e2)
	}
	if n := log.count(int16(kmsg.AddPartitionsToTxn)); n == 0 {
		t.Fatal("no AddPartitionsToTxn from a transaction.version 1 client")
	}
	if got := consumeAll(t, addr, "tv1", true); len(got) != 6 || got[0] != "c-0-0" {
		t.Fatalf("read_committed: %v", got)
	}
}

// txnBatch is a transactional batch of one record.
func txnBatch(t *testing.T, pid int64, epoch int16, seq int32, value string) []byte {
	t.Helper()
	b, err := recordbatch.Build(recordbatch.CodecNone, recordbatch.KV{Value: []byte(value)})
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint16(b[21:], 0x10) // transactional
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint32(b[53:], uint32(seq))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// rawTxn drives the transaction APIs by hand on one connection.
type rawTxn struct {
	t         *testing.T
	c         *tandemtest.Conn
	id        string
	timeoutMs int32 // transaction timeout; 0 is a minute
	pid       int64
	epoch     int16
}

// init runs InitProducerId, after FindCoordinator has created
// __transaction_state and while its partition loads.
func (r *rawTxn) init() {
	r.t.Helper()
	find := kmsg.NewPtrFindCoordinatorRequest()
	find.Version, find.CoordinatorType, find.CoordinatorKeys = 4, 1, []string{r.id}
	r.do(find)
	wait.Until(r.t, 10*time.Second, func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.Version, req.TransactionalID, req.TransactionTimeoutMillis = 5, &r.id, cmp.Or(r.timeoutMs, 60000)
		resp := r.do(req).(*kmsg.InitProducerIDResponse)
		if err := r.retriable("InitProducerId", kerr.ErrorForCode(resp.ErrorCode)); err != nil {
			return err
		}
		r.pid, r.epoch = resp.ProducerID, resp.ProducerEpoch
		return nil
	})
}

// retriable is a wait.Until condition's answer to the error of what: nil
// for success, the error for a retriable one, to try again; any other
// error fails the test.
func (r *rawTxn) retriable(what string, err error) error {
	r.t.Helper()
	if ke, ok := err.(*kerr.Error); err != nil && (!ok || !ke.Retriable) {
		r.t.Fatalf("%s: %v", what, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (r *rawTxn) do(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	resp, err := r.c.Request(req)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp
}

// produce sends one transactional record with the given epoch at Produce
// v12 and returns its error.
func (r *rawTxn) produce(topic string, part int32, epoch int16, seq int32, value string) error {
	r.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.TransactionID, req.Acks, req.TimeoutMillis = 12, &r.id, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = part, txnBatch(r.t, r.pid, epoch, seq, value)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := r.do(req).(*kmsg.ProduceResponse)
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

func (r *rawTxn) end(version int16, epoch int16, commit bool) *kmsg.EndTxnResponse {
	req := kmsg.NewPtrEndTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = version, r.id, r.pid, epoch, commit
	return r.do(req).(*kmsg.EndTxnResponse)
}

// endAfterRestart sends an EndTxn to a broker that has just restarted:
// while the coordinator loads and completes what it replayed, it answers
// with retriable errors, which are retried as a client does.
func (r *rawTxn) endAfterRestart(version int16, epoch int16, commit bool) *kmsg.EndTxnResponse {
	r.t.Helper()
	var resp *kmsg.EndTxnResponse
	wait.Until(r.t, 10*time.Second, func() error {
		resp = r.end(version, epoch, commit)
		switch resp.ErrorCode {
		case kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.ConcurrentTransactions.Code:
			return fmt.Errorf("EndTxn after a restart: %w", kerr.ErrorForCode(resp.ErrorCode))
		}
		return nil
	})
	return resp
}

// TestEndTxnV5RetryAfterRestart: the coordinator writes the outcome of an
// EndTxn v5 (and its epoch bump) and stops before the producer reads the
// answer; the producer sends the same EndTxn again to the restarted
// coordinator, which must recognize the retry from the state it replayed
// (the epoch is the request's plus one), as Kafka's does, and answer with
// the bumped epoch. Fencing the producer instead is fatal to it.
func TestEndTxnV5RetryAfterRestart(t *testing.T) {
	dir := t.TempDir()
	b, stop := startBroker(t, dir)
	tandemtest.CreateTopic(t, b.Addr(), "retry", 1)
	r := &rawTxn{t: t, c: tandemtest.Dial(t, b.Addr()), id: "tx-retry"}
	r.init()
	restart := func() {
		t.Helper()
		stop()
		b, stop = startBroker(t, dir)
		r.c = tandemtest.Dial(t, b.Addr())
	}

	// A commit whose answer is lost.
	e := r.epoch
	if err := r.produce("retry", 0, e, 0, "committed"); err != nil {
		t.Fatal(err)
	}
	if resp := r.end(5, e, true); resp.ErrorCode != 0 || resp.ProducerEpoch != e+1 {
		t.Fatalf("EndTxn v5 commit: %v, epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch)
	}
	restart()
	if resp := r.endAfterRestart(5, e, true); resp.ErrorCode != 0 || resp.ProducerID != r.pid || resp.ProducerEpoch != e+1 {
		t.Fatalf("EndTxn v5 commit retried after a restart: %v, producer %d epoch %d; want %d/%d",
			kerr.ErrorForCode(resp.ErrorCode), resp.ProducerID, resp.ProducerEpoch, r.pid, e+1)
	}

	// An abort whose answer is lost; retried as a commit it is the
	// wrong outcome, not a fenced producer.
	e++
	if err := r.produce("retry", 0, e, 0, "aborted"); err != nil {
		t.Fatal(err)
	}
	if resp := r.end(5, e, false); resp.ErrorCode != 0 || resp.ProducerEpoch != e+1 {
		t.Fatalf("EndTxn v5 abort: %v, epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch)
	}
	restart()
	if resp := r.endAfterRestart(5, e, false); resp.ErrorCode != 0 || resp.ProducerEpoch != e+1 {
		t.Fatalf("EndTxn v5 abort retried after a restart: %v, epoch %d; want %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch, e+1)
	}
	if resp := r.end(5, e, true); resp.ErrorCode != kerr.InvalidTxnState.Code {
		t.Fatalf("commit retried for an aborted transaction: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(resp.ErrorCode))
	}

	// The producer goes on with the bumped epoch; the retried ends
	// wrote nothing twice.
	e++
	if err := r.produce("retry", 0, e, 0, "next"); err != nil {
		t.Fatalf("produce with the bumped epoch: %v", err)
	}
	if resp := r.end(5, e, true); resp.ErrorCode != 0 || resp.ProducerEpoch != e+1 {
		t.Fatalf("next EndTxn v5: %v, epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch)
	}
	if got := consumeAll(t, b.Addr(), "retry", true); !slices.Equal(got, []string{"committed", "next"}) {
		t.Fatalf("read_committed: %v", got)
	}
	_, batches := rawFetch(t, b.Addr(), "retry", 0, 0)
	var markers []int16
	for _, bt := range batches {
		if bt.Attributes&0x20 != 0 {
			markers = append(markers, bt.ProducerEpoch)
		}
	}
	if want := []int16{e - 1, e, e + 1}; !slices.Equal(markers, want) {
		t.Fatalf("marker epochs %v, want %v (one marker per transaction)", markers, want)
	}
}

// TestTimedOutTV2ProducerFenced: the coordinator aborts a version 2
// transaction that outlived its timeout; its producer's EndTxn, with the
// epoch it began with, is fenced, before and after a restart: the
// coordinator's abort is not taken for one of the producer's own.
func TestTimedOutTV2ProducerFenced(t *testing.T) {
	dir := t.TempDir()
	clk := &aheadClock{}
	b, stop := startBrokerAt(t, dir, clk)
	tandemtest.CreateTopic(t, b.Addr(), "slow", 1)
	r := &rawTxn{t: t, c: tandemtest.Dial(t, b.Addr()), id: "tx-slow2", timeoutMs: 60000}
	r.init()
	if err := r.produce("slow", 0, r.epoch, 0, "slow"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute) // past the transaction's timeout
	wait.Until(t, 10*time.Second, func() error {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{r.id}
		if st := r.do(req).(*kmsg.DescribeTransactionsResponse).TransactionStates[0]; st.State != "CompleteAbort" {
			return fmt.Errorf("the timed-out transaction is %s, want CompleteAbort", st.State)
		}
		return nil
	})
	check := func(when string) {
		t.Helper()
		for _, commit := range []bool{true, false} {
			if resp := r.endAfterRestart(5, r.epoch, commit); resp.ErrorCode != kerr.ProducerFenced.Code {
				t.Fatalf("%s: EndTxn v5 (commit %v) of the timed-out producer: %v, want PRODUCER_FENCED", when, commit, kerr.ErrorForCode(resp.ErrorCode))
			}
		}
	}
	check("before a restart")
	stop()
	b, _ = startBrokerAt(t, dir, clk)
	r.c = tandemtest.Dial(t, b.Addr())
	check("after a restart")
	if got := consumeAll(t, b.Addr(), "slow", true); len(got) != 0 {
		t.Fatalf("read_committed: %v", got)
	}
}

// TestEndTxnV5EpochBump: with raw requests, Produce v12 starts the
// transaction without AddPartitionsToTxn; EndTxn v5 answers the bumped
// epoch and writes the markers with it; a retry of the EndTxn with the
// old epoch gets the same answer; the zombie with the pre-bump epoch is
// fenced in the partitions of the ended transaction (by the marker) and
// elsewhere (by the coordinator); the new epoch works.
func TestEndTxnV5EpochBump(t *testing.T) {
	dir := t.TempDir()
	b, stop := startBroker(t, dir)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "raw", 2)
	r := &rawTxn{t: t, c: tandemtest.Dial(t, addr), id: "tx-raw"}
	r.init()
	old := r.epoch

	if err := r.produce("raw", 0, old, 0, "one"); err != nil {
		t.Fatalf("Produce v12 without AddPartitionsToTxn: %v", err)
	}
	resp := r.end(5, old, true)
	if resp.ErrorCode != 0 || resp.ProducerID != r.pid || resp.ProducerEpoch != old+1 {
		t.Fatalf("EndTxn v5: %v, producer %d epoch %d; want %d/%d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerID, resp.ProducerEpoch, r.pid, old+1)
	}
	if again := r.end(5, old, true); again.ErrorCode != 0 || again.ProducerEpoch != old+1 {
		t.Fatalf("retried EndTxn v5: %v, epoch %d", kerr.ErrorForCode(again.ErrorCode), again.ProducerEpoch)
	}
	_, batches := rawFetch(t, addr, "raw", 0, 0)
	if n := len(batches); n != 2 || batches[1].Attributes&0x20 == 0 || batches[1].ProducerEpoch != old+1 {
		t.Fatalf("want the record and a COMMIT marker with epoch %d, got %+v", old+1, batches)
	}

	// The zombie: its old epoch is fenced in the partition that has the
	// marker and in one that never saw the transaction.
	for part := range int32(2) {
		if err := r.produce("raw", part, old, 1, "zombie"); err != kerr.InvalidProducerEpoch {
			t.Fatalf("zombie produce to partition %d: %v, want INVALID_PRODUCER_EPOCH", part, err)
		}
	}

	// The producer goes on with the new epoch, sequences from 0; from
	// then on the old epoch's EndTxn is no retry but a zombie.
	if err := r.produce("raw", 1, old+1, 0, "two"); err != nil {
		t.Fatalf("produce with the bumped epoch: %v", err)
	}
	if resp := r.end(5, old, false); resp.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("zombie EndTxn abort: %v, want PRODUCER_FENCED", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := r.end(5, old+1, false); resp.ErrorCode != 0 || resp.ProducerEpoch != old+2 {
		t.Fatalf("abort: %v, epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch)
	}
	// An abort of an empty transaction bumps the epoch too.
	if resp := r.end(5, old+2, false); resp.ErrorCode != 0 || resp.ProducerEpoch != old+3 {
		t.Fatalf("empty abort: %v, epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch)
	}
	if got := consumeAll(t, addr, "raw", true); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("read_committed: %v", got)
	}

	// EndTxn v4 (transaction.version 1) keeps the epoch.
	r.init()
	if err := r.produce("raw", 0, r.epoch, 0, "three"); err != nil {
		t.Fatal(err)
	}
	if resp := r.end(4, r.epoch, true); resp.ErrorCode != 0 {
		t.Fatalf("EndTxn v4: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := r.end(4, r.epoch, true); resp.ErrorCode != 0 {
		t.Fatalf("EndTxn v4 retry with the same epoch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}

	// After a restart (state replayed from __transaction_state) the
	// producer goes on: a version 2 transaction bumps again, the
	// pre-bump epoch stays fenced.
	stop()
	b, _ = startBroker(t, dir)
	r.c = tandemtest.Dial(t, b.Addr())
	wait.Until(t, 10*time.Second, func() error {
		return r.retriable("produce after restart", r.produce("raw", 0, r.epoch, 1, "four"))
	})
	if resp := r.end(5, r.epoch, true); resp.ErrorCode != 0 || resp.ProducerEpoch != r.epoch+1 {
		t.Fatalf("EndTxn v5 after restart: %v, epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch)
	}
	if err := r.produce("raw", 0, r.epoch, 2, "zombie"); err != kerr.InvalidProducerEpoch {
		t.Fatalf("zombie after restart: %v", err)
	}
	if got := consumeAll(t, b.Addr(), "raw", true); !slices.Equal(got, []string{"four", "one", "three"}) {
		t.Fatalf("read_committed after restart: %v", got)
	}
}

// TestTV2OffsetsOnly: a transaction.version 2 client commits offsets with
// TxnOffsetCommit v5 and no AddOffsetsToTxn; EndTxn v5 still writes the
// marker to the groups' offsets topic, so the offsets become committed.
func TestTV2OffsetsOnly(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "in5", 1)
	r := &rawTxn{t: t, c: tandemtest.Dial(t, addr), id: "tx-off5"}
	r.init()
	find := kmsg.NewPtrFindCoordinatorRequest()
	find.Version, find.CoordinatorType, find.CoordinatorKeys = 4, 0, []string{"g5"}
	r.do(find) // creates the offsets topic
	offsetCommit := func(offset int64) {
		t.Helper()
		toc := kmsg.NewPtrTxnOffsetCommitRequest()
		toc.Version, toc.TransactionalID, toc.Group, toc.ProducerID, toc.ProducerEpoch, toc.Generation = 5, r.id, "g5", r.pid, r.epoch, -1
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = "in5"
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = 0, offset, -1
		rt.Partitions = append(rt.Partitions, rp)
		toc.Topics = append(toc.Topics, rt)
		wait.Until(t, 10*time.Second, func() error {
			code := r.do(toc).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
			if code != 0 && code != kerr.NotCoordinator.Code && code != kerr.CoordinatorLoadInProgress.Code {
				t.Fatalf("TxnOffsetCommit v5: %v", kerr.ErrorForCode(code))
			}
			return kerr.ErrorForCode(code)
		})
	}
	commit := func(offset int64, commitTxn bool) {
		t.Helper()
		offsetCommit(offset)
		resp := r.end(5, r.epoch, commitTxn)
		if resp.ErrorCode != 0 || resp.ProducerEpoch != r.epoch+1 {
			t.Fatalf("EndTxn v5: %v epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch)
		}
		r.epoch = resp.ProducerEpoch
	}
	fetch := func() (int64, int16) {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group, req.RequireStable = 7, "g5", true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = "in5", []int32{0}
		req.Topics = append(req.Topics, rt)
		p := r.do(req).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0]
		return p.Offset, p.ErrorCode
	}
	commit(7, true)
	if off, code := fetch(); code != 0 || off != 7 {
		t.Fatalf("after commit: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	commit(11, false)
	if off, code := fetch(); code != 0 || off != 7 {
		t.Fatalf("after abort: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	// A producer that dies with offsets pending: the next one's
	// InitProducerId aborts them.
	offsetCommit(13)
	if _, code := fetch(); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("pending offsets: %v, want UNSTABLE_OFFSET_COMMIT", kerr.ErrorForCode(code))
	}
	r.init()
	if off, code := fetch(); code != 0 || off != 7 {
		t.Fatalf("after the fencing InitProducerId: offset %d, %v", off, kerr.ErrorForCode(code))
	}
}
