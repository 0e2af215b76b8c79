package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/internal/uuid"
)

// The tests here run fetchers in process against a real source (kfake)
// and a destination of real engine partitions on a temp dir, the way the
// mirror appends: OriginCrossCluster, the batches as fetched.

const topic = "src"

// source is a kfake cluster with topic, and a client to it.
type source struct {
	c    *kfake.Cluster
	cl   *kgo.Client
	meta *kgo.Client // for the brokers' addresses, open while the test runs
}

func newSource(t *testing.T, brokers int, partitions int32) *source {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	meta, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(meta.Close)
	return &source{c: c, cl: cl, meta: meta}
}

// addr is Config.Addr: where source broker id listens.
func (s *source) addr(id int32) (string, error) {
	for _, b := range s.c.ListenAddrs() {
		if n, ok := s.nodeOf(b); ok && n == id {
			return b, nil
		}
	}
	return "", fmt.Errorf("no source broker %d", id)
}

// nodeOf is the node ID of the kfake broker listening on addr.
func (s *source) nodeOf(addr string) (int32, bool) {
	req := kmsg.NewPtrMetadataRequest()
	resp, err := req.RequestWith(context.Background(), s.meta)
	if err != nil {
		return 0, false
	}
	for _, b := range resp.Brokers {
		if fmt.Sprintf("%s:%d", b.Host, b.Port) == addr {
			return b.NodeID, true
		}
	}
	return 0, false
}

// produce writes n records to partition p in one batch.
func (s *source) produce(t *testing.T, p int32, n int) {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "p%d-%d", p, i)})
	}
	if err := s.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// transaction writes a record to each of parts in one transaction, then
// commits or aborts it: transactional batches and their markers.
func (s *source) transaction(t *testing.T, commit bool, parts ...int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("in a transaction")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// sourcePartition is what the source's metadata says of a partition.
type sourcePartition struct {
	leader, epoch int32
}

// metadata returns topic's ID and partitions.
func (s *source) metadata(t *testing.T) (uuid.UUID, map[int32]sourcePartition) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), s.cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata: %+v", resp.Topics)
	}
	out := map[int32]sourcePartition{}
	for _, p := range resp.Topics[0].Partitions {
		out[p.Partition] = sourcePartition{p.Leader, p.LeaderEpoch}
	}
	return uuid.UUID(resp.Topics[0].TopicID), out
}

// read returns partition p's record batches as the source serves them to
// a plain Fetch from offset 0 (read uncommitted, any epoch), and its high
// watermark.
func (s *source) read(t *testing.T, id uuid.UUID, p int32) ([]byte, int64) {
	t.Helper()
	var out []byte
	for {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.SessionEpoch, req.MaxBytes = -1, -1, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p, next(out), 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), s.cl.Broker(int(s.c.LeaderFor(topic, p))))
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Topics[0].Partitions[0]
		if got.ErrorCode != 0 {
			t.Fatalf("fetch %d: %v", p, kerr.ErrorForCode(got.ErrorCode))
		}
		out = append(out, trim(got.RecordBatches, -1).keep...)
		if next(out) >= got.HighWatermark {
			return out, got.HighWatermark
		}
	}
}

// next is the offset after the last of the whole batches b.
func next(b []byte) int64 {
	n := int64(0)
	engine.LeadingBatches(b, func(h engine.BatchHeader) bool { n = h.LastOffset() + 1; return true })
	return n
}

// destination is engine partitions of the mirror topic, on a temp dir.
type destination struct {
	e     *engine.Engine
	parts map[int32]*engine.Partition
}

