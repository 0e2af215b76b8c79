package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/fakeclock"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// createTopic creates a topic through the controller and waits until the
// broker has applied it, without going through the CreateTopics handler.
func createTopic(t testing.TB, b *Broker, name string, partitions int32, configs map[string]string) *metadata.Topic {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := b.meta.CreateTopics(ctx, []metadata.TopicSpec{{Name: name, Partitions: partitions, ReplicationFactor: 1, Configs: configs}}, false)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	if err := b.applied.wait(ctx, b.meta.Image().Index); err != nil {
		t.Fatal(err)
	}
	return b.applied.get().Topics[name]
}

func produceReq(version int16, topic string, id [16]byte, partition int32, acks int16, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, acks, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func fetchReq(version int16, topic string, id [16]byte, partition int32, offset int64) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = version, 0, 0, 50<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func onlyPart(t testing.TB, resp *kmsg.FetchResponse) kmsg.FetchResponseTopicPartition {
	t.Helper()
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("want one partition in fetch response, got error %d, %+v", resp.ErrorCode, resp.Topics)
	}
	return resp.Topics[0].Partitions[0]
}

func TestProduceConsumeClients(t *testing.T) {
	b := startBroker(t, map[string]string{"auto.create.topics.enable": "true"})
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for _, acks := range []struct {
		name string
		acks kgo.Acks
	}{{"acks0", kgo.NoAck()}, {"acks1", kgo.LeaderAck()}, {"acksall", kgo.AllISRAcks()}} {
		for cname, codec := range codecs {
			t.Run(acks.name+"/"+cname, func(t *testing.T) {
				topic := "rt-" + acks.name + "-" + cname
				opts := []kgo.Opt{kgo.RequiredAcks(acks.acks), kgo.ProducerBatchCompression(codec), kgo.AllowAutoTopicCreation()}
				if acks.acks != kgo.AllISRAcks() {
					opts = append(opts, kgo.DisableIdempotentWrite())
				}
				pr := newClient(t, b, opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				const n = 200
				var want []string
				for i := range n {
					v := fmt.Sprintf("%s-value-%d-%s", topic, i, strings.Repeat("x", i%50))
					want = append(want, v)
					pr.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}, func(_ *kgo.Record, err error) {
						if err != nil {
							t.Errorf("produce: %v", err)
						}
					})
				}
				if err := pr.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				cl := newClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
				var got []string
				for len(got) < n {
					fs := cl.PollFetches(ctx)
					if err := ctx.Err(); err != nil {
						t.Fatalf("consumed %d of %d: %v", len(got), n, err)
					}
					fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
					fs.EachRecord(func(r *kgo.Record) {
						if r.Offset != int64(len(got)) {
							t.Fatalf("record %d has offset %d", len(got), r.Offset)
						}
						got = append(got, string(r.Value))
					})
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("record %d: got %q want %q", i, got[i], want[i])
					}
				}
			})
		}
	}
}

