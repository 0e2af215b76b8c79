package integration

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/txn"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/faultproxy"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// mirrorCluster is a single-node in-process cluster with the groups,
// transactions and mirror plugins, restartable on the same data and port.
type mirrorCluster struct {
	t         *testing.T
	dir       string
	listen    string
	advertise string
	props     map[string]string
	b         *server.Broker
}

var mirrorProps = map[string]string{
	"mirror.topic.num.partitions":               "4",
	"offsets.topic.num.partitions":              "4",
	"transaction.state.log.num.partitions":      "4",
	"mirror.replica.fetch.backoff.ms":           "200",
	"mirror.request.timeout.ms":                 "20000",
	"mirror.socket.connection.setup.timeout.ms": "2000",
	"replica.fetch.wait.max.ms":                 "200",
}

func startMirrorCluster(t *testing.T, advertise string) *mirrorCluster {
	return startMirrorClusterProps(t, advertise, nil)
}

// startMirrorClusterProps starts a cluster with mirrorProps plus extra.
func startMirrorClusterProps(t *testing.T, advertise string, extra map[string]string) *mirrorCluster {
	props := maps.Clone(mirrorProps)
	maps.Copy(props, extra)
	c := &mirrorCluster{t: t, dir: t.TempDir(), listen: "127.0.0.1:0", advertise: advertise, props: props}
	c.start()
	c.listen = c.b.Addr()
	t.Cleanup(func() { c.b.Close() })
	return c
}

func (c *mirrorCluster) start() {
	c.t.Helper()
	log := tandemtest.Logger(c.t)
	b, err := server.New(server.Config{DataDir: c.dir, Listen: c.listen, Advertise: c.advertise, Props: c.props, Logger: log,
		Plugins: []any{groups.New(c.props, log), txn.New(c.props, log), mirror.New(c.props, log)}})
	if err != nil {
		c.t.Fatalf("server.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		c.t.Fatalf("start broker: %v", err)
	}
	c.b = b
}

func (c *mirrorCluster) restart() {
	c.t.Helper()
	if err := c.b.Close(); err != nil {
		c.t.Fatalf("close broker: %v", err)
	}
	c.start()
}

func (c *mirrorCluster) addr() string { return c.b.Addr() }

func (c *mirrorCluster) client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addr()), kgo.RetryTimeout(20 * time.Second), admin.Opt()}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

func (c *mirrorCluster) admin() *admin.Client { return admin.New(c.client()) }

func (c *mirrorCluster) topic(name string) *metadata.Topic {
	return c.b.Metadata().Image().Topics[name]
}

func (c *mirrorCluster) partition(topic string, p int32) *engine.Partition {
	t := c.topic(topic)
	if t == nil {
		c.t.Fatalf("no topic %s", topic)
	}
	return c.b.Engine().Partition(engine.TopicID(t.ID), p)
}

// batches reads every stored batch of a partition.
func batches(t *testing.T, ep *engine.Partition) [][]byte {
	t.Helper()
	var out [][]byte
	offs := ep.Offsets()
	for off := offs.LogStart; off < offs.HighWatermark; {
		res, err := ep.Fetch(off, 1<<20, engine.ReadUncommitted)
		if err != nil {
			t.Fatalf("fetch %d: %v", off, err)
		}
		if len(res.Batches) == 0 {
			break
		}
		for _, b := range res.Batches {
			base := int64(beUint64(b))
			last := base + int64(beUint32(b[23:]))
			if last < off {
				continue
			}
			out = append(out, b)
			off = last + 1
		}
	}
	return out
}

func beUint64(b []byte) uint64 {
	return uint64(beUint32(b))<<32 | uint64(beUint32(b[4:]))
}
func beUint32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func batchEpoch(b []byte) int32 { return int32(beUint32(b[12:])) }