func newDestination(t *testing.T, id uuid.UUID, partitions int32) *destination {
	t.Helper()
	e, err := engine.Open(engine.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	d := &destination{e: e, parts: map[int32]*engine.Partition{}}
	for p := range partitions {
		if d.parts[p], err = e.Create(topic, engine.TopicID(id), p, engine.DefaultLogConfig()); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// log returns partition p's record batches, read back from offset 0.
func (d *destination) log(t *testing.T, p int32) []byte {
	t.Helper()
	var out []byte
	for end := d.parts[p].Offsets().LogEnd; next(out) < end; {
		res, err := d.parts[p].Fetch(next(out), 1<<20, engine.ReadUncommitted)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range res.Batches {
			out = append(out, b...)
		}
	}
	return out
}

// target is the mirror as a test fetcher sees it: it fetches some
// partitions of the destination from their log ends and appends what it
// gets, as the mirror does.
type target struct {
	dst   *destination
	id    uuid.UUID
	parts map[int32]sourcePartition // the fetcher's, with the epochs to fetch for
	// from, if set, is where partitions start instead of the log end.
	from map[int32]int64
	// ends are where each partition is caught up; done is closed when
	// all are.
	ends map[int32]int64
	done chan struct{}

	mu          sync.Mutex
	round       int
	events      []event // Apply and wait calls, in order
	codes       []int16 // error codes of the partitions' answers
	unreachable []error
}

type event struct {
	round     int
	wait      bool // a wait, else an Apply
	partition int32
}

// Generation implements Target: a test moves positions only through the
// fetcher's appends.
func (t *target) Generation() uint64 { return 0 }

func (t *target) Partitions() ([]Partition, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Partition
	for p, sp := range t.parts {
		ep := t.dst.parts[p]
		offs := ep.Offsets()
		fp := Partition{Topic: topic, TopicID: t.id, Partition: p, FetchOffset: offs.LogEnd, LeaderEpoch: sp.epoch, LastFetchedEpoch: -1}
		if offs.LogEnd > offs.LogStart {
			fp.LastFetchedEpoch = ep.EpochAt(offs.LogEnd - 1)
		}
		if at, ok := t.from[p]; ok {
			fp.FetchOffset = at
		}
		out = append(out, fp)
	}
	slices.SortFunc(out, func(a, b Partition) int { return int(a.Partition - b.Partition) })
	return out, nil
}

func (t *target) Unreachable(err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unreachable = append(t.unreachable, err)
	return err
}

// Answered counts the rounds: the Apply calls after it are its round's.
func (t *target) Answered(time.Time, error) {
	t.mu.Lock()
	t.round++
	t.mu.Unlock()
}

func (t *target) Apply(p Partition, rp *kmsg.FetchResponseTopicPartition) (int, func() error, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	round := t.round
	t.events = append(t.events, event{round: round, partition: p.Partition})
	if rp.ErrorCode != 0 {
		t.codes = append(t.codes, rp.ErrorCode)
		return 0, nil, kerr.ErrorForCode(rp.ErrorCode)
	}
	if len(rp.RecordBatches) == 0 {
		return 0, nil, nil
	}
	ep := t.dst.parts[p.Partition]
	if end := ep.Offsets().LogEnd; end != p.FetchOffset && t.from == nil {
		// As the mirror does: an earlier append failed after this
		// Fetch was sent.
		return 0, nil, fmt.Errorf("fetched from %d, the log ends at %d: %w", p.FetchOffset, end, engine.ErrUnexpectedAppendOffset)
	}
	appended := ep.AppendAsync(context.Background(), &engine.AppendRequest{Topic: topic, TopicID: engine.TopicID(t.id), Partition: p.Partition,
		Origin: engine.OriginCrossCluster, Records: rp.RecordBatches, Acks: -1})
	return len(rp.RecordBatches), func() error {
		_, err := appended()
		t.mu.Lock()
		defer t.mu.Unlock()
		t.events = append(t.events, event{round: round, wait: true, partition: p.Partition})
		if err != nil {
			return err
		}
		if t.ends != nil && t.caughtUp() {
			t.ends = nil
			close(t.done)
		}
		return nil
	}, nil
}

func (t *target) caughtUp() bool {
	for p, end := range t.ends {
		if t.dst.parts[p].Offsets().LogEnd < end {
			return false
		}
	}
	return true
}

// run runs a fetcher until stop (at the latest when the test ends);
// cfg's client options are the source's.
func run(t *testing.T, s *source, k Key, cfg Config, tg Target) (stop func()) {
	cfg.Addr = s.addr
	cfg.RequestTimeout = max(cfg.RequestTimeout, 10*time.Second)
	cfg.MinBytes, cfg.MaxBytes, cfg.PartitionMaxBytes = 1, 10<<20, 1<<20
	cfg.MaxWait = max(cfg.MaxWait, 100*time.Millisecond)
	cfg.Backoff = 10 * time.Millisecond
	f := New(context.Background(), k, cfg, tg)
	go f.Run()
	t.Cleanup(f.Stop)
	return f.Stop
}

// wait waits for c, failing t if it takes a minute (the fetcher is stuck).
func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Fatalf("no %s after a minute", what)
	}
}

type count struct {
	mu sync.Mutex
	n  int
}

func (c *count) Add(n int) { c.mu.Lock(); c.n += n; c.mu.Unlock() }

func (c *count) get() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// TestCopy copies every partition of a source with several brokers, one
// fetcher per broker, and finds the destination holding the source's
// batches byte for byte at the same offsets: plain batches, a committed
// and an aborted transaction with their markers.
func TestCopy(t *testing.T) {
	const partitions = 4
	s := newSource(t, 2, partitions)
	for p := range int32(partitions) {
		if err := s.c.MoveTopicPartition(topic, p, p%2); err != nil { // two fetchers, one each broker
			t.Fatal(err)
		}
		for i := range 3 {
			s.produce(t, p, 1+i*5)
		}
	}
	s.transaction(t, true, 0, 1)
	s.transaction(t, false, 1, 2)
	id, meta := s.metadata(t)
	want, ends := map[int32][]byte{}, map[int32]int64{}
	for p := range int32(partitions) {
		want[p], ends[p] = s.read(t, id, p)
	}
	// The first Fetch the source sees fails: the fetcher reports it,
	// reconnects and goes on.
	s.c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		return nil, errors.New("connection dropped"), true
	})

	dst := newDestination(t, id, partitions)
	byBroker := map[int32]*target{}
	for p, sp := range meta {
		tg := byBroker[sp.leader]
		if tg == nil {
			tg = &target{dst: dst, id: id, parts: map[int32]sourcePartition{}, ends: map[int32]int64{}, done: make(chan struct{})}
			byBroker[sp.leader] = tg
		}
		tg.parts[p], tg.ends[p] = sp, ends[p]
	}
	requests, bytesIn := &count{}, &count{}
	var stops []func()
	for b, tg := range byBroker {
		stops = append(stops, run(t, s, Key{Broker: b}, Config{Requests: requests, Bytes: bytesIn}, tg))
	}
	for b, tg := range byBroker {
		wait(t, tg.done, fmt.Sprintf("copy from broker %d", b))
	}
	// Before the fetchers stop: a stop abandons a fetch, as unreachable.
	unreachable := 0
	for _, tg := range byBroker {
		tg.mu.Lock()
		unreachable += len(tg.unreachable)
		tg.mu.Unlock()
	}
	for _, stop := range stops {
		stop()
	}

	total := 0
	for p := range int32(partitions) {
		got := dst.log(t, p)
		if !bytes.Equal(got, want[p]) {
			t.Errorf("partition %d: the destination holds %d bytes (to offset %d), the source %d (to %d), not the same", p, len(got), next(got), len(want[p]), next(want[p]))
		}
		if end := dst.parts[p].Offsets().LogEnd; end != ends[p] {
			t.Errorf("partition %d: log end %d, the source's %d", p, end, ends[p])
		}
		total += len(want[p])
	}
	if unreachable != 1 {
		t.Errorf("%d fetches reported unreachable, want the one dropped", unreachable)
	}
	if got := bytesIn.get(); got != total {
		t.Errorf("bytes counted %d, appended %d", got, total)
	}
	if requests.get() < len(byBroker)+1 {
		t.Errorf("requests counted %d, want at least %d", requests.get(), len(byBroker)+1)
	}
}

