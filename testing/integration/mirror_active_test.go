package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/internal/localcluster"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/faultproxy"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// Active-active and many-to-one mirroring (issue 43), end to end with
// real clients.

// ackLog is what a producer had acknowledged: partition → offset → value.
type ackLog struct {
	mu   sync.Mutex
	recs map[int32]map[int64]string
}

// ackedProducer produces to every partition of topic at about 2,000
// records a second (uncompressed, idempotent, acks=all) until stopped,
// and records each acknowledged record where the cluster put it.
type ackedProducer struct {
	acked  ackLog
	cancel context.CancelFunc
	done   chan struct{}
}

func startAckedProducer(t *testing.T, addrs []string, topic, tag string) *ackedProducer {
	cl := tandemtest.Client(t, addrs[0], kgo.SeedBrokers(addrs...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(2*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(1000), kgo.RecordDeliveryTimeout(2*time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	ap := &ackedProducer{acked: ackLog{recs: map[int32]map[int64]string{}}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ap.done)
		var wg sync.WaitGroup
		for i := 0; ctx.Err() == nil; i++ {
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%08d", tag, i)}, func(r *kgo.Record, err error) {
				defer wg.Done()
				if err == nil {
					ap.acked.add(r.Partition, r.Offset, string(r.Value))
				}
			})
			if i%20 == 19 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		wg.Wait()
	}()
	t.Cleanup(ap.stop)
	return ap
}

func (l *ackLog) add(p int32, off int64, v string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recs[p] == nil {
		l.recs[p] = map[int64]string{}
	}
	l.recs[p][off] = v
}

func (ap *ackedProducer) stop() {
	ap.cancel()
	<-ap.done
}

// proxiedCluster starts a three-broker cluster whose brokers other
// clusters reach through a fault proxy each: an EXTERNAL listener
// advertised as the proxy's address, beside the INTERNAL one its brokers
// and the test's clients use.
func proxiedCluster(t *testing.T) (*tandemtest.Cluster, []*faultproxy.Proxy) {
	var pxs []*faultproxy.Proxy
	for range 3 {
		px, err := faultproxy.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		pxs = append(pxs, px)
	}
	external := map[int32]string{}
	c := tandemtest.StartClusterNodes(t, 3, clusterMirrorProps, func(id int32) map[string]string {
		addrs, err := localcluster.FreeAddrs("127.0.0.1", 1)
		if err != nil {
			t.Fatal(err)
		}
		external[id] = addrs[0]
		return map[string]string{
			"listeners":                      "INTERNAL://127.0.0.1:0,EXTERNAL://" + addrs[0],
			"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
			"inter.broker.listener.name":     "INTERNAL",
			"advertised.listeners":           "EXTERNAL://" + pxs[id-1].Addr(),
		}
	})
	for id, addr := range external {
		pxs[id-1].SetTarget(addr)
	}
	return c, pxs
}

// waitCaughtUpAs waits until every partition of srcTopic is copied as
// dstTopic by mirror name, MIRRORING with lag 0 on its destination
// leader, whose log ends at the source leader's high watermark; then
// every destination replica must hold the source leader's batches, byte
// for byte.
func waitCaughtUpAs(t *testing.T, src, dst *tandemtest.Cluster, name, srcTopic, dstTopic string, parts int32, d time.Duration) {
	t.Helper()
	var last string
	next := int32(0) // the partitions below next have caught up
	wait.Until(t, d, func() error {
		for ; next < parts; next++ {
			p := next
			sp, dp := clusterPartition(src, src.Leader(srcTopic, p), srcTopic, p), clusterPartition(dst, dst.Leader(dstTopic, p), dstTopic, p)
			if sp == nil || dp == nil {
				return fmt.Errorf("mirror %s: %s not caught up with %s: %s", name, dstTopic, srcTopic, last)
			}
			pd := describeOn(t, dst.Broker(dst.Leader(dstTopic, p)).Addr, name)[fmt.Sprintf("%s/%d", dstTopic, p)]
			se := sp.Offsets().HighWatermark
			if pd.State != "MIRRORING" || pd.Lag != 0 || pd.SourceOffset != se || dp.Offsets().LogEnd != se {
				last = fmt.Sprintf("%s-%d: %+v, source end %d, destination end %d", dstTopic, p, pd, se, dp.Offsets().LogEnd)
				return fmt.Errorf("mirror %s: %s not caught up with %s: %s", name, dstTopic, srcTopic, last)
			}
		}
		return nil
	})
	for p := range parts {
		want := batches(t, clusterPartition(src, src.Leader(srcTopic, p), srcTopic, p))
		for _, b := range dst.Brokers {
			var err error
			waitFor(t, 20*time.Second, fmt.Sprintf("%s-%d on broker %d", dstTopic, p, b.ID), func() bool {
				err = fmt.Errorf("not hosted")
				if dp := clusterPartition(dst, b.ID, dstTopic, p); dp != nil {
					err = diffLogs(want, batches(t, dp)) // a follower may still be fetching
				}
				return err == nil
			})
			if err != nil {
				t.Fatalf("%s-%d on broker %d against %s-%d: %v", dstTopic, p, b.ID, srcTopic, p, err)
			}
		}
	}
}

// readBack consumes a topic from its start to its end and returns
// partition → offset → value.
func readBack(t *testing.T, addrs []string, topic string) map[int32]map[int64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(tandemtest.Client(t, addrs[0], kgo.SeedBrokers(addrs...)))
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
	}
	cl := tandemtest.Client(t, addrs[0], kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	out := map[int32]map[int64]string{}
	left := 0
	ends.Each(func(o kadm.ListedOffset) { left += int(o.Offset) })
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s back: %d records left: %v", topic, left, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if out[r.Partition] == nil {
				out[r.Partition] = map[int64]string{}
			}
			out[r.Partition][r.Offset] = string(r.Value)
			left--
		})
	}
	return out
}