// sameLog fails unless both partitions hold the same batches, byte for
// byte, within a few seconds: a transaction's markers reach the source
// after its producer was answered, so a mirror that looked caught up may
// still have them to copy.
func sameLog(t *testing.T, what string, a, b *engine.Partition) {
	t.Helper()
	wait.Until(t, 15*time.Second, func() error {
		if err := diffLogs(batches(t, a), batches(t, b)); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// diffLogs describes the first difference of two logs' batches.
func diffLogs(ab, bb [][]byte) error {
	for i := range max(len(ab), len(bb)) {
		if i >= len(ab) || i >= len(bb) {
			return fmt.Errorf("%d batches vs %d", len(ab), len(bb))
		}
		if !bytes.Equal(ab[i], bb[i]) {
			return fmt.Errorf("batch %d (offset %d epoch %d vs offset %d epoch %d) differs", i, beUint64(ab[i]), batchEpoch(ab[i]), beUint64(bb[i]), batchEpoch(bb[i]))
		}
	}
	return nil
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, d, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// states returns "topic/partition" → state of a mirror.
func states(t *testing.T, a *admin.Client, name string) (map[string]mirrorproto.PartitionDetail, mirrorproto.DescribedMirror) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms, err := a.DescribeMirrors(ctx, name)
	if err != nil || len(ms) != 1 {
		t.Fatalf("describe mirror %s: %v (%d mirrors)", name, err, len(ms))
	}
	out := map[string]mirrorproto.PartitionDetail{}
	for _, tp := range ms[0].Topics {
		for _, p := range tp.Partitions {
			out[fmt.Sprintf("%s/%d", tp.TopicName, p.PartitionIndex)] = p
		}
	}
	return out, ms[0]
}

// caughtUp waits until every partition of topic is MIRRORING with lag 0
// and the destination log ends where the source's does.
func caughtUp(t *testing.T, src, dst *mirrorCluster, mirrorName, topic string, d time.Duration) {
	t.Helper()
	a := dst.admin()
	n := len(src.topic(topic).Partitions)
	waitFor(t, d, "mirror to catch up", func() bool {
		st, _ := states(t, a, mirrorName)
		for p := range n {
			pd := st[fmt.Sprintf("%s/%d", topic, p)]
			se := src.partition(topic, int32(p)).Offsets().LogEnd
			if pd.State != "MIRRORING" || pd.Lag != 0 || pd.SourceOffset != se || pd.DestinationOffset != se {
				return false
			}
		}
		return true
	})
}

// produceMixed writes n records spread over the partitions with every
// compression codec, plus committed and aborted transactions.
func produceMixed(t *testing.T, c *mirrorCluster, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	per := n / (len(codecs) + 1)
	for i, codec := range codecs {
		cl := c.client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(5*time.Millisecond))
		recs := make([]*kgo.Record, 0, per)
		for j := range per {
			k, v, _ := genRecord(i*per + j)
			recs = append(recs, &kgo.Record{Key: k, Value: v})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce with %v: %v", codec, err)
		}
	}
	// Transactions: every third one aborted.
	tx := c.client(kgo.DefaultProduceTopic(topic), kgo.TransactionalID("mirror-tx"), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	left := n - per*len(codecs)
	for txn := 0; left > 0; txn++ {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatalf("begin txn: %v", err)
		}
		m := min(left, 2000)
		for j := range m {
			k, v, _ := genRecord(1_000_000 + txn*2000 + j)
			tx.Produce(ctx, &kgo.Record{Key: k, Value: v}, nil)
		}
		if err := tx.Flush(ctx); err != nil {
			t.Fatalf("flush txn: %v", err)
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(txn%3 != 2)); err != nil {
			t.Fatalf("end txn: %v", err)
		}
		left -= m
	}
}

// committedValues consumes a topic read_committed until it has been idle
// for two seconds.
func committedValues(t *testing.T, c *mirrorCluster, topic string) map[string]int {
	t.Helper()
	cl := c.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close() // no fetching in the background afterwards
	seen := map[string]int{}
	wait.Until(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; n++ })
		if n == 0 && len(seen) > 0 {
			return nil
		}
		return fmt.Errorf("consume %s: still reading", topic)
	})
	return seen
}

func produceOne(t *testing.T, c *mirrorCluster, topic string, p int32, value string) error {
	t.Helper()
	cl := c.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequestRetries(0), kgo.RecordRetries(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(value)}).FirstErr()
}