// TestAppendsWaitedTogether: in a round, every partition's append is
// written before any is waited for.
func TestAppendsWaitedTogether(t *testing.T) {
	const partitions = 3
	s := newSource(t, 1, partitions)
	for p := range int32(partitions) {
		s.produce(t, p, 10)
	}
	id, meta := s.metadata(t)
	dst := newDestination(t, id, partitions)
	tg := &target{dst: dst, id: id, parts: meta, ends: map[int32]int64{}, done: make(chan struct{})}
	for p := range int32(partitions) {
		_, tg.ends[p] = s.read(t, id, p)
	}
	stop := run(t, s, Key{Broker: 0}, Config{}, tg)
	wait(t, tg.done, "copy")
	stop()

	waits := map[int]int{}
	for i, e := range tg.events {
		if !e.wait {
			continue
		}
		waits[e.round]++
		if j := slices.IndexFunc(tg.events[i:], func(a event) bool { return a.round == e.round && !a.wait }); j >= 0 {
			t.Fatalf("round %d: partition %d's append was waited for before partition %d's was written: %+v", e.round, e.partition, tg.events[i+j].partition, tg.events)
		}
	}
	if slices.Max(slices.Collect(func(yield func(int) bool) {
		for _, n := range waits {
			yield(n)
		}
	})) < partitions {
		t.Fatalf("no round appended to all %d partitions: %+v", partitions, tg.events)
	}
}