// checkAcked fails unless every acknowledged record is at its offset in
// got with its value.
func checkAcked(t *testing.T, what string, acked *ackLog, got map[int32]map[int64]string) {
	t.Helper()
	acked.mu.Lock()
	defer acked.mu.Unlock()
	n := 0
	for p, recs := range acked.recs {
		for off, v := range recs {
			if got[p][off] != v {
				t.Fatalf("%s: acknowledged record %q at %d-%d reads back as %q", what, v, p, off, got[p][off])
			}
			n++
		}
	}
	if n == 0 {
		t.Fatalf("%s: nothing was acknowledged", what)
	}
	t.Logf("%s: %d acknowledged records, each at its offset", what, n)
}

// userTopics are a cluster's topics but the internal ones.
func userTopics(img *metadata.Image) []string {
	var out []string
	for name := range img.Topics {
		if !strings.HasPrefix(name, "__") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestMirrorActiveActive is issue 43's end-to-end test: two three-broker
// clusters mirroring each other, A's topics into B as a.*, B's into A as
// b.*, both mirrors discovering every topic (mirror.topics.include=.*),
// while producers write orders on both sides. A group reads orders and
// b.orders on A, commits and stops; B's link to A is cut for 10 s
// (nothing of A reaches B meanwhile) and comes back. Then: every acknowledged record of each side is on the
// other under the prefix at the same offset, and every replica holds
// the source's batches byte for byte; nothing was copied back (no
// a.b.orders, no b.a.orders, each side's orders holds its own records
// only); the group, moved to B, resumes on orders
// and a.orders exactly at the offsets it committed on A.
func TestMirrorActiveActive(t *testing.T) {
	tandemtest.Long(t) // about 30 s
	a, pxs := proxiedCluster(t)
	b := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const parts = int32(3)
	for _, c := range []*tandemtest.Cluster{a, b} {
		if _, err := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...))).CreateTopic(ctx, parts, 3, nil, "orders"); err != nil {
			t.Fatalf("create orders: %v", err)
		}
		c.WaitFor("orders", func(img *metadata.Image) bool { return img.Topics["orders"] != nil })
	}
	prodA, prodB := startAckedProducer(t, a.Addrs(), "orders", "a"), startAckedProducer(t, b.Addrs(), "orders", "b")

	// B mirrors A through A's proxies; A mirrors B directly.
	aa, ba := clusterAdmin(t, a), clusterAdmin(t, b)
	var proxies []string
	for _, px := range pxs {
		proxies = append(proxies, px.Addr())
	}
	if err := ba.CreateMirror(ctx, "from-a", map[string]string{"bootstrap.servers": strings.Join(proxies, ","),
		"mirror.topic.prefix": "a.", "mirror.topics.include": ".*"}); err != nil {
		t.Fatal(err)
	}
	if err := aa.CreateMirror(ctx, "from-b", map[string]string{"bootstrap.servers": strings.Join(b.Addrs(), ","),
		"mirror.topic.prefix": "b.", "mirror.topics.include": ".*"}); err != nil {
		t.Fatal(err)
	}
	a.WaitFor("b.orders", func(img *metadata.Image) bool { return img.Topics["b.orders"] != nil })
	b.WaitFor("a.orders", func(img *metadata.Image) bool { return img.Topics["a.orders"] != nil })

	// A group reads both on A, commits what it read, and leaves.
	committed := consumeAndCommit(t, a.Addrs(), "billing", parts, "orders", "b.orders")

	// The link from B to A is cut for 10 s while both sides keep
	// writing: nothing of A reaches B meanwhile (after what was in
	// flight), B's mirror says so, and A's orders still grows.
	cutAt := time.Now()
	for _, px := range pxs {
		px.Cut(10 * time.Second)
	}
	time.Sleep(time.Second)
	copied0, written0 := logEnds(b, "a.orders", parts), logEnds(a, "orders", parts)
	waitFor(t, time.Until(cutAt.Add(8*time.Second)), "B's mirror to see A unreachable", func() bool {
		ms, err := ba.DescribeMirrors(ctx, "from-a")
		return err == nil && len(ms) == 1 && ms[0].State == "FAILED"
	})
	time.Sleep(time.Until(cutAt.Add(9 * time.Second)))
	if copied, written := logEnds(b, "a.orders", parts), logEnds(a, "orders", parts); copied != copied0 || written <= written0 {
		t.Fatalf("during the cut B's a.orders went from %d to %d records, A's orders from %d to %d: want the first still, the second growing", copied0, copied, written0, written)
	}
	// Both keep writing for a while after the link is back.
	time.Sleep(time.Until(cutAt.Add(15 * time.Second)))
	prodA.stop()
	prodB.stop()

	waitCaughtUpAs(t, a, b, "from-a", "orders", "a.orders", parts, time.Minute)
	waitCaughtUpAs(t, b, a, "from-b", "orders", "b.orders", parts, time.Minute)
	checkAcked(t, "A's orders on B as a.orders", &prodA.acked, readBack(t, b.Addrs(), "a.orders"))
	checkAcked(t, "B's orders on A as b.orders", &prodB.acked, readBack(t, a.Addrs(), "b.orders"))
	for _, side := range []struct {
		name string
		c    *tandemtest.Cluster
		p    *ackedProducer
	}{{"a", a, prodA}, {"b", b, prodB}} {
		got := readBack(t, side.c.Addrs(), "orders")
		for p, recs := range got {
			for off, v := range recs {
				if !strings.HasPrefix(v, side.name+"-") {
					t.Fatalf("orders-%d on %s holds %q at %d: an echo of the other side's records", p, strings.ToUpper(side.name), v, off)
				}
			}
		}
		checkAcked(t, strings.ToUpper(side.name)+"'s own orders", &side.p.acked, got)
	}
	if a.Image().Topics["b.orders"].ID != b.Image().Topics["orders"].ID || b.Image().Topics["a.orders"].ID != a.Image().Topics["orders"].ID {
		t.Fatal("a prefixed copy does not have its source's topic ID")
	}
	time.Sleep(2 * time.Second) // two more discovery cycles
	for _, c := range []struct {
		name string
		c    *tandemtest.Cluster
		want []string
	}{{"A", a, []string{"b.orders", "orders"}}, {"B", b, []string{"a.orders", "orders"}}} {
		if got := userTopics(c.c.Image()); !slices.Equal(got, c.want) {
			t.Fatalf("cluster %s holds topics %v, want %v: something was copied back", c.name, got, c.want)
		}
	}

	// The group moves to B: orders on A is a.orders there, b.orders on A
	// is orders there.
	want := map[string]int64{}
	for tp, off := range committed {
		topic, p, _ := strings.Cut(tp, "/")
		switch topic {
		case "orders":
			want["a.orders/"+p] = off
		case "b.orders":
			want["orders/"+p] = off
		}
	}
	resumeOnB(t, b, "billing", want)
}