func TestProduceErrors(t *testing.T) {
	b := startBroker(t, nil)
	tp := createTopic(t, b, "small", 1, map[string]string{"max.message.bytes": "1000"})

	resp := rawRequest(t, b.Addr(), produceReq(9, "missing", [16]byte{}, 0, -1, recordbatch.Of("a"))).(*kmsg.ProduceResponse)
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("unknown topic: code %d", c)
	}
	resp = rawRequest(t, b.Addr(), produceReq(13, "", [16]byte{1}, 0, -1, recordbatch.Of("a"))).(*kmsg.ProduceResponse)
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.UnknownTopicID.Code {
		t.Errorf("unknown topic id: code %d", c)
	}
	resp = rawRequest(t, b.Addr(), produceReq(9, "small", [16]byte{}, 3, -1, recordbatch.Of("a"))).(*kmsg.ProduceResponse)
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("unknown partition: code %d", c)
	}
	legacy := recordbatch.Of("a")
	legacy[16] = 1 // the magic byte, where magic 0 and 1 messages keep it too
	resp = rawRequest(t, b.Addr(), produceReq(3, "small", [16]byte{}, 0, 1, legacy)).(*kmsg.ProduceResponse)
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.UnsupportedForMessageFormat.Code {
		t.Errorf("magic 1: code %d", c)
	}
	resp = rawRequest(t, b.Addr(), produceReq(9, "small", [16]byte{}, 0, -1, recordbatch.Of(strings.Repeat("x", 2000)))).(*kmsg.ProduceResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.MessageTooLarge.Code || p.ErrorMessage == nil {
		t.Errorf("too large: code %d message %v", p.ErrorCode, p.ErrorMessage)
	}
	resp = rawRequest(t, b.Addr(), produceReq(9, "small", [16]byte{}, 0, 2, recordbatch.Of("a"))).(*kmsg.ProduceResponse)
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.InvalidRequiredAcks.Code {
		t.Errorf("acks=2: code %d", c)
	}
	if hwm := b.engine.Partition(engine.TopicID(tp.ID), 0).Offsets().HighWatermark; hwm != 0 {
		t.Fatalf("rejected produces stored data: high watermark %d", hwm)
	}

	// v13 addresses the topic by ID; the response echoes it.
	resp = rawRequest(t, b.Addr(), produceReq(13, "", tp.ID, 0, -1, recordbatch.Of("a", "b"))).(*kmsg.ProduceResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != 0 || resp.Topics[0].TopicID != tp.ID {
		t.Fatalf("v13 produce: %+v", resp.Topics[0])
	}
	resp = rawRequest(t, b.Addr(), produceReq(3, "small", [16]byte{}, 0, 1, recordbatch.Of("c"))).(*kmsg.ProduceResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != 2 {
		t.Fatalf("v3 produce: %+v", p)
	}
}

func TestFetchInsideBatch(t *testing.T) {
	b := startBroker(t, nil)
	tp := createTopic(t, b, "inside", 1, nil)
	rawRequest(t, b.Addr(), produceReq(9, "inside", [16]byte{}, 0, -1, recordbatch.Of("a", "b", "c", "d")))
	rawRequest(t, b.Addr(), produceReq(9, "inside", [16]byte{}, 0, -1, recordbatch.Of("e")))
	for _, v := range []int16{4, 11, 12, 13, 18} {
		name, id := "inside", [16]byte{}
		if v >= 13 {
			name, id = "", tp.ID
		}
		p := onlyPart(t, rawRequest(t, b.Addr(), fetchReq(v, name, id, 0, 2)).(*kmsg.FetchResponse))
		offs, vals := recordbatch.Values(t, p.RecordBatches)
		if p.ErrorCode != 0 || p.HighWatermark != 5 || p.LastStableOffset != 5 || (v >= 5 && p.LogStartOffset != 0) {
			t.Fatalf("v%d: %+v", v, p)
		}
		if len(offs) != 5 || offs[0] != 0 || vals[0] != "a" || vals[4] != "e" {
			t.Fatalf("v%d: want the whole first batch from offset 0, got %v %v", v, offs, vals)
		}
	}
	p := onlyPart(t, rawRequest(t, b.Addr(), fetchReq(11, "inside", [16]byte{}, 0, 6)).(*kmsg.FetchResponse))
	if p.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch past the end: code %d", p.ErrorCode)
	}
	p = onlyPart(t, rawRequest(t, b.Addr(), fetchReq(13, "", [16]byte{9}, 0, 0)).(*kmsg.FetchResponse))
	if p.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("unknown topic id: code %d", p.ErrorCode)
	}
	req := fetchReq(11, "inside", [16]byte{}, 0, 0)
	req.ReplicaID = 3
	if p := onlyPart(t, rawRequest(t, b.Addr(), req).(*kmsg.FetchResponse)); p.ErrorCode != kerr.NotLeaderForPartition.Code || len(p.RecordBatches) != 0 {
		t.Fatalf("fetch as a replica: code %d", p.ErrorCode)
	}
}

func TestFetchLongPoll(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, b, "poll", 1, nil)

	// Nothing arrives: the fetch waits MaxWait and returns empty.
	req := fetchReq(11, "poll", [16]byte{}, 0, 0)
	req.MaxWaitMillis, req.MinBytes = 300, 1
	start := time.Now()
	p := onlyPart(t, rawRequest(t, b.Addr(), req).(*kmsg.FetchResponse))
	if d := time.Since(start); d < 250*time.Millisecond || len(p.RecordBatches) != 0 {
		t.Fatalf("empty long poll returned after %v with %d bytes", d, len(p.RecordBatches))
	}

	// Data arrives: the fetch returns at once, long before MaxWait.
	req.MaxWaitMillis = 20000
	done := make(chan *kmsg.FetchResponse)
	go func() {
		c, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		defer c.Close()
		resp, err := roundTrip(c, req, 7)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		done <- resp.(*kmsg.FetchResponse)
	}()
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	rawRequest(t, b.Addr(), produceReq(9, "poll", [16]byte{}, 0, -1, recordbatch.Of("wake")))
	select {
	case resp := <-done:
		if resp == nil {
			t.FailNow()
		}
		_, vals := recordbatch.Values(t, onlyPart(t, resp).RecordBatches)
		if len(vals) != 1 || vals[0] != "wake" {
			t.Fatalf("long poll returned %v", vals)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long poll did not return when data arrived")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("long poll took %v after the produce", d)
	}
}