// TestEpochTrim: a Fetch sent for epoch 0 whose answer comes from a leader
// already at epoch 1 (the source moved on while the request was on its
// way) has only the batches of epoch 0 applied (KAFKA-18723).
func TestEpochTrim(t *testing.T) {
	s := newSource(t, 1, 1)
	s.produce(t, 0, 3)
	s.produce(t, 0, 4)
	if err := s.c.MoveTopicPartition(topic, 0, 0); err != nil { // epoch 0 to 1
		t.Fatal(err)
	}
	s.produce(t, 0, 5)
	id, meta := s.metadata(t)
	if meta[0].epoch != 1 {
		t.Fatalf("source epoch %d, want 1", meta[0].epoch)
	}
	all, _ := s.read(t, id, 0)
	epoch0 := all[:engine.LeadingBatches(all, func(h engine.BatchHeader) bool { return h.PartitionLeaderEpoch == 0 })]
	if len(epoch0) == 0 || len(epoch0) == len(all) {
		t.Fatalf("the source's batches are not of epochs 0 then 1")
	}
	// The source answers as if asked for no epoch in particular.
	s.c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		s.c.KeepControl()
		for i := range req.(*kmsg.FetchRequest).Topics {
			for j := range req.(*kmsg.FetchRequest).Topics[i].Partitions {
				req.(*kmsg.FetchRequest).Topics[i].Partitions[j].CurrentLeaderEpoch = -1
			}
		}
		return nil, nil, false
	})

	dst := newDestination(t, id, 1)
	tg := &target{dst: dst, id: id, parts: map[int32]sourcePartition{0: {leader: 0, epoch: 0}},
		ends: map[int32]int64{0: next(epoch0)}, done: make(chan struct{})}
	stop := run(t, s, Key{Broker: 0}, Config{}, tg)
	wait(t, tg.done, "copy of epoch 0")
	stop()
	if got := dst.log(t, 0); !bytes.Equal(got, epoch0) {
		t.Fatalf("the destination holds %d bytes to offset %d, want the %d of epoch 0 to offset %d", len(got), next(got), len(epoch0), next(epoch0))
	}
}

// TestTrimKfakeBatches trims batches as kfake serves them: a partial
// batch at the end, and batches of a newer epoch.
func TestTrimKfakeBatches(t *testing.T) {
	s := newSource(t, 1, 1)
	s.produce(t, 0, 2)
	s.produce(t, 0, 3)
	if err := s.c.MoveTopicPartition(topic, 0, 0); err != nil {
		t.Fatal(err)
	}
	s.produce(t, 0, 4)
	id, _ := s.metadata(t)
	all, _ := s.read(t, id, 0)
	var sizes []int
	engine.LeadingBatches(all, func(h engine.BatchHeader) bool { sizes = append(sizes, int(h.Size())); return true })
	if len(sizes) != 3 {
		t.Fatalf("%d batches, want 3", len(sizes))
	}
	two := sizes[0] + sizes[1]
	for cut := range sizes[2] {
		if got := trim(all[:two+cut], -1).keep; len(got) != two {
			t.Fatalf("cut %d bytes into the last batch: kept %d bytes, want %d", cut, len(got), two)
		}
	}
	for epoch, n := range map[int32]int{-1: len(all), 0: two, 1: len(all), 5: len(all)} {
		if got := trim(all, epoch).keep; len(got) != n {
			t.Errorf("trim(%d) kept %d bytes, want %d", epoch, len(got), n)
		}
	}
}