func createMirrorTopic(t *testing.T, c *mirrorCluster, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(c.client()).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// TestMirrorEndToEnd mirrors a 6-partition topic of 200,000 records
// (every codec, committed and aborted transactions), checks the copy byte
// for byte, read-only enforcement, pause/resume, failover and failback.
func TestMirrorEndToEnd(t *testing.T) {
	tandemtest.Long(t) // two clusters, 200,000 records: the full tier only
	src := startMirrorCluster(t, "")
	dst := startMirrorCluster(t, "")
	const topic = "orders"
	createMirrorTopic(t, src, topic, 6)
	produceMixed(t, src, topic, 200_000)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m1", map[string]string{"bootstrap.servers": src.addr()}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{topic: "m1"}); err != nil {
		t.Fatalf("add topic: %v", err)
	}
	caughtUp(t, src, dst, "m1", topic, 90*time.Second)

	if src.topic(topic).ID != dst.topic(topic).ID {
		t.Fatalf("topic IDs differ: %s vs %s", src.topic(topic).ID, dst.topic(topic).ID)
	}
	maxSrcEpoch := int32(-1)
	for p := range int32(6) {
		sameLog(t, fmt.Sprintf("partition %d", p), src.partition(topic, p), dst.partition(topic, p))
		for _, b := range batches(t, src.partition(topic, p)) {
			maxSrcEpoch = max(maxSrcEpoch, batchEpoch(b))
		}
		se, so := src.partition(topic, p).EndOffsetForEpoch(0)
		de, do := dst.partition(topic, p).EndOffsetForEpoch(0)
		if se != de || so != do {
			t.Fatalf("partition %d: epoch 0 ends at (%d,%d) on the source, (%d,%d) on the destination", p, se, so, de, do)
		}
	}
	if sv, dv := committedValues(t, src, topic), committedValues(t, dst, topic); len(sv) != len(dv) || len(sv) == 0 {
		t.Fatalf("read_committed: %d values on the source, %d on the destination", len(sv), len(dv))
	} else {
		for v, n := range sv {
			if dv[v] != n {
				t.Fatalf("read_committed: value seen %d times on the source, %d on the destination", n, dv[v])
			}
		}
	}

	// Read-only: produce to the mirror topic fails, nothing appended.
	before := dst.partition(topic, 0).Offsets().LogEnd
	batch, err := recordbatch.Build(recordbatch.CodecNone, recordbatch.KV{Value: []byte("not allowed")})
	if err != nil {
		t.Fatal(err)
	}
	preq := kmsg.NewPtrProduceRequest()
	preq.Acks, preq.TimeoutMillis = -1, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic, pt.TopicID = topic, dst.topic(topic).ID
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = batch
	pt.Partitions = append(pt.Partitions, pp)
	preq.Topics = append(preq.Topics, pt)
	presp, err := preq.RequestWith(ctx, dst.client())
	if err != nil {
		t.Fatalf("produce to mirror topic: %v", err)
	}
	if pr := presp.Topics[0].Partitions[0]; pr.ErrorCode != kerr.PolicyViolation.Code || pr.ErrorMessage == nil || !strings.Contains(*pr.ErrorMessage, "mirror m1") {
		t.Fatalf("produce to mirror topic: code %d message %v, want POLICY_VIOLATION naming mirror m1", pr.ErrorCode, pr.ErrorMessage)
	}
	if after := dst.partition(topic, 0).Offsets().LogEnd; after != before {
		t.Fatalf("produce to mirror topic appended: %d → %d", before, after)
	}
	var metricsText bytes.Buffer
	dst.b.WritePrometheus(&metricsText)
	for _, m := range []string{`tandem_mirror_max_lag_records{mirror="m1"}`, `tandem_mirror_lag_records{mirror="m1",topic="` + topic + `",source_topic="` + topic + `",partition="0",client_id="MirrorFetcherThread-`,
		`tandem_mirror_partitions{mirror="m1",state="MIRRORING"} 6`, `tandem_server_requests_total{api="CreateMirror"} 1`, `tandem_server_requests_total{api="AddTopicsToMirror"}`} {
		if !strings.Contains(metricsText.String(), m) {
			t.Fatalf("metric %s missing from /metrics", m)
		}
	}

	// Pause: no fetches, no progress; resume: catch up.
	if err := da.PauseMirror(ctx, "m1"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	st, _ := states(t, da, "m1")
	for k, pd := range st {
		if pd.State != "PAUSED" {
			t.Fatalf("%s is %s after pause", k, pd.State)
		}
	}
	time.Sleep(500 * time.Millisecond) // a fetch sent as the pause came has its answer
	reqs := fetchRequests(src)
	produceMixed(t, src, topic, 6000)
	time.Sleep(1500 * time.Millisecond)
	if r := fetchRequests(src); r != reqs {
		t.Fatalf("fetch requests while PAUSED: %s, then %s", reqs, r)
	}
	if dst.partition(topic, 0).Offsets().LogEnd == src.partition(topic, 0).Offsets().LogEnd {
		t.Fatalf("partition 0 progressed while paused")
	}
	if err := da.ResumeMirror(ctx, "m1"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	caughtUp(t, src, dst, "m1", topic, 60*time.Second)

	// Failover: a consumer that followed the source continues on the
	// destination from the same offsets; new batches carry an epoch above
	// every source epoch.
	positions := map[int32]int64{}
	for p := range int32(6) {
		positions[p] = src.partition(topic, p).Offsets().LogEnd
	}
	msg, err := da.RemoveTopicsFromMirror(ctx, "m1", []string{topic})
	if err != nil {
		t.Fatalf("remove topic (failover): %v", err)
	}
	t.Log(msg)
	st, _ = states(t, da, "m1")
	for k, pd := range st {
		if pd.State != "STOPPED" {
			t.Fatalf("%s is %s after failover", k, pd.State)
		}
	}
	for p := range int32(6) {
		if err := produceOne(t, dst, topic, p, fmt.Sprintf("after failover %d", p)); err != nil {
			t.Fatalf("produce after failover: %v", err)
		}
		bs := batches(t, dst.partition(topic, p))
		if e := batchEpoch(bs[len(bs)-1]); e <= maxSrcEpoch {
			t.Fatalf("partition %d: new batch epoch %d not above source epochs (max %d)", p, e, maxSrcEpoch)
		}
	}
	offsets := kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: func() map[int32]kgo.Offset {
		m := map[int32]kgo.Offset{}
		for p, o := range positions {
			m[p] = kgo.NewOffset().At(o)
		}
		return m
	}()})
	cons := dst.client(offsets)
	got := map[string]bool{}
	waitFor(t, 30*time.Second, "consumer to continue on the destination", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		cons.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
		return len(got) >= 6
	})
	for p := range 6 {
		if !got[fmt.Sprintf("after failover %d", p)] || len(got) != 6 {
			t.Fatalf("consumer continuing on the destination got %v", got)
		}
	}

	// Failback (scenario B): the old source moves on alone (a new epoch
	// and a record the destination never had), then mirrors from the new
	// source, truncates to the last mirror epoch and converges.
	sp := src.partition(topic, 0)
	if _, err := src.b.Metadata().BumpLeaderEpoch(ctx, src.topic(topic).ID, 0, sp.Offsets().LeaderEpoch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "source epoch bump", func() bool { return sp.Offsets().LeaderEpoch > 0 })
	if err := produceOne(t, src, topic, 0, "divergent"); err != nil {
		t.Fatalf("produce divergent record: %v", err)
	}
	sa := src.admin()
	if err := sa.CreateMirror(ctx, "back", map[string]string{"bootstrap.servers": dst.addr()}); err != nil {
		t.Fatalf("create failback mirror: %v", err)
	}
	if err := sa.AddTopicsToMirror(ctx, map[string]string{topic: "back"}); err != nil {
		t.Fatalf("add topic for failback: %v", err)
	}
	caughtUp(t, dst, src, "back", topic, 60*time.Second)
	for p := range int32(6) {
		sameLog(t, fmt.Sprintf("failback partition %d", p), dst.partition(topic, p), src.partition(topic, p))
	}
}