func TestFetchSessions(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, b, "s1", 2, nil)
	createTopic(t, b, "s2", 1, nil)
	rawRequest(t, b.Addr(), produceReq(9, "s1", [16]byte{}, 0, -1, recordbatch.Of("a")))

	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	corr := int32(0)
	fetch := func(req *kmsg.FetchRequest) *kmsg.FetchResponse {
		t.Helper()
		corr++
		resp, err := roundTrip(c, req, corr)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.FetchResponse)
	}
	parts := func(resp *kmsg.FetchResponse) map[string]kmsg.FetchResponseTopicPartition {
		m := map[string]kmsg.FetchResponseTopicPartition{}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				m[fmt.Sprintf("%s-%d", rt.Topic, p.Partition)] = p
			}
		}
		return m
	}

	// Full fetch creating a session over s1-0 and s1-1.
	req := fetchReq(11, "s1", [16]byte{}, 0, 0)
	p1 := kmsg.NewFetchRequestTopicPartition()
	p1.Partition, p1.PartitionMaxBytes = 1, 1<<20
	req.Topics[0].Partitions = append(req.Topics[0].Partitions, p1)
	req.SessionID, req.SessionEpoch = 0, 0
	resp := fetch(req)
	if resp.SessionID == 0 || len(parts(resp)) != 2 {
		t.Fatalf("full fetch: session %d, %d partitions", resp.SessionID, len(parts(resp)))
	}
	id := resp.SessionID

	// Incremental fetch naming s1-0 at its next offset, nothing new: no
	// partition is reported.
	inc := fetchReq(11, "s1", [16]byte{}, 0, 1)
	inc.SessionID, inc.SessionEpoch = id, 1
	if resp := fetch(inc); resp.ErrorCode != 0 || resp.SessionID != id || len(parts(resp)) != 0 {
		t.Fatalf("idle incremental fetch: error %d, session %d, parts %v", resp.ErrorCode, resp.SessionID, parts(resp))
	}

	// New data on s1-1: an incremental fetch naming no partition reports it.
	rawRequest(t, b.Addr(), produceReq(9, "s1", [16]byte{}, 1, -1, recordbatch.Of("b")))
	empty := kmsg.NewPtrFetchRequest()
	empty.Version, empty.SessionID, empty.SessionEpoch, empty.MaxBytes = 11, id, 2, 1<<20
	got := parts(fetch(empty))
	if len(got) != 1 || got["s1-1"].HighWatermark != 1 || len(got["s1-1"].RecordBatches) == 0 {
		t.Fatalf("incremental fetch after produce: %+v", got)
	}

	// Add s2-0 and forget s1-0 in one incremental request.
	add := fetchReq(11, "s2", [16]byte{}, 0, 0)
	add.Topics = append(add.Topics, fetchReq(11, "s1", [16]byte{}, 1, 1).Topics...) // s1-1 moves past its record
	add.SessionID, add.SessionEpoch = id, 3
	add.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{Topic: "s1", Partitions: []int32{0}}}
	if got := parts(fetch(add)); len(got) != 1 || got["s2-0"].HighWatermark != 0 {
		t.Fatalf("added partition: %+v", got)
	}
	rawRequest(t, b.Addr(), produceReq(9, "s1", [16]byte{}, 0, -1, recordbatch.Of("forgotten")))
	empty.SessionEpoch = 4
	if got := parts(fetch(empty)); len(got) != 0 {
		t.Fatalf("forgotten partition still reported: %+v", got)
	}

	// Wrong epoch, unknown session.
	empty.SessionEpoch = 9
	if resp := fetch(empty); resp.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("wrong epoch: code %d", resp.ErrorCode)
	}
	empty.SessionID, empty.SessionEpoch = id+1, 1
	if resp := fetch(empty); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("unknown session: code %d", resp.ErrorCode)
	}
	// Closing the session (epoch -1) makes it unknown.
	closeReq := fetchReq(11, "s1", [16]byte{}, 0, 0)
	closeReq.SessionID, closeReq.SessionEpoch = id, -1
	if resp := fetch(closeReq); resp.SessionID != 0 || len(parts(resp)) != 1 {
		t.Fatalf("sessionless fetch: session %d, %d partitions", resp.SessionID, len(parts(resp)))
	}
	empty.SessionID, empty.SessionEpoch = id, 5
	if resp := fetch(empty); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("closed session: code %d", resp.ErrorCode)
	}
}