// TestPartitionErrors: a partition's error in the source's answer reaches
// the target: OFFSET_OUT_OF_RANGE for a fetch position past the source's
// end, FENCED_LEADER_EPOCH for a CurrentLeaderEpoch older than the
// source leader's.
func TestPartitionErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		from  int64 // -1: the log end
		epoch int32
		want  *kerr.Error
	}{
		{"past the end", 15, 1, kerr.OffsetOutOfRange},
		{"stale epoch", -1, 0, kerr.FencedLeaderEpoch},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSource(t, 1, 1)
			s.produce(t, 0, 5)
			if err := s.c.MoveTopicPartition(topic, 0, 0); err != nil { // epoch 1
				t.Fatal(err)
			}
			id, meta := s.metadata(t)
			if meta[0].epoch != 1 {
				t.Fatalf("source epoch %d, want 1", meta[0].epoch)
			}
			dst := newDestination(t, id, 1)
			tg := &target{dst: dst, id: id, parts: map[int32]sourcePartition{0: {leader: 0, epoch: c.epoch}}, from: map[int32]int64{}}
			if c.from >= 0 {
				tg.from[0] = c.from
			}
			answered := make(chan struct{})
			stop := run(t, s, Key{Broker: 0}, Config{}, &codeWatch{target: tg, seen: answered})
			wait(t, answered, "answer")
			stop()
			tg.mu.Lock()
			defer tg.mu.Unlock()
			if len(tg.codes) == 0 || tg.codes[0] != c.want.Code {
				t.Fatalf("codes seen %v, want %v (%d)", tg.codes, c.want, c.want.Code)
			}
			if end := dst.parts[0].Offsets().LogEnd; end != 0 {
				t.Fatalf("log end %d after an error answer", end)
			}
		})
	}
}

// codeWatch closes seen after the first Apply.
type codeWatch struct {
	*target
	seen chan struct{}
	once sync.Once
}

func (c *codeWatch) Apply(p Partition, rp *kmsg.FetchResponseTopicPartition) (int, func() error, error) {
	defer c.once.Do(func() { close(c.seen) })
	return c.target.Apply(p, rp)
}

// TestStopWhileWaiting stops a fetcher whose Fetch waits at the source
// for records that do not come: Stop returns without waiting out the
// fetch's wait, leaves no goroutine of the fetcher or its client, and
// does not report the source unreachable.
func TestStopWhileWaiting(t *testing.T) {
	s := newSource(t, 1, 1)
	s.produce(t, 0, 5)
	id, meta := s.metadata(t)
	_, end := s.read(t, id, 0)
	s.cl.Close()
	dst := newDestination(t, id, 1)
	tg := &target{dst: dst, id: id, parts: meta, from: map[int32]int64{0: end}}
	fetching := make(chan struct{})
	var once sync.Once
	s.c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { close(fetching) })
		return nil, nil, false
	})
	// The Fetch waits an hour at the source, the request's timeout is as
	// long: only Stop ends it.
	f := New(context.Background(), Key{Broker: 0}, Config{Addr: s.addr, RequestTimeout: time.Hour, MaxWait: time.Hour,
		MinBytes: 1, MaxBytes: 1 << 20, PartitionMaxBytes: 1 << 20}, tg)
	ran := make(chan struct{})
	go func() { f.Run(); close(ran) }()
	wait(t, fetching, "Fetch at the source")
	stopped := make(chan struct{})
	go func() { f.Stop(); close(stopped) }()
	wait(t, stopped, "return from Stop")
	wait(t, ran, "return from Run")
	for i := 0; ; i++ {
		left := leftGoroutines()
		if left == "" {
			break
		}
		if i == 100 {
			t.Fatalf("goroutines left after Stop:\n%s", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if len(tg.events) != 0 {
		t.Fatalf("applied %+v, want nothing", tg.events)
	}
	// The source was reachable: a Fetch abandoned by Stop is not a
	// source that did not answer (the mirror would show its partitions
	// as unreachable).
	if len(tg.unreachable) != 0 {
		t.Fatalf("reported unreachable: %v", tg.unreachable)
	}
}

// leftGoroutines are the stacks of goroutines of a fetcher or a client.
func leftGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "mirror/fetch.(*Fetcher)") || strings.Contains(g, "mirror/fetch.(*conn)") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

// TestStopWhileThrottled stops a fetcher that sleeps in its throttle
// after a fetch (at one byte a second, hours for what it fetched): Stop
// returns without waiting the sleep out, and the records fetched were
// applied. The mirror stops a fetcher when the partitions it fetched
// move to another source broker or stop, and its source loop waits for
// that Stop.
func TestStopWhileThrottled(t *testing.T) {
	s := newSource(t, 1, 1)
	s.produce(t, 0, 5)
	id, meta := s.metadata(t)
	_, end := s.read(t, id, 0)
	s.cl.Close()
	dst := newDestination(t, id, 1)
	tg := &target{dst: dst, id: id, parts: meta, ends: map[int32]int64{0: end}, done: make(chan struct{})}
	f := New(context.Background(), Key{Broker: 0}, Config{Addr: s.addr, RequestTimeout: 10 * time.Second, MaxWait: 100 * time.Millisecond,
		MinBytes: 1, MaxBytes: 1 << 20, PartitionMaxBytes: 1 << 20, Backoff: 10 * time.Millisecond,
		Rate: func() int64 { return 1 }}, tg)
	ran := make(chan struct{})
	go func() { f.Run(); close(ran) }()
	wait(t, tg.done, "catch-up of the destination")
	stopped := make(chan struct{})
	go func() { f.Stop(); close(stopped) }()
	wait(t, stopped, "return from Stop")
	wait(t, ran, "return from Run")
	if got := dst.parts[0].Offsets().LogEnd; got != end {
		t.Fatalf("destination log end %d, want %d", got, end)
	}
}

// fetchLog records the Fetch requests a kfake source sees: how many
// partitions each names, and its session epoch.
type fetchLog struct {
	mu       sync.Mutex
	requests []loggedFetch
}

type loggedFetch struct {
	epoch      int32
	partitions []int32
}

func (l *fetchLog) watch(s *source) {
	s.c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		s.c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		lf := loggedFetch{epoch: fr.SessionEpoch}
		for _, t := range fr.Topics {
			for _, p := range t.Partitions {
				lf.partitions = append(lf.partitions, p.Partition)
			}
		}
		l.mu.Lock()
		l.requests = append(l.requests, lf)
		l.mu.Unlock()
		return nil, nil, false
	})
}