// logEnds is the sum of the log ends of topic's partitions on their
// leaders in c.
func logEnds(c *tandemtest.Cluster, topic string, parts int32) int64 {
	var n int64
	for p := range parts {
		n += clusterPartition(c, c.Leader(topic, p), topic, p).Offsets().LogEnd
	}
	return n
}

// consumeAndCommit reads topics (of parts partitions each) as group until
// it read records of every partition, commits what it read, leaves the
// group, and returns the offsets it committed by "topic/partition".
func consumeAndCommit(t *testing.T, addrs []string, group string, parts int32, topics ...string) map[string]int64 {
	t.Helper()
	cl := tandemtest.Client(t, addrs[0], kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.MetadataMinAge(200*time.Millisecond), kgo.MetadataMaxAge(500*time.Millisecond))
	// Until it read every partition: joining the group (its initial
	// rebalance delay) and the first fetches took over 4 s under -race
	// on a loaded machine, and a fixed 4 s read nothing.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	seen := map[string]bool{}
	for ctx.Err() == nil && len(seen) < len(topics)*int(parts) {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[fmt.Sprintf("%s/%d", r.Topic, r.Partition)] = true })
	}
	cancel()
	cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer ccancel()
	if err := cl.CommitUncommittedOffsets(cctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	cl.Close() // leaves the group: Empty on this cluster
	if len(seen) < len(topics)*int(parts) {
		t.Fatalf("group %s read partitions %v in a minute, want %d of each of %v", group, slices.Sorted(maps.Keys(seen)), parts, topics)
	}
	offs, err := kadm.NewClient(tandemtest.Client(t, addrs[0], kgo.SeedBrokers(addrs...))).FetchOffsets(cctx, group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	offs.Each(func(o kadm.OffsetResponse) { out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At })
	return out
}

// resumeOnB waits until the group's offsets on b are want (synced by
// b's mirror), then reads as the group: each partition's first record is
// at the offset committed, and the group reads every record from there
// to the end once.
func resumeOnB(t *testing.T, b *tandemtest.Cluster, group string, want map[string]int64) {
	t.Helper()
	shape := regexp.MustCompile(`^(a\.)?orders/[0-2]$`)
	if len(want) != 6 || slices.ContainsFunc(slices.Collect(maps.Keys(want)), func(k string) bool { return !shape.MatchString(k) }) {
		t.Fatalf("the group's offsets to resume from on B: %v, want orders and a.orders, 3 partitions each", want)
	}
	adm := kadm.NewClient(tandemtest.Client(t, b.Addrs()[0], kgo.SeedBrokers(b.Addrs()...)))
	var got map[string]int64
	waitFor(t, 30*time.Second, "the group's offsets synced to B", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		got = map[string]int64{}
		offs.Each(func(o kadm.OffsetResponse) { got[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At })
		return maps.Equal(got, want)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, "orders", "a.orders")
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets on B: %v %v", err, ends.Error())
	}
	left := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		k := fmt.Sprintf("%s/%d", o.Topic, o.Partition)
		left[k] = o.Offset - want[k]
	})
	cl := tandemtest.Client(t, b.Addrs()[0], kgo.SeedBrokers(b.Addrs()...), kgo.ConsumerGroup(group), kgo.ConsumeRegex(),
		kgo.ConsumeTopics(`^(a\.)?orders$`), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	defer cl.Close()
	next := maps.Clone(want)
	for slices.ContainsFunc(slices.Collect(maps.Values(left)), func(n int64) bool { return n > 0 }) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the group on B: records left to read %v", left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			if r.Offset != next[k] {
				t.Fatalf("the group on B read %s at offset %d, want %d: it missed or repeated records", k, r.Offset, next[k])
			}
			next[k]++
			left[k]--
		})
	}
}