// TestFetchSessionEviction: a full cache evicts the least recently used
// session, by the cache's clock, which the test advances between uses.
func TestFetchSessionEviction(t *testing.T) {
	clk := fakeclock.New(time.Now())
	f := newFetchSessions(2)
	f.now = clk.Now
	a := f.create(nil)
	a.mu.Unlock()
	clk.Advance(time.Millisecond)
	bs := f.create(nil)
	bs.mu.Unlock()
	clk.Advance(time.Millisecond)
	if s, code := f.get(a.id, 1); code != 0 {
		t.Fatalf("get a: %d", code)
	} else {
		s.mu.Unlock()
	}
	c := f.create(nil) // evicts b, the least recently used
	c.mu.Unlock()
	if _, code := f.get(bs.id, 1); code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("evicted session: code %d", code)
	}
	if s, code := f.get(a.id, 2); code != 0 {
		t.Fatalf("kept session: code %d", code)
	} else {
		s.mu.Unlock()
	}
}

// hookPlugin implements every hook and records what it sees.
type hookPlugin struct {
	mu       sync.Mutex
	leaders  []plugin.LeaderChange
	deltas   []metadata.Delta
	appends  []engine.AppendInfo
	started  plugin.Host
	stopped  bool
	rejected int
}

func (h *hookPlugin) OnLeaderChange(c plugin.LeaderChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leaders = append(h.leaders, c)
}

func (h *hookPlugin) OnMetadataUpdate(d metadata.Delta, _ *metadata.Image) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deltas = append(h.deltas, d)
}

func (h *hookPlugin) OnAppend(info engine.AppendInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.appends = append(h.appends, info)
}

func (h *hookPlugin) ValidateAppend(req *engine.AppendRequest) error {
	if strings.HasPrefix(req.Topic, "readonly") {
		h.mu.Lock()
		h.rejected++
		h.mu.Unlock()
		return fmt.Errorf("topic %s is read-only: %w", req.Topic, kerr.PolicyViolation)
	}
	return nil
}

func (h *hookPlugin) Start(_ context.Context, host plugin.Host) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.started = host
	return nil
}

func (h *hookPlugin) Stop(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	return nil
}