func (l *fetchLog) since(i int) []loggedFetch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.requests[min(i, len(l.requests)):])
}

func (l *fetchLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.requests)
}

// TestSessionIdleRounds: once a fetcher has copied its partitions, its
// Fetches name none of them (a KIP-227 incremental session), and a
// partition that gets records is the only one named after its answer;
// the records arrive byte for byte. 200 idle partitions cost a round
// nothing but the round.
func TestSessionIdleRounds(t *testing.T) {
	const partitions = 200
	s := newSource(t, 1, partitions)
	for p := range int32(partitions) {
		s.produce(t, p, 1)
	}
	id, meta := s.metadata(t)
	dst := newDestination(t, id, partitions)
	tg := &target{dst: dst, id: id, parts: meta, ends: map[int32]int64{}, done: make(chan struct{})}
	for p := range int32(partitions) {
		tg.ends[p] = 1
	}
	var log fetchLog
	log.watch(s)
	run(t, s, Key{Broker: 0}, Config{MaxWait: 50 * time.Millisecond}, tg)
	wait(t, tg.done, "copy")

	// Idle: a few rounds name no partition, in one session.
	start := log.len()
	for log.len() < start+5 {
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range log.since(start + 1) { // the first may still name the last partitions moved
		if len(r.partitions) != 0 || r.epoch <= 0 {
			t.Fatalf("an idle round's Fetch names %d partitions at session epoch %d, want none in a session", len(r.partitions), r.epoch)
		}
	}

	// One partition gets records: only it is named again.
	before := log.len()
	tg.mu.Lock()
	tg.ends, tg.done = map[int32]int64{42: 6}, make(chan struct{})
	done := tg.done
	tg.mu.Unlock()
	s.produce(t, 42, 5)
	wait(t, done, "copy of partition 42's new records")
	time.Sleep(200 * time.Millisecond) // a few more rounds
	named := map[int32]bool{}
	for _, r := range log.since(before) {
		for _, p := range r.partitions {
			named[p] = true
		}
	}
	if len(named) != 1 || !named[42] {
		t.Fatalf("after partition 42 got records, the Fetches named %v, want partition 42 alone", slices.Sorted(maps.Keys(named)))
	}
	want, _ := s.read(t, id, 42)
	if got := dst.log(t, 42); !bytes.Equal(got, want) {
		t.Fatalf("partition 42: the destination holds %d bytes, the source %d, not the same", len(got), len(want))
	}
}

// failFirstWait is a target whose first append to partition 0 fails when
// waited for, as an append the engine refused (a fenced epoch) does: it
// is never written.
type failFirstWait struct {
	*target
	once sync.Once
}

func (f *failFirstWait) Apply(p Partition, rp *kmsg.FetchResponseTopicPartition) (n int, wait func() error, err error) {
	failed := false
	if p.Partition == 0 && len(rp.RecordBatches) > 0 {
		f.once.Do(func() { failed = true })
	}
	if failed {
		return len(rp.RecordBatches), func() error { return errors.New("append refused") }, nil
	}
	return f.target.Apply(p, rp)
}

// TestNoHoleAfterFailedAppend: the next Fetch is sent, and its answer
// written, before the last round's appends are durable, from the
// positions after them. When one of those appends fails, the target
// refuses the answers that start past its log's end (the Target
// contract) and the fetcher asks it for the positions again: no records
// land past a hole. (One batch per answer: PartitionMaxBytes 1.)
func TestNoHoleAfterFailedAppend(t *testing.T) {
	s := newSource(t, 1, 1)
	for range 4 {
		s.produce(t, 0, 3)
	}
	id, meta := s.metadata(t)
	want, end := s.read(t, id, 0)
	dst := newDestination(t, id, 1)
	tg := &target{dst: dst, id: id, parts: meta, ends: map[int32]int64{0: end}, done: make(chan struct{})}
	runOneBatch(t, s, &failFirstWait{target: tg})
	wait(t, tg.done, "copy")
	if got := dst.log(t, 0); !bytes.Equal(got, want) {
		t.Fatalf("the destination holds %d bytes to offset %d, the source %d to %d: not the same", len(got), next(got), len(want), next(want))
	}
	if base := firstOffset(dst.log(t, 0)); base != 0 {
		t.Fatalf("the destination's log starts at offset %d", base)
	}
}

// runOneBatch runs a fetcher of source broker 0 whose answers carry one
// batch a partition (fixed limits of one byte: KIP-74 still answers the
// first batch), until the test ends.
func runOneBatch(t *testing.T, s *source, tg Target) {
	f := New(context.Background(), Key{Broker: 0}, Config{Addr: s.addr, RequestTimeout: 10 * time.Second, MaxWait: 50 * time.Millisecond,
		MinBytes: 1, MaxBytes: 1, PartitionMaxBytes: 1, FixedSizes: true, Backoff: 10 * time.Millisecond}, tg)
	go f.Run()
	t.Cleanup(f.Stop)
}

// firstOffset is the base offset of the first batch of b, -1 if none.
func firstOffset(b []byte) int64 {
	first := int64(-1)
	engine.LeadingBatches(b, func(h engine.BatchHeader) bool { first = h.BaseOffset; return false })
	return first
}

// slowRefresh is a target whose Refresh (the mirror's: a ListOffsets to
// the source, a round trip of the long link) lasts until release.
type slowRefresh struct {
	*target
	called  chan struct{} // closed at the first call
	once    sync.Once
	release chan struct{}
	running atomic.Int32
	overlap atomic.Bool // two calls ran at once
}

func (s *slowRefresh) Refresh() {
	if s.running.Add(1) > 1 {
		s.overlap.Store(true)
	}
	defer s.running.Add(-1)
	s.once.Do(func() { close(s.called) })
	<-s.release
}

// TestSlowRefreshHoldsNoRound: the fetcher's rounds go on while a
// Refresh is under way (over a long link it is a round trip: in series
// with the rounds it would take a round trip from each), and no two
// Refresh calls of one fetcher run at once.
func TestSlowRefreshHoldsNoRound(t *testing.T) {
	s := newSource(t, 1, 1)
	s.produce(t, 0, 5)
	id, meta := s.metadata(t)
	_, end := s.read(t, id, 0)
	dst := newDestination(t, id, 1)
	tg := &slowRefresh{target: &target{dst: dst, id: id, parts: meta, ends: map[int32]int64{0: end}, done: make(chan struct{})},
		called: make(chan struct{}), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(tg.release)
		}
	}()
	first := tg.done
	stop := run(t, s, Key{Broker: 0}, Config{}, tg)
	wait(t, first, "the first records")
	wait(t, tg.called, "a Refresh")

	// Where the five records end, set before they are produced: the
	// fetcher may copy them before produce returns.
	tg.mu.Lock()
	tg.ends, tg.done = map[int32]int64{0: end + 5}, make(chan struct{})
	second := tg.done
	tg.mu.Unlock()
	s.produce(t, 0, 5)
	if _, got := s.read(t, id, 0); got != end+5 {
		t.Fatalf("the source ends at %d after 5 more records, want %d", got, end+5)
	}
	wait(t, second, "records produced while a Refresh was under way")
	close(tg.release)
	released = true
	stop()
	if tg.overlap.Load() {
		t.Fatal("two Refresh calls of one fetcher ran at once")
	}
}