// fetchRequests is the count of Fetch requests a cluster served.
func fetchRequests(c *mirrorCluster) string {
	var b bytes.Buffer
	c.b.WritePrometheus(&b)
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, `tandem_server_requests_total{api="Fetch"}`) {
			return l
		}
	}
	return ""
}

// TestMirrorFaultsAndBadInput: bad input gets clear errors and leaves no
// topic behind; mirroring survives a source restart and a destination
// restart, detects an unclean election on the source, starts at the
// source's log start (scenario A), and fails back after the mirror was
// deleted (its last mirror epochs survive). The 10 s network cut is
// TestMirrorNetworkCut.
func TestMirrorFaultsAndBadInput(t *testing.T) {
	tandemtest.Long(t) // two clusters: the full tier only
	src := startMirrorCluster(t, "")
	dst := startMirrorCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	da := dst.admin()

	// Bad input.
	if err := da.CreateMirror(ctx, "nowhere", map[string]string{"bootstrap.servers": "127.0.0.1:1"}); err != nil {
		t.Fatalf("create mirror to an unreachable source: %v", err)
	}
	waitFor(t, 30*time.Second, "unreachable mirror to be FAILED", func() bool {
		_, m := states(t, da, "nowhere")
		return m.State == "FAILED" && m.ErrorMessage != nil && strings.Contains(*m.ErrorMessage, "127.0.0.1:1")
	})
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"missing": "m"}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("adding a topic missing on the source: %v", err)
	}
	if dst.topic("missing") != nil {
		t.Fatalf("a failed add left topic %q behind", "missing")
	}
	createMirrorTopic(t, src, "events", 3)
	produceMixed(t, src, "events", 12000)
	if err := da.AddTopicsToMirror(ctx, map[string]string{"events": "m"}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"events": "nowhere"}); err == nil || !strings.Contains(err.Error(), "TOPIC_ALREADY_MIRRORED") {
		t.Fatalf("adding a topic to a second mirror: %v", err)
	}
	if _, err := da.RemoveTopicsFromMirror(ctx, "m", []string{"other"}); err == nil || !strings.Contains(err.Error(), "TOPIC_NOT_MIRRORED") {
		t.Fatalf("removing a topic not in the mirror: %v", err)
	}
	caughtUp(t, src, dst, "m", "events", 60*time.Second)

	// Restart the source, then the destination, mid-mirror.
	src.restart()
	produceMixed(t, src, "events", 6000)
	dst.restart()
	produceMixed(t, src, "events", 6000)
	caughtUp(t, src, dst, "m", "events", 60*time.Second)
	for p := range int32(3) {
		sameLog(t, fmt.Sprintf("events-%d", p), src.partition("events", p), dst.partition("events", p))
	}

	// Unclean election on the source: partition 0 loses its tail and a
	// new leader epoch appends other records at the same offsets.
	sp := src.partition("events", 0)
	if err := sp.Truncate(sp.Offsets().LogEnd - 50); err != nil {
		t.Fatal(err)
	}
	if _, err := src.b.Metadata().BumpLeaderEpoch(ctx, src.topic("events").ID, 0, sp.Offsets().LeaderEpoch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "source epoch bump", func() bool { return sp.EpochAt(sp.Offsets().LogEnd) > 0 })
	for i := range 3 {
		if err := produceOne(t, src, "events", 0, fmt.Sprintf("after unclean election %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp(t, src, dst, "m", "events", 60*time.Second)
	sameLog(t, "events-0 after unclean election", src.partition("events", 0), dst.partition("events", 0))

	// Scenario A with retention: the source's log start moved on before
	// the topic is mirrored; the destination starts there.
	createMirrorTopic(t, src, "logs", 1)
	produceMixed(t, src, "logs", 6000)
	lp := src.partition("logs", 0)
	if _, err := lp.DeleteRecords(lp.Offsets().HighWatermark / 2); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"logs": "m"}); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, src, dst, "m", "logs", 60*time.Second)
	sameLog(t, "logs-0", lp, dst.partition("logs", 0))
	if dst.partition("logs", 0).Offsets().LogStart != lp.Offsets().LogStart {
		t.Fatalf("log start %d on the destination, %d on the source", dst.partition("logs", 0).Offsets().LogStart, lp.Offsets().LogStart)
	}

	// Failover by deleting the mirror, then failback: the last mirror
	// epochs outlive the mirror, so the old source truncates to them.
	ends := map[int32]int64{}
	for p := range int32(3) {
		ends[p] = dst.partition("events", p).Offsets().LogEnd
	}
	if err := da.DeleteMirror(ctx, "m"); err != nil {
		t.Fatalf("delete mirror: %v", err)
	}
	if ms, err := da.ListMirrors(ctx); err != nil || slices.ContainsFunc(ms, func(m mirrorproto.ListedMirror) bool { return m.MirrorName == "m" }) {
		t.Fatalf("mirror m still listed after delete: %v %v", ms, err)
	}
	lmo, err := da.LastMirroredOffsets(ctx, "any", map[string][]int32{"events": {0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range lmo[0].Partitions {
		want := dst.partition("events", p.PartitionIndex).EpochAt(ends[p.PartitionIndex] - 1)
		if p.ErrorCode != 0 || p.LastMirrorEpoch != want || p.LastMirroredOffset != ends[p.PartitionIndex]-1 {
			t.Fatalf("events-%d after the mirror was deleted: last mirrored offset %d epoch %d (code %d), want %d epoch %d",
				p.PartitionIndex, p.LastMirroredOffset, p.LastMirrorEpoch, p.ErrorCode, ends[p.PartitionIndex]-1, want)
		}
	}
	for p := range int32(3) {
		if err := produceOne(t, dst, "events", p, fmt.Sprintf("after delete %d", p)); err != nil {
			t.Fatalf("produce after the mirror was deleted: %v", err)
		}
	}
	sa := src.admin()
	if err := sa.CreateMirror(ctx, "back", map[string]string{"bootstrap.servers": dst.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := sa.AddTopicsToMirror(ctx, map[string]string{"events": "back"}); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, dst, src, "back", "events", 60*time.Second)
	for p := range int32(3) {
		sameLog(t, fmt.Sprintf("failback after delete events-%d", p), dst.partition("events", p), src.partition("events", p))
	}
}

// TestMirrorNetworkCut cuts the connection between the clusters for 10 s
// through testing/faultproxy while records keep arriving on the source:
// during the cut DescribeMirrors reports the source unreachable (mirror
// FAILED with the reason, partitions still MIRRORING, nothing appended);
// afterwards mirroring resumes by itself and both logs end byte-identical
// (nothing lost, nothing duplicated).
func TestMirrorNetworkCut(t *testing.T) {
	tandemtest.Long(t) // tens of seconds: the full tier only
	px, err := faultproxy.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	// The source advertises the proxy, so that every connection of the
	// mirror (bootstrap and partition leaders) goes through it.
	src := startMirrorCluster(t, px.Addr())
	px.SetTarget(src.addr())
	dst := startMirrorCluster(t, "")
	const topic = "cut"
	createMirrorTopic(t, src, topic, 3)
	produceMixed(t, src, topic, 6000)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": px.Addr()}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{topic: "m"}); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, src, dst, "m", topic, 60*time.Second)

	// Keep producing to the source (directly, not through the proxy)
	// while the link is down.
	prodDone := make(chan error, 1)
	go func() {
		cl := src.client(kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(2*time.Millisecond))
		for i := range 60 {
			recs := make([]*kgo.Record, 50)
			for j := range recs {
				k, v, _ := genRecord(5_000_000 + i*50 + j)
				recs[j] = &kgo.Record{Key: k, Value: v}
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				prodDone <- err
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		prodDone <- nil
	}()
	time.Sleep(time.Second)
	cutAt := time.Now()
	px.Cut(10 * time.Second)
	frozen := map[int32]int64{}
	for p := range int32(3) {
		frozen[p] = dst.partition(topic, p).Offsets().LogEnd
	}
	waitFor(t, 8*time.Second, "DescribeMirrors to report the source unreachable during the cut", func() bool {
		st, m := states(t, da, "m")
		failed := 0
		for _, pd := range st {
			switch pd.State {
			case "MIRRORING": // not noticed yet
			case "FAILED": // cut off from its source, as every view says
				failed++
			default:
				t.Fatalf("partition state %s during a network cut, want MIRRORING, then FAILED", pd.State)
			}
		}
		return failed == len(st) && m.State == "FAILED" && m.ErrorMessage != nil && strings.Contains(*m.ErrorMessage, "unreachable")
	})
	for p := range int32(3) {
		if leo := dst.partition(topic, p).Offsets().LogEnd; leo != frozen[p] {
			t.Fatalf("partition %d moved from %d to %d while the link was cut", p, frozen[p], leo)
		}
	}
	if time.Since(cutAt) >= 10*time.Second {
		t.Fatalf("the cut was over before it was observed")
	}
	if err := <-prodDone; err != nil {
		t.Fatalf("produce to the source: %v", err)
	}
	time.Sleep(time.Until(cutAt.Add(10 * time.Second)))
	caughtUp(t, src, dst, "m", topic, 60*time.Second)
	if _, m := states(t, da, "m"); m.State != "MIRRORING" || m.ErrorMessage != nil {
		t.Fatalf("after the cut the mirror is %s (%v)", m.State, m.ErrorMessage)
	}
	for p := range int32(3) {
		sameLog(t, fmt.Sprintf("%s-%d after the cut", topic, p), src.partition(topic, p), dst.partition(topic, p))
	}
}

// TestMirrorSASLCredentials mirrors from a SASL_PLAINTEXT source: with the
// right password the topic is copied byte for byte; with a wrong one the
// mirror is FAILED with the reason in DescribeMirrors, and adding a topic
// to it fails clearly without leaving a topic behind.
func TestMirrorSASLCredentials(t *testing.T) {
	src := startSecure(t, false, nil)
	addr := src.ListenerAddr("SASL_PLAINTEXT")
	createTopicAs(t, addr, "admin", "secure")
	cl := tandemtest.Client(t, addr, kgo.SASL(franzSASL("alice", "PLAIN")), kgo.DefaultProduceTopic("secure"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 20 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "secret %d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	dst := startMirrorCluster(t, "")
	da := dst.admin()
	sasl := func(pass string) map[string]string {
		return map[string]string{"bootstrap.servers": addr, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
			"sasl.jaas.config": `org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="` + pass + `";`}
	}
	if err := da.CreateMirror(ctx, "bad", sasl("wrong")); err != nil {
		t.Fatalf("create mirror with a wrong password: %v", err)
	}
	waitFor(t, 30*time.Second, "mirror with a wrong password to be FAILED", func() bool {
		_, m := states(t, da, "bad")
		return m.State == "FAILED" && m.ErrorMessage != nil && strings.Contains(*m.ErrorMessage, "SASL_AUTHENTICATION_FAILED")
	})
	_, m := states(t, da, "bad")
	t.Logf("wrong password: %s: %s", m.State, *m.ErrorMessage)
	if m.ErrorCode != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("wrong password: error code %d, want SASL_AUTHENTICATION_FAILED", m.ErrorCode)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"secure": "bad"}); err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("adding a topic to a mirror with a wrong password: %v", err)
	}
	if dst.topic("secure") != nil {
		t.Fatalf("a failed add left topic secure behind")
	}
	if err := da.DeleteMirror(ctx, "bad"); err != nil {
		t.Fatal(err)
	}

	if err := da.CreateMirror(ctx, "good", sasl("alice-secret")); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"secure": "good"}); err != nil {
		t.Fatal(err)
	}
	sp := src.Engine().Partition(engine.TopicID(src.Metadata().Image().Topics["secure"].ID), 0)
	waitFor(t, 30*time.Second, "SASL mirror to catch up", func() bool {
		st, m := states(t, da, "good")
		pd := st["secure/0"]
		return m.State == "MIRRORING" && pd.State == "MIRRORING" && pd.DestinationOffset == sp.Offsets().LogEnd && pd.Lag == 0
	})
	sameLog(t, "secure-0", sp, dst.partition("secure", 0))
}

// TestPluginPropsNotUnknown: the plugins' own properties (mirror.*,
// transaction.*, offsets.*, group.*, replica.fetch.*) are not logged as
// unknown broker properties; a property nobody knows still is.
func TestPluginPropsNotUnknown(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	props := maps.Clone(mirrorProps)
	props["group.initial.rebalance.delay.ms"] = "0"
	props["transaction.max.timeout.ms"] = "60000"
	props["bogus.property"] = "1"
	_, err := server.New(server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Props: props, Logger: log,
		Plugins: []any{groups.New(props, log), txn.New(props, log), mirror.New(props, log)}})
	if err != nil {
		t.Fatal(err)
	}
	var unknown string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "unknown broker properties") {
			unknown = l
		}
	}
	if !strings.Contains(unknown, "bogus.property") {
		t.Fatalf("bogus.property not reported as unknown: %q", logs.String())
	}
	for k := range props {
		if k != "bogus.property" && strings.Contains(unknown, k) {
			t.Fatalf("plugin property %s logged as unknown: %s", k, unknown)
		}
	}
}