func TestHooks(t *testing.T) {
	h := &hookPlugin{}
	dir := t.TempDir()
	b, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", Plugins: []any{h}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h.mu.Lock()
	if ph, ok := h.started.(pluginHost); !ok || ph.b != b || ph.name != "server" {
		t.Errorf("Lifecycle.Start got host %v", h.started)
	}
	h.mu.Unlock()

	tp := createTopic(t, b, "hooked", 2, nil)
	wait.Until(t, 10*time.Second, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		created := false
		for _, d := range h.deltas {
			for _, id := range d.CreatedTopics {
				created = created || id == tp.ID
			}
		}
		if len(h.leaders) != 2 || !created {
			return fmt.Errorf("%d leader changes, want 2; topic in a metadata delta: %v", len(h.leaders), created)
		}
		return nil
	})
	h.mu.Lock()
	for i, c := range h.leaders {
		want := plugin.LeaderChange{Topic: "hooked", TopicID: engine.TopicID(tp.ID), Partition: int32(i), Leader: true, LeaderEpoch: 0}
		if c != want {
			t.Errorf("leader change %d: got %+v want %+v", i, c, want)
		}
	}
	h.mu.Unlock()

	resp := rawRequest(t, b.Addr(), produceReq(9, "hooked", [16]byte{}, 1, -1, recordbatch.Of("x", "y"))).(*kmsg.ProduceResponse)
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != 0 {
		t.Fatalf("produce: code %d", c)
	}
	wait.Until(t, 10*time.Second, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.appends) != 1 {
			return fmt.Errorf("%d OnAppend calls, want 1", len(h.appends))
		}
		return nil
	})
	h.mu.Lock()
	if a := h.appends[0]; a.Topic != "hooked" || a.Partition != 1 || a.BaseOffset != 0 || a.LastOffset != 1 || a.Origin != engine.OriginClient || a.HighWatermark != 2 {
		t.Errorf("append info %+v", a)
	}
	h.mu.Unlock()

	// A rejecting validator leaves the log untouched.
	ro := createTopic(t, b, "readonly", 1, nil)
	resp = rawRequest(t, b.Addr(), produceReq(9, "readonly", [16]byte{}, 0, -1, recordbatch.Of("no"))).(*kmsg.ProduceResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.PolicyViolation.Code || p.ErrorMessage == nil || !strings.Contains(*p.ErrorMessage, "read-only") {
		t.Fatalf("rejected produce: %+v", p)
	}
	if off := b.engine.Partition(engine.TopicID(ro.ID), 0).Offsets(); off.LogEnd != 0 || off.HighWatermark != 0 {
		t.Fatalf("rejected produce changed the log: %+v", off)
	}
	h.mu.Lock()
	if h.rejected != 1 || len(h.appends) != 1 {
		t.Errorf("rejected %d, appends %d", h.rejected, len(h.appends))
	}
	h.mu.Unlock()

	// Deleting the topic loses leadership of its partitions.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := errors.Join(b.meta.DeleteTopics(ctx, []metadata.UUID{tp.ID})...); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		lost := 0
		for _, c := range h.leaders {
			if !c.Leader && c.TopicID == engine.TopicID(tp.ID) {
				lost++
			}
		}
		if lost != 2 {
			return fmt.Errorf("leadership of %d partitions lost, want 2", lost)
		}
		return nil
	})
	if b.engine.Partition(engine.TopicID(tp.ID), 0) != nil {
		t.Error("partition of a deleted topic still in the engine")
	}

	// A bumped epoch is reported, reaches the engine and fences fetchers
	// with older epochs (KIP-320).
	epoch, err := b.meta.BumpLeaderEpoch(ctx, ro.ID, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.applied.wait(ctx, b.meta.Image().Index); err != nil {
		t.Fatal(err)
	}
	if e := b.engine.Partition(engine.TopicID(ro.ID), 0).Offsets().LeaderEpoch; e != epoch {
		t.Errorf("engine epoch %d, want %d", e, epoch)
	}
	h.mu.Lock()
	if last := h.leaders[len(h.leaders)-1]; last.TopicID != engine.TopicID(ro.ID) || !last.Leader || last.LeaderEpoch != epoch {
		t.Errorf("epoch bump reported as %+v, want epoch %d", last, epoch)
	}
	h.mu.Unlock()
	for _, tc := range []struct {
		epoch int32
		code  int16
	}{{epoch - 1, kerr.FencedLeaderEpoch.Code}, {epoch + 1, kerr.UnknownLeaderEpoch.Code}, {epoch, 0}, {-1, 0}} {
		req := fetchReq(11, "readonly", [16]byte{}, 0, 0)
		req.Topics[0].Partitions[0].CurrentLeaderEpoch = tc.epoch
		p := onlyPart(t, rawRequest(t, b.Addr(), req).(*kmsg.FetchResponse))
		if p.ErrorCode != tc.code {
			t.Errorf("fetch with epoch %d (ours %d): code %d, want %d", tc.epoch, epoch, p.ErrorCode, tc.code)
		}
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	if !h.stopped {
		t.Error("Lifecycle.Stop not called")
	}
	h.mu.Unlock()

	// On restart every led partition is reported again.
	h2 := &hookPlugin{}
	b2, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", Plugins: []any{h2}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	h2.mu.Lock()
	if len(h2.leaders) != 1 || h2.leaders[0].TopicID != engine.TopicID(ro.ID) || h2.leaders[0].LeaderEpoch != epoch {
		t.Errorf("leaders after restart: %+v", h2.leaders)
	}
	h2.mu.Unlock()
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	b := startBrokerWith(t, Config{DataDir: dir})
	createTopic(t, b, "durable", 1, nil)
	rawRequest(t, b.Addr(), produceReq(9, "durable", [16]byte{}, 0, -1, recordbatch.Of("one", "two")))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := startBrokerWith(t, Config{DataDir: dir})
	p := onlyPart(t, rawRequest(t, b2.Addr(), fetchReq(11, "durable", [16]byte{}, 0, 0)).(*kmsg.FetchResponse))
	if _, vals := recordbatch.Values(t, p.RecordBatches); len(vals) != 2 || vals[1] != "two" {
		t.Fatalf("after restart: %v", vals)
	}
}

func TestApiVersions(t *testing.T) {
	b := startBroker(t, nil)
	core := coreServers{nodeID: b.cfg.NodeID, plugins: b.cfg.Plugins, applied: &b.applied, produce: b.produce, fetch: b.fetch, admin: b.admin, coord: b.coord}
	for _, v := range []int16{0, 3, 4, 5} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version, req.ClientSoftwareName, req.ClientSoftwareVersion = v, "test", "1.0"
		resp := rawRequest(t, b.Addr(), req).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 || len(resp.ApiKeys) != len(coreAPIs(b.apis, core)) {
			t.Fatalf("v%d: error %d, %d keys", v, resp.ErrorCode, len(resp.ApiKeys))
		}
	}
	// v5 (KIP-1242): the cluster and node the client expects must be ours.
	cluster := b.applied.get().ClusterID
	for _, c := range []struct {
		cluster string
		node    int32
		code    int16
	}{{cluster, b.cfg.NodeID, 0}, {"another-cluster", b.cfg.NodeID, kerr.RebootstrapRequired.Code}, {cluster, b.cfg.NodeID + 1, kerr.RebootstrapRequired.Code}} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version, req.ClusterID, req.NodeID = 5, &c.cluster, c.node
		if resp := rawRequest(t, b.Addr(), req).(*kmsg.ApiVersionsResponse); resp.ErrorCode != c.code {
			t.Fatalf("v5 expecting %s/%d: error %d, want %d", c.cluster, c.node, resp.ErrorCode, c.code)
		}
	}
	// A version newer than ours: UNSUPPORTED_VERSION in a v0 body that
	// still lists our keys (KIP-511).
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 99
	if err := writeRequest(c, req, 5, "future"); err != nil {
		t.Fatal(err)
	}
	v0 := kmsg.NewPtrApiVersionsRequest()
	v0.Version = 0
	resp, err := readResponse(c, v0, 5)
	if err != nil {
		t.Fatal(err)
	}
	av := resp.(*kmsg.ApiVersionsResponse)
	if av.ErrorCode != kerr.UnsupportedVersion.Code || av.ApiKeys[0].ApiKey != 0 || av.ApiKeys[0].MinVersion != 0 {
		t.Fatalf("unsupported version answer: %+v", av)
	}
	// The connection stays usable.
	if _, err := roundTrip(c, v0, 6); err != nil {
		t.Fatal(err)
	}
}