// slowApply is a target whose first Apply with records waits until the
// source has seen a Fetch after the one it answers (or 10 s).
type slowApply struct {
	*target
	fetches   atomic.Int32  // seen at the source
	seen      chan struct{} // closed at the second Fetch
	once      sync.Once
	overlaped atomic.Bool
	first     sync.Once
}

func (s *slowApply) Apply(p Partition, rp *kmsg.FetchResponseTopicPartition) (int, func() error, error) {
	if len(rp.RecordBatches) > 0 {
		s.first.Do(func() {
			select {
			case <-s.seen:
				s.overlaped.Store(true)
			case <-time.After(10 * time.Second):
			}
		})
	}
	return s.target.Apply(p, rp)
}

// TestNextFetchBeforeAppends: a fetcher sends its next Fetch before it
// appends an answer's records, so that the source reads and sends the
// next answer while the destination writes (over a long link, and in a
// catch-up, the two otherwise take turns); the copy is still the
// source's, byte for byte.
func TestNextFetchBeforeAppends(t *testing.T) {
	s := newSource(t, 1, 2)
	for p := range int32(2) {
		s.produce(t, p, 50)
	}
	id, meta := s.metadata(t)
	want0, end0 := s.read(t, id, 0)
	want1, end1 := s.read(t, id, 1)
	dst := newDestination(t, id, 2)
	tg := &slowApply{target: &target{dst: dst, id: id, parts: meta, ends: map[int32]int64{0: end0, 1: end1}, done: make(chan struct{})},
		seen: make(chan struct{})}
	s.c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		s.c.KeepControl()
		if tg.fetches.Add(1) == 2 {
			tg.once.Do(func() { close(tg.seen) })
		}
		return nil, nil, false
	})
	run(t, s, Key{Broker: 0}, Config{}, tg)
	wait(t, tg.done, "copy")
	if !tg.overlaped.Load() {
		t.Fatal("the first answer's records were appended before the next Fetch was sent")
	}
	for p, want := range [][]byte{want0, want1} {
		if got := dst.log(t, int32(p)); !bytes.Equal(got, want) {
			t.Fatalf("partition %d: the destination holds %d bytes to offset %d, the source %d to %d", p, len(got), next(got), len(want), next(want))
		}
	}
}