// TestMirrorManyToOne: three edge clusters into one central cluster,
// each mirror with its own prefix and discovering every topic: each
// edge's orders (every codec, transactions) is on the central cluster as
// e1.orders, e2.orders, e3.orders, byte for byte at the same offsets,
// with its own topic ID; events, created on the edges while the mirrors
// run and written by a producer on each edge at once, is discovered and
// every acknowledged record is read back from the central cluster under
// its edge's prefix at its offset. Two mirrors that would write one
// topic are refused, naming both: a fourth mirror with a prefix already
// taken (--create), and one whose prefix e plus a source's 1.orders
// makes edge1's e1.orders (--create with patterns selecting it, --add).
func TestMirrorManyToOne(t *testing.T) {
	tandemtest.Long(t) // four clusters: the full tier only
	central := startMirrorCluster(t, "")
	var edges []*mirrorCluster
	for i := range 3 {
		e := startMirrorCluster(t, "")
		createMirrorTopic(t, e, "orders", 2)
		produceMixed(t, e, "orders", 1200)
		prefixedMirror(t, e, central, fmt.Sprintf("edge%d", i+1), fmt.Sprintf("e%d.", i+1), map[string]string{"mirror.topics.include": ".*"})
		edges = append(edges, e)
	}
	var prods []*ackedProducer
	for i, e := range edges {
		createMirrorTopic(t, e, "events", 3)
		prods = append(prods, startAckedProducer(t, []string{e.addr()}, "events", fmt.Sprintf("e%d", i+1)))
	}
	time.Sleep(4 * time.Second)
	for _, p := range prods {
		p.stop()
	}
	for i, e := range edges {
		name, prefix := fmt.Sprintf("edge%d", i+1), fmt.Sprintf("e%d.", i+1)
		produceN(t, e.addr(), "orders", 2, 50)
		caughtUpAs(t, e, central, name, "orders", prefix+"orders", time.Minute)
		caughtUpAs(t, e, central, name, "events", prefix+"events", time.Minute)
		checkAcked(t, fmt.Sprintf("edge %d's events on central as %sevents", i+1, prefix), &prods[i].acked, readBack(t, []string{central.addr()}, prefix+"events"))
		for _, topic := range []string{"orders", "events"} {
			if central.topic(prefix+topic).ID != e.topic(topic).ID {
				t.Fatalf("%s%s does not have edge %d's topic ID", prefix, topic, i+1)
			}
		}
	}
	want := []string{"e1.events", "e1.orders", "e2.events", "e2.orders", "e3.events", "e3.orders"}
	if got := userTopics(central.b.Metadata().Image()); !slices.Equal(got, want) {
		t.Fatalf("central holds %v, want %v", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := central.admin()
	err := ca.CreateMirror(ctx, "edge4", map[string]string{"bootstrap.servers": edges[0].addr(), "mirror.topic.prefix": "e2."})
	if err == nil || !strings.Contains(err.Error(), "edge4") || !strings.Contains(err.Error(), "edge2") {
		t.Fatalf("a fourth mirror with prefix e2.: %v, want a refusal naming edge4 and edge2", err)
	}
	other := startMirrorCluster(t, "")
	createMirrorTopic(t, other, "1.orders", 1)
	err = ca.CreateMirror(ctx, "edge5", map[string]string{"bootstrap.servers": other.addr(), "mirror.topic.prefix": "e", "mirror.topics.include": `1\..*`})
	if err == nil || !strings.Contains(err.Error(), "edge5") || !strings.Contains(err.Error(), "edge1") {
		t.Fatalf("a mirror with prefix e selecting 1.orders (e1.orders here): %v, want a refusal naming edge5 and edge1", err)
	}
	if err := ca.CreateMirror(ctx, "edge5", map[string]string{"bootstrap.servers": other.addr(), "mirror.topic.prefix": "e"}); err != nil {
		t.Fatal(err)
	}
	err = ca.AddTopicsToMirror(ctx, map[string]string{"1.orders": "edge5"})
	if !errors.Is(err, mirrorproto.ErrTopicAlreadyMirrored) || !strings.Contains(err.Error(), "edge5") || !strings.Contains(err.Error(), "edge1") {
		t.Fatalf("--add 1.orders to edge5 (prefix e, e1.orders here): %v, want TOPIC_ALREADY_MIRRORED naming edge5 and edge1", err)
	}
	if central.topic("e1.orders").ID != edges[0].topic("orders").ID {
		t.Fatal("e1.orders changed hands")
	}
}