func TestMetadata(t *testing.T) {
	b := startBroker(t, map[string]string{"auto.create.topics.enable": "false"})
	tp := createTopic(t, b, "meta", 3, nil)
	name := func(s string) *string { return &s }
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	req.Topics = []kmsg.MetadataRequestTopic{{Topic: name("meta")}, {Topic: name("nope")}, {Topic: name("bad/name")}, {TopicID: [16]byte{7}}, {TopicID: tp.ID}}
	resp := rawRequest(t, b.Addr(), req).(*kmsg.MetadataResponse)
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != 1 || resp.ControllerID != 1 || resp.ClusterID == nil || *resp.ClusterID == "" {
		t.Fatalf("brokers %+v controller %d", resp.Brokers, resp.ControllerID)
	}
	host, port, _ := net.SplitHostPort(b.Addr())
	if resp.Brokers[0].Host != host || fmt.Sprint(resp.Brokers[0].Port) != port {
		t.Errorf("broker address %s:%d, listening on %s", resp.Brokers[0].Host, resp.Brokers[0].Port, b.Addr())
	}
	wantCodes := []int16{0, kerr.UnknownTopicOrPartition.Code, kerr.InvalidTopicException.Code, kerr.UnknownTopicID.Code, 0}
	for i, rt := range resp.Topics {
		if rt.ErrorCode != wantCodes[i] {
			t.Errorf("topic %d: code %d want %d", i, rt.ErrorCode, wantCodes[i])
		}
	}
	if rt := resp.Topics[0]; rt.TopicID != tp.ID || len(rt.Partitions) != 3 || rt.Partitions[2].Leader != 1 || rt.Partitions[2].Replicas[0] != 1 {
		t.Errorf("topic: %+v", rt)
	}
	if rt := resp.Topics[4]; rt.Topic == nil || *rt.Topic != "meta" {
		t.Errorf("topic by id: %+v", rt)
	}
	// Auto-creation is off: the topic stays missing.
	if b.applied.get().Topics["nope"] != nil {
		t.Fatal("topic auto-created although disabled")
	}
	// v0: an empty list is every topic.
	req = kmsg.NewPtrMetadataRequest()
	req.Version = 0
	req.Topics = []kmsg.MetadataRequestTopic{}
	if resp := rawRequest(t, b.Addr(), req).(*kmsg.MetadataResponse); len(resp.Topics) != 1 {
		t.Fatalf("v0 all topics: %d", len(resp.Topics))
	}
}