// rewind is a target whose first Apply with records appends them, then
// empties the partition's log and moves the generation (as the mirror
// does on a truncation): the Fetch sent before that Apply asked from the
// old log end, and its answer must not be applied.
type rewind struct {
	*target
	gen     atomic.Uint64
	once    sync.Once
	refused atomic.Int32 // Apply calls from where the log does not end
}

func (r *rewind) Generation() uint64 { return r.gen.Load() }

func (r *rewind) Apply(p Partition, rp *kmsg.FetchResponseTopicPartition) (int, func() error, error) {
	ep := r.dst.parts[p.Partition]
	if len(rp.RecordBatches) > 0 && ep.Offsets().LogEnd != p.FetchOffset {
		r.refused.Add(1)
	}
	n, wait, err := r.target.Apply(p, rp)
	if wait == nil || err != nil {
		return n, wait, err
	}
	rewound := false
	r.once.Do(func() {
		if err = wait(); err == nil {
			err = ep.Truncate(0)
		}
		r.gen.Add(1)
		rewound = true
	})
	if rewound {
		return n, func() error { return err }, nil
	}
	return n, wait, err
}

// TestFetchSentBeforeAMoveIsDropped: when the positions move other than
// by the fetcher's appends (a truncation, a partition added or taken
// away) while its next Fetch is under way, that Fetch's answer is read
// and dropped, never applied from a position the log no longer ends at,
// and the partition is fetched again from where the target says.
func TestFetchSentBeforeAMoveIsDropped(t *testing.T) {
	s := newSource(t, 1, 1)
	for range 4 {
		s.produce(t, 0, 20)
	}
	id, meta := s.metadata(t)
	want, end := s.read(t, id, 0)
	dst := newDestination(t, id, 1)
	tg := &rewind{target: &target{dst: dst, id: id, parts: meta, ends: map[int32]int64{0: end}, done: make(chan struct{})}}
	// One batch an answer: the first answer is not the whole log, and
	// the Fetch sent before its Apply asks for the rest.
	runOneBatch(t, s, tg)
	wait(t, tg.done, "copy")
	if got := dst.log(t, 0); !bytes.Equal(got, want) {
		t.Fatalf("the destination holds %d bytes to offset %d, the source %d to %d: not the same", len(got), next(got), len(want), next(want))
	}
	if n := tg.refused.Load(); n != 0 {
		t.Fatalf("%d answers applied from a position the log did not end at", n)
	}
}