// TestMirrorLagMs: while a mirror is behind, DescribeMirrors reports its
// lag in milliseconds as the source's newest record time minus the
// destination's newest (records here are one minute apart, so the lag is
// a whole number of minutes); it is 0 once caught up.
func TestMirrorLagMs(t *testing.T) {
	tandemtest.Long(t) // a throttled mirror, seconds: the full tier only
	src := startMirrorCluster(t, "")
	// Small fetches, throttled: the mirror needs several seconds.
	dst := startMirrorClusterProps(t, "", map[string]string{"replica.fetch.max.bytes": "2000", "mirror.replication.throttled.rate": "3000"})
	const topic = "clock"
	createMirrorTopic(t, src, topic, 1)
	cl := src.client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := time.Now().Add(-200 * time.Minute).Truncate(time.Minute)
	const n = 100
	for i := range n {
		r := &kgo.Record{Value: bytes.Repeat([]byte{'x'}, 100), Timestamp: base.Add(time.Duration(i) * time.Minute)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{topic: "m"}); err != nil {
		t.Fatal(err)
	}
	var seen []int64
	waitFor(t, 60*time.Second, "mirror to catch up", func() bool {
		st, _ := states(t, da, "m")
		pd := st[topic+"/0"]
		if pd.LagMs > 0 { // -1: not measured yet
			if pd.LagMs%60000 != 0 || pd.LagMs > (n-1)*60000 {
				t.Fatalf("lag %d ms with records one minute apart (lag %d records)", pd.LagMs, pd.Lag)
			}
			seen = append(seen, pd.LagMs)
		}
		return pd.State == "MIRRORING" && pd.Lag == 0 && pd.DestinationOffset == n && pd.LagMs == 0
	})
	if len(seen) == 0 {
		t.Fatalf("no lag in milliseconds reported while the mirror was behind")
	}
	t.Logf("lag in ms while behind: %v", seen)
}

// TestDemo runs `tandem demo` on the built binary: two local clusters, a
// mirrored topic, and --describe tables until the lag is 0; the last
// table shows every record mirrored.
func TestDemo(t *testing.T) {
	bin := tandemtest.BuildBinary(t)
	const records = 4000
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--records", strconv.Itoa(records), "--rate", "200000", "--interval", "200ms", "--duration", "80s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tandem demo: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"Created mirror demo.", "Added 1 topic(s) to mirror demo", "MIRROR  TOPIC  PARTITION  SOURCE-OFFSET  DESTINATION-OFFSET  LAG", "the mirror caught up"} {
		if !strings.Contains(text, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, text)
		}
	}
	// The last table: every partition MIRRORING, lag 0, all records there.
	tables := strings.Split(text, "$ tandem mirrors")
	var sum int64
	rows := 0
	for _, l := range strings.Split(tables[len(tables)-1], "\n") {
		// MIRROR TOPIC PARTITION SOURCE-OFFSET DESTINATION-OFFSET LAG STATE LAG-MS SOURCE-AGE [REASON]
		f := strings.Fields(l)
		if len(f) < 9 || f[0] != "demo" {
			continue
		}
		rows++
		src, _ := strconv.ParseInt(f[3], 10, 64)
		if f[3] != f[4] || f[5] != "0" || f[6] != "MIRRORING" || f[7] != "0" || len(f) > 9 {
			t.Fatalf("last table row %q: want source = destination offset, lag 0 (0 ms), MIRRORING, no reason", l)
		}
		sum += src
	}
	if rows != 3 || sum != records {
		t.Fatalf("last table: %d rows, %d records mirrored, want 3 rows and %d:\n%s", rows, sum, records, tables[len(tables)-1])
	}
}