func TestMetadataAutoCreate(t *testing.T) {
	b := startBroker(t, map[string]string{"auto.create.topics.enable": "true", "num.partitions": "2"})
	name := "auto"
	req := kmsg.NewPtrMetadataRequest()
	req.Version, req.AllowAutoTopicCreation = 12, false
	req.Topics = []kmsg.MetadataRequestTopic{{Topic: &name}}
	if resp := rawRequest(t, b.Addr(), req).(*kmsg.MetadataResponse); resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("allow_auto_topic_creation=false: code %d", resp.Topics[0].ErrorCode)
	}
	req.AllowAutoTopicCreation = true
	resp := rawRequest(t, b.Addr(), req).(*kmsg.MetadataResponse)
	if rt := resp.Topics[0]; rt.ErrorCode != 0 || len(rt.Partitions) != 2 {
		t.Fatalf("auto-created topic: %+v", rt)
	}
	// The partitions exist in the engine before the answer.
	id := b.applied.get().Topics[name].ID
	if b.engine.Partition(engine.TopicID(id), 1) == nil {
		t.Fatal("auto-created partition missing from the engine")
	}
}

// TestBadFrames sends hostile frames, each on its own connection: every
// one closes its connection, another connection keeps working, and nothing
// is stored.
func TestBadFrames(t *testing.T) {
	b := startBroker(t, nil)
	tp := createTopic(t, b, "victim", 1, nil)
	good, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()

	header := func(key, version int16, flexible bool) []byte {
		h := binary.BigEndian.AppendUint16(nil, uint16(key))
		h = binary.BigEndian.AppendUint16(h, uint16(version))
		h = binary.BigEndian.AppendUint32(h, 1)
		h = binary.BigEndian.AppendUint16(h, 1)
		h = append(h, 'c')
		if flexible {
			h = append(h, 0)
		}
		return h
	}
	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	validProduce := produceReq(9, "victim", [16]byte{}, 0, -1, recordbatch.Of("must-not-land")).AppendTo(nil)
	// An array length (of topics) far larger than the bytes left.
	hugeArray := produceReq(3, "victim", [16]byte{}, 0, -1, nil).AppendTo(nil)
	hugeArray = append(binary.BigEndian.AppendUint32(append([]byte(nil), hugeArray[:8]...), 1<<30), hugeArray[12:]...)

	cases := map[string][]byte{
		"2GiB size prefix": {0x7f, 0xff, 0xff, 0xff},
		"negative size":    {0xff, 0xff, 0xff, 0xf0},
		"zero size":        {0, 0, 0, 0},
		"truncated body":   append(binary.BigEndian.AppendUint32(nil, 1000), append(header(0, 9, true), validProduce...)...),
		"unknown api key":  frame(append(header(9999, 0, false), 1, 2, 3)),
		"unserved api key": frame(header(12, 0, false)), // Heartbeat: kmsg knows it, we do not serve it
		"too new version":  frame(append(header(0, 99, true), validProduce...)),
		"undecodable body": frame(append(header(0, 9, true), validProduce[:len(validProduce)/2]...)),
		"array too long":   frame(append(header(0, 3, false), hugeArray...)),
		"truncated header": frame([]byte{0, 0, 0}),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", b.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(raw); err != nil {
				t.Fatal(err)
			}
			if name == "truncated body" {
				c.(*net.TCPConn).CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Read(make([]byte, 64))
			if n != 0 || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
				t.Fatalf("want the connection closed without a response, got %d bytes, err %v", n, err)
			}
			req := kmsg.NewPtrApiVersionsRequest()
			if _, err := roundTrip(good, req, 2); err != nil {
				t.Fatalf("other connection broken: %v", err)
			}
		})
	}
	if off := b.engine.Partition(engine.TopicID(tp.ID), 0).Offsets(); off.LogEnd != 0 {
		t.Fatalf("a bad frame stored data: %+v", off)
	}
}

// TestMetrics: the broker's exposition passes Prometheus' linter (HELP
// and TYPE for every family, conventional names) and counts what it
// served.
func TestMetrics(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, b, "m", 1, nil)
	batch := recordbatch.Of("a")
	rawRequest(t, b.Addr(), produceReq(9, "m", [16]byte{}, 0, -1, batch))
	var sb strings.Builder
	b.WritePrometheus(&sb)
	out := sb.String()
	problems, err := promlint.New(strings.NewReader(out)).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v\n%s", err, problems, out)
	}
	for _, want := range []string{`tandem_server_requests_total{api="Produce"} 1`, `tandem_server_request_duration_seconds_count{api="Produce"} 1`,
		fmt.Sprintf("tandem_server_produce_bytes_total %d", len(batch)), "tandem_engine_partitions 1"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
	for _, f := range brokerFamilies {
		if !strings.Contains(out, "# TYPE "+f.Name+" "+string(f.Type)+"\n") {
			t.Errorf("family %s not written", f.Name)
		}
	}
}

// blockingObserver blocks in OnMetadataUpdate until released.
type blockingObserver struct {
	release chan struct{}
	got     chan metadata.Delta
	images  chan *metadata.Image
}

func (o *blockingObserver) OnMetadataUpdate(d metadata.Delta, img *metadata.Image) {
	<-o.release
	o.got <- d
	o.images <- img
}

func TestMetaQueueCoalesces(t *testing.T) {
	o := &blockingObserver{release: make(chan struct{}), got: make(chan metadata.Delta, 200), images: make(chan *metadata.Image, 200)}
	q := newMetaQueue(o, &Broker{log: testLogger(), plugins: &pluginState{names: map[any]string{}, failed: map[string]pluginFailure{}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); q.run(ctx) }()
	defer func() { cancel(); close(o.release); <-done }()

	// Image i holds topics t0..t(i-1): each step creates one topic.
	images := []*metadata.Image{{Topics: map[string]*metadata.Topic{}, TopicsByID: map[metadata.UUID]*metadata.Topic{}}}
	for i := 1; i <= 2*metaQueueCap; i++ {
		prev := images[i-1]
		img := &metadata.Image{Index: uint64(i), Topics: map[string]*metadata.Topic{}, TopicsByID: map[metadata.UUID]*metadata.Topic{}}
		for k, v := range prev.Topics {
			img.Topics[k], img.TopicsByID[v.ID] = v, v
		}
		tp := &metadata.Topic{Name: fmt.Sprintf("t%d", i), ID: metadata.UUID{byte(i), byte(i >> 8), 1}, Partitions: []metadata.Partition{{Leader: 1, Replicas: []int32{1}, ISR: []int32{1}}}}
		img.Topics[tp.Name], img.TopicsByID[tp.ID] = tp, tp
		images = append(images, img)
		q.push(prev, img)
	}
	// The observer was stuck while 2*cap updates were pushed: they arrive
	// coalesced into at most cap+1 calls, end at the last image, and
	// announce every created topic exactly once.
	created := map[metadata.UUID]int{}
	calls := 0
	for {
		o.release <- struct{}{}
		d, img := <-o.got, <-o.images
		calls++
		for _, id := range d.CreatedTopics {
			created[id]++
		}
		if img.Index == uint64(2*metaQueueCap) {
			break
		}
	}
	if calls > metaQueueCap+1 {
		t.Fatalf("%d calls for %d updates: the queue is not bounded", calls, 2*metaQueueCap)
	}
	if len(created) != 2*metaQueueCap {
		t.Fatalf("%d topics announced, want %d", len(created), 2*metaQueueCap)
	}
	for id, n := range created {
		if n != 1 {
			t.Fatalf("topic %v announced %d times", id, n)
		}
	}
}

func TestAcks0ErrorClosesConnection(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, b, "a0", 1, nil)
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A good acks=0 produce gets no response; the connection stays open
	// and answers the next request.
	if err := writeRequest(c, produceReq(9, "a0", [16]byte{}, 0, 0, recordbatch.Of("ok")), 1, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, kmsg.NewPtrApiVersionsRequest(), 2); err != nil {
		t.Fatalf("after a good acks=0 produce: %v", err)
	}
	// A failing one closes the connection so the client refreshes metadata.
	if err := writeRequest(c, produceReq(9, "missing", [16]byte{}, 0, 0, recordbatch.Of("no")), 3, "p"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); n != 0 || err != io.EOF {
		t.Fatalf("want the connection closed, got %d bytes, err %v", n, err)
	}
	p := onlyPart(t, rawRequest(t, b.Addr(), fetchReq(11, "a0", [16]byte{}, 0, 0)).(*kmsg.FetchResponse))
	if _, vals := recordbatch.Values(t, p.RecordBatches); len(vals) != 1 || vals[0] != "ok" {
		t.Fatalf("acks=0 record: %v", vals)
	}
}

// TestCloseEndsLongPoll: Close does not wait for a fetch's MaxWait.
func TestCloseEndsLongPoll(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, b, "lp", 1, nil)
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := fetchReq(11, "lp", [16]byte{}, 0, 0)
	req.MaxWaitMillis, req.MinBytes = 60000, 1
	if err := writeRequest(c, req, 1, "lp"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v with a fetch waiting", d)
	}
}
