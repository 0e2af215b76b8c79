package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// pairsApp is an exactly-once application on the source: it reads
// pairs.in in group "app" and, for each input record, writes one record
// to pairs.a and one to pairs.b in a transaction that also commits the
// group's offsets. A second group, "reader", reads pairs.a
// (read_committed) and commits as it goes. A plain producer feeds
// pairs.in.
type pairsApp struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	txns   int // committed transactions
	errs   []error
}

func startPairsApp(t *testing.T, addr string) *pairsApp {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &pairsApp{cancel: cancel}
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryTimeout(5 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	feed := client(kgo.DefaultProduceTopic("pairs.in"), kgo.ProducerLinger(2*time.Millisecond))
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(addr), kgo.RetryTimeout(5*time.Second),
		kgo.TransactionalID("pairs-app"), kgo.TransactionTimeout(10*time.Second),
		kgo.ConsumerGroup("app"), kgo.ConsumeTopics("pairs.in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	reader := client(kgo.ConsumerGroup("reader"), kgo.ConsumeTopics("pairs.a"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.AutoCommitInterval(200*time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond))
	a.wg.Add(3)
	go func() { // the feed: about 2,000 records a second
		defer a.wg.Done()
		defer feed.Close()
		for i := 0; ctx.Err() == nil; i++ {
			feed.Produce(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}, nil)
			if i%20 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	go func() { // the application
		defer a.wg.Done()
		defer sess.Close()
		for ctx.Err() == nil {
			fs := sess.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			if err := sess.Begin(); err != nil {
				a.fail(err)
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				v := []byte("pair-" + string(r.Value))
				sess.Produce(ctx, &kgo.Record{Topic: "pairs.a", Key: r.Value, Value: v}, nil)
				sess.Produce(ctx, &kgo.Record{Topic: "pairs.b", Key: []byte("b" + string(r.Value)), Value: v}, nil)
			})
			committed, err := sess.End(ctx, kgo.TryCommit)
			if err != nil && ctx.Err() == nil {
				a.fail(err)
				return
			}
			if committed {
				a.mu.Lock()
				a.txns++
				a.mu.Unlock()
			}
		}
	}()
	go func() { // the downstream reader
		defer a.wg.Done()
		defer reader.Close()
		for ctx.Err() == nil {
			reader.PollFetches(ctx)
		}
	}()
	return a
}

func (a *pairsApp) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err)
}

func (a *pairsApp) committed() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.txns
}

func (a *pairsApp) stop() {
	a.cancel()
	a.wg.Wait()
}

// readCommitted reads every committed record of topic, as a
// read_committed consumer from the start sees them: value to count. It
// stops once a poll of two seconds brings nothing more.
func readCommitted(t *testing.T, addr, topic string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]int{}
	wait.Until(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			out[string(r.Value)]++
			n++
		})
		if n == 0 && ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reading %s did not end", topic)
	})
	return out
}

// TestMirrorConsistentFailover is issue 30's application-level invariant:
// an exactly-once application on the source writes pairs (a record to
// pairs.a and one to pairs.b in one transaction, with its group's
// offsets); at a random moment under load the source dies, and a
// consistent failover of the three topics leaves every pair whole or
// absent on the destination, every group offset at or below its
// partition's cut, one cut time for every partition, and what lay
// beyond the cut in the divergence quarantine.
func TestMirrorConsistentFailover(t *testing.T) {
	tandemtest.Long(t) // two clusters, and the CLI (BuildBinary): the full tier only
	f := pairsFailover(t, true)
	if f.split == 0 {
		t.Fatalf("no pair split across the partitions before the failover: the test shows nothing")
	}
}

// TestMirrorConsistentCutCost measures what a consistent failover gives
// up beyond a failover partition by partition, with no partition held
// back: the source dies under the pairs application, three times.
// docs/mirroring.md quotes its figures.
func TestMirrorConsistentCutCost(t *testing.T) {
	tandemtest.Long(t)
	for i := range 3 {
		f := pairsFailover(t, false)
		t.Logf("run %d: %d pairs kept, %d records given up beyond the cut (%d ms of record time), %d pairs split before the cut",
			i, f.pairs, f.records, f.ms, f.split)
	}
}

// pairsFigures is what one pairsFailover saw.
type pairsFigures struct {
	pairs, split int   // pairs kept whole; pairs split before the failover
	records, ms  int64 // given up beyond the cut
}

// pairsFailover runs the pairs application against a source mirrored to
// a destination, kills the source at a random moment (with pairs.b held
// back by a pause first, if behind), fails the three topics over at one
// consistent cut with the CLI, and checks the invariants.
func pairsFailover(t *testing.T, behind bool) pairsFigures {
	src := startMirrorCluster(t, "")
	dst := startMirrorCluster(t, "")
	topics := map[string]int32{"pairs.in": 1, "pairs.a": 3, "pairs.b": 3}
	for name, n := range topics {
		createMirrorTopic(t, src, name, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.addr(),
		"mirror.groups.include": "app|reader", "mirror.acl.include": "", "mirror.metadata.refresh.interval.ms": "300"}); err != nil {
		t.Fatal(err)
	}
	add := map[string]string{}
	for name := range topics {
		add[name] = "m"
	}
	if err := da.AddTopicsToMirror(ctx, add); err != nil {
		t.Fatal(err)
	}
	app := startPairsApp(t, src.addr())
	defer app.stop()
	waitFor(t, 30*time.Second, "the application to commit 50 transactions", func() bool { return app.committed() >= 50 })
	waitFor(t, 30*time.Second, "the groups' offsets to be mirrored", func() bool {
		offs, err := kadm.NewClient(dst.client()).FetchOffsets(ctx, "reader")
		return err == nil && len(offs) > 0
	})
	// pairs.b falls behind (paused), as a partition does whose source
	// leader is slow or far; then the source dies at a random moment.
	if behind {
		if err := da.PauseMirror(ctx, "m", "pairs.b"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
	src.b.Close()
	app.stop()
	if app.committed() < 50 {
		t.Fatalf("only %d transactions committed: %v", app.committed(), app.errs)
	}
	// What a failover partition by partition would keep: pairs on
	// pairs.a whose pairs.b half is not here.
	a0, b0 := readCommitted(t, dst.addr(), "pairs.a"), readCommitted(t, dst.addr(), "pairs.b")
	split := 0
	for v := range a0 {
		if b0[v] == 0 {
			split++
		}
	}

	// The operator's command, as JSON.
	code, stdout, stderr := runMirrors(t, "--bootstrap-server", dst.addr(), "--failover", "--consistent", "--force",
		"--mirror", "m", "--topic", `pairs\..*`, "--timeout", "2s", "--json")
	if code != 0 {
		t.Fatalf("tandem mirrors --failover --consistent: exit %d: %s%s", code, stdout, stderr)
	}
	var out struct {
		Partitions []struct {
			Topic             string     `json:"topic"`
			Partition         int32      `json:"partition"`
			DestinationOffset int64      `json:"destination_offset"`
			CutTime           *time.Time `json:"cut_time"`
			CutRecords        int64      `json:"cut_records"`
			CutMs             int64      `json:"cut_ms"`
		} `json:"partitions"`
		Error *string `json:"error"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Error != nil {
		t.Fatalf("--json: %v %v: %s", err, out.Error, stdout)
	}
	cuts := map[string]int64{}
	var cutTime time.Time
	var cutRecords, cutMs int64
	for _, p := range out.Partitions {
		if p.CutTime == nil || !cutTime.IsZero() && !p.CutTime.Equal(cutTime) {
			t.Fatalf("partition %s-%d: cut time %v, others %v: %s", p.Topic, p.Partition, p.CutTime, cutTime, stdout)
		}
		cutTime, cutRecords, cutMs = *p.CutTime, cutRecords+p.CutRecords, max(cutMs, p.CutMs)
		cuts[fmt.Sprintf("%s-%d", p.Topic, p.Partition)] = p.DestinationOffset
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst.addr()), admin.Opt(), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if len(cuts) != 7 {
		t.Fatalf("report for %d partitions, want 7: %s", len(cuts), stdout)
	}
	t.Logf("cut at %s: %d records (%d ms of record time) beyond it quarantined; %d transactions committed on the source; %d pairs would have been split",
		cutTime.Format(time.RFC3339Nano), cutRecords, cutMs, app.committed(), split)

	// Every pair whole or absent.
	a, b := readCommitted(t, dst.addr(), "pairs.a"), readCommitted(t, dst.addr(), "pairs.b")
	if len(a) == 0 {
		t.Fatal("no pair on the destination")
	}
	for v, n := range a {
		if n != 1 || b[v] != 1 {
			for _, tp := range []string{"pairs.a", "pairs.b"} {
				for i := int32(0); i < 3; i++ {
					dumpCut(t, dst, tp, i, cuts[fmt.Sprintf("%s-%d", tp, i)]-12)
				}
			}
			t.Logf("cuts %v, T %v", cuts, cutTime)
			t.Fatalf("pair %s: %d on pairs.a, %d on pairs.b", v, n, b[v])
		}
	}
	for v := range b {
		if a[v] == 0 {
			t.Fatalf("pair %s on pairs.b only", v)
		}
	}

	// What lay beyond the cut is in the quarantine, and said in the report.
	ms, err := admin.New(cl).DescribeMirrors(ctx, "m")
	if err != nil || len(ms) != 1 {
		t.Fatalf("describe: %v %+v", err, ms)
	}
	var quarantined int64
	for _, d := range ms[0].Diverged {
		if strings.Contains(d.Cause, "consistent failover cut") {
			quarantined += d.Records
			if d.FirstOffset < cuts[fmt.Sprintf("%s-%d", d.Topic, d.Partition)] {
				t.Fatalf("quarantined %s-%d from %d, below its cut %d", d.Topic, d.Partition, d.FirstOffset, cuts[fmt.Sprintf("%s-%d", d.Topic, d.Partition)])
			}
		}
	}
	if quarantined != cutRecords {
		t.Fatalf("the report says %d records beyond the cut, the quarantine holds %d", cutRecords, quarantined)
	}

	// Every group offset at or below its partition's cut.
	for _, g := range []string{"app", "reader"} {
		offs, err := kadm.NewClient(cl).FetchOffsets(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if cut, ok := cuts[fmt.Sprintf("%s-%d", o.Topic, o.Partition)]; ok && o.At > cut {
				t.Errorf("group %s: %s-%d committed at %d, past the cut %d", g, o.Topic, o.Partition, o.At, cut)
			}
		})
	}

	// --describe and the console say where each partition was cut.
	states, _ := describe(t, dst, "m")
	for k, pd := range states {
		if pd.State != "STOPPED" || !strings.Contains(pd.Reason, "consistent cut at "+cutTime.Format(time.RFC3339Nano)) {
			t.Fatalf("%s described as %s: %q", k, pd.State, pd.Reason)
		}
	}

	// The topics take writes.
	if err := produceOne(t, dst, "pairs.a", 0, "after"); err != nil {
		t.Fatalf("produce after the failover: %v", err)
	}
	return pairsFigures{pairs: len(a), split: split, records: cutRecords, ms: cutMs}
}

// dumpCut logs the batches of a destination partition around offset at.
func dumpCut(t *testing.T, c *mirrorCluster, topic string, p int32, from int64) {
	for _, b := range batches(t, c.partition(topic, p)) {
		h, _ := engine.ParseBatchHeader(b)
		if h.LastOffset() < from {
			continue
		}
		t.Logf("%s-%d base %d last %d maxTs %d pid %d epoch %d txn %v control %v type %d", topic, p, h.BaseOffset, h.LastOffset(),
			h.MaxTimestamp, h.ProducerID, h.ProducerEpoch, h.Transactional(), h.Control(), engine.ControlType(b))
	}
}

// TestMirrorConsistentCutCrash: the destination is killed (SIGKILL) while
// a consistent failover decides its cut (every partition's cut written
// but the decider's own) and after a partition was truncated to it. After
// a restart the same failover completes: every pair whole or absent, one
// cut time, and the quarantine holds what the report says was given up,
// copied once.
func TestMirrorConsistentCutCrash(t *testing.T) {
	tandemtest.Long(t) // two clusters, and the CLI (BuildBinary): the full tier only
	for _, step := range []mirror.StopStep{mirror.StepCutDeciding, mirror.StepCutApplied} {
		t.Run(string(step), func(t *testing.T) { consistentCutCrash(t, step) })
	}
}

// pairWriter returns a func that commits n transactions, each writing
// one pair: the same value to topics cx and cy ("pair-0", "pair-1", ...).
func pairWriter(t *testing.T, ctx context.Context, tx *kgo.Client) func(n int) {
	next := 0
	return func(n int) {
		t.Helper()
		for range n {
			if err := tx.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			v := []byte(fmt.Sprintf("pair-%d", next))
			next++
			if err := tx.ProduceSync(ctx, &kgo.Record{Topic: "cx", Key: v, Value: v}, &kgo.Record{Topic: "cy", Key: v, Value: v}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func consistentCutCrash(t *testing.T, step mirror.StopStep) {
	src := startMirrorCluster(t, "")
	createMirrorTopic(t, src, "cx", 2)
	createMirrorTopic(t, src, "cy", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pairs := pairWriter(t, ctx, src.client(kgo.TransactionalID("pairs"), kgo.TransactionTimeout(time.Minute)))
	ends := func(topic string) map[int32]int64 {
		return map[int32]int64{0: src.partition(topic, 0).Offsets().LogEnd, 1: src.partition(topic, 1).Offsets().LogEnd}
	}
	pairs(100)

	dir := t.TempDir()
	dst := openDestination(t, dir)
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.addr(), "mirror.groups.include": "", "mirror.acl.include": ""}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"cx": "m", "cy": "m"}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, dst, "m", "cx", ends("cx"), 30*time.Second)
	waitMirrored(t, dst, "m", "cy", ends("cy"), 30*time.Second)
	// cy falls behind: pairs written now are whole on cx only.
	if err := da.PauseMirror(ctx, "m", "cy"); err != nil {
		t.Fatal(err)
	}
	waitTopicState(t, dst, "m", "cy", 2, "PAUSED", 30*time.Second)
	time.Sleep(20 * time.Millisecond) // past the last time cy was known complete
	pairs(50)
	waitMirrored(t, dst, "m", "cx", ends("cx"), 30*time.Second)
	dst.b.Close()

	addr, exited, killed := startHelper(t, dir, "cx/"+string(step))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), admin.Opt(), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	admin.New(cl).Failover(rctx, "m", []string{"cx", "cy"}, admin.FailoverOptions{Force: true, Consistent: true, Timeout: time.Second}) //nolint:errcheck // the broker dies under it
	rcancel()
	cl.Close()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the destination did not die after step %s", step)
	}
	if got, _ := os.ReadFile(killed); string(got) != string(step) {
		t.Fatalf("the destination died, but not by its hook after %s (%q)", step, got)
	}

	dst = openDestination(t, dir)
	defer dst.b.Close()
	waitTopicState(t, dst, "m", "cx", 2, "STOPPED", 30*time.Second)
	waitTopicState(t, dst, "m", "cy", 2, "STOPPED", 30*time.Second)
	x, y := readCommitted(t, dst.addr(), "cx"), readCommitted(t, dst.addr(), "cy")
	if len(x) < 100 {
		t.Fatalf("%d pairs on cx, want the 100 mirrored before the pause", len(x))
	}
	if !maps.Equal(x, y) {
		t.Fatalf("pairs split: %d on cx, %d on cy", len(x), len(y))
	}
	// Asked again, the failover reports the cut it completed; the
	// command says it in words.
	code, stdout, stderr := runMirrors(t, "--bootstrap-server", dst.addr(), "--failover", "--consistent", "--mirror", "m", "--topic", "cx", "--topic", "cy")
	if code != 0 || !strings.Contains(stdout, "was failed over already") {
		t.Fatalf("tandem mirrors --failover --consistent again: exit %d: %s%s", code, stdout, stderr)
	}
	if code, _, stderr := runMirrors(t, "--bootstrap-server", dst.addr(), "--list", "--consistent"); code != 2 || !strings.Contains(stderr, "--consistent goes with --failover") {
		t.Fatalf("--consistent without --failover: exit %d: %s", code, stderr)
	}
	report, err := dst.admin().Failover(ctx, "m", []string{"cx", "cy"}, admin.FailoverOptions{Force: true, Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	var cutTime, cutRecords int64
	for _, p := range report {
		if !p.AlreadyStopped || p.CutTime == 0 || cutTime != 0 && p.CutTime != cutTime {
			t.Fatalf("report %+v", report)
		}
		cutTime, cutRecords = p.CutTime, cutRecords+p.CutRecords
	}
	if cutRecords < 50 {
		t.Fatalf("%d records given up beyond the cut, want the 50 written on cx while cy was paused", cutRecords)
	}
	ms, err := dst.admin().DescribeMirrors(ctx, "m")
	if err != nil || len(ms) != 1 {
		t.Fatalf("describe: %v %+v", err, ms)
	}
	var quarantined int64
	for _, d := range ms[0].Diverged {
		quarantined += d.Records
	}
	if quarantined != cutRecords {
		t.Fatalf("the quarantine holds %d records, the cut gave up %d", quarantined, cutRecords)
	}
}

// TestMirrorConsistentFailoverAcrossBrokers: the partitions of a
// consistent failover are led by three destination brokers, so the
// decider reads the others' batches over Fetch, and a group whose
// offsets the mirror synced past the cut is clamped on whichever broker
// coordinates it.
func TestMirrorConsistentFailoverAcrossBrokers(t *testing.T) {
	tandemtest.Long(t) // two three-broker clusters: the full tier only
	src := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	dst := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srcCl := tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...))
	for _, topic := range []string{"cx", "cy"} {
		if _, err := kadm.NewClient(srcCl).CreateTopic(ctx, 3, 3, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	src.WaitFor("the topics", func(img *metadata.Image) bool { return img.Topics["cx"] != nil && img.Topics["cy"] != nil })
	pairs := pairWriter(t, ctx, tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...),
		kgo.TransactionalID("pairs"), kgo.TransactionTimeout(time.Minute)))
	srcEnds := func(topic string) map[int32]int64 {
		ends, err := kadm.NewClient(srcCl).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return out
	}
	// Group g has read cx to its end, as the source says.
	commitEnds := func() {
		t.Helper()
		offs := kadm.Offsets{}
		for p, end := range srcEnds("cx") {
			offs.Add(kadm.Offset{Topic: "cx", Partition: p, At: end, LeaderEpoch: -1})
		}
		if _, err := kadm.NewClient(srcCl).CommitOffsets(ctx, "g", offs); err != nil {
			t.Fatal(err)
		}
	}
	pairs(60)
	commitEnds()

	dstCl := tandemtest.Client(t, dst.Addrs()[0], kgo.SeedBrokers(dst.Addrs()...), admin.Opt(), kgo.RetryTimeout(30*time.Second))
	da := admin.New(dstCl)
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.Addrs()[0], "mirror.groups.include": "g", "mirror.acl.include": ""}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"cx": "m", "cy": "m"}); err != nil {
		t.Fatal(err)
	}
	caughtUp := func(topic string) {
		t.Helper()
		want := srcEnds(topic)
		waitFor(t, 45*time.Second, topic+" to be mirrored", func() bool {
			got, err := kadm.NewClient(dstCl).ListEndOffsets(ctx, topic)
			if err != nil {
				return false
			}
			ok := true
			got.Each(func(o kadm.ListedOffset) { ok = ok && o.Offset >= want[o.Partition] })
			return ok && len(got[topic]) == len(want)
		})
	}
	caughtUp("cx")
	caughtUp("cy")
	if err := da.PauseMirror(ctx, "m", "cy"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "cy to be paused", func() bool {
		ms, err := da.DescribeMirrors(ctx, "m")
		if err != nil || len(ms) != 1 {
			return false
		}
		for _, tp := range ms[0].Topics {
			for _, p := range tp.Partitions {
				if tp.TopicName == "cy" && p.State != "PAUSED" {
					return false
				}
			}
		}
		return true
	})
	time.Sleep(20 * time.Millisecond)
	pairs(40) // whole on cx only
	commitEnds()
	caughtUp("cx")
	waitFor(t, 30*time.Second, "g's offsets past the pause to be synced", func() bool {
		offs, err := kadm.NewClient(dstCl).FetchOffsets(ctx, "g")
		if err != nil {
			return false
		}
		want, ok := srcEnds("cx"), true
		for p, end := range want {
			o, found := offs.Lookup("cx", p)
			ok = ok && found && o.At == end
		}
		return ok
	})
	leaders := map[int32]bool{}
	for _, topic := range []string{"cx", "cy"} {
		for p := range int32(3) {
			leaders[dst.Leader(topic, p)] = true
		}
	}

	report, err := da.Failover(ctx, "m", []string{"cx", "cy"}, admin.FailoverOptions{Force: true, Consistent: true, Timeout: time.Second})
	if err != nil {
		t.Fatalf("consistent failover: %v", err)
	}
	cuts := map[string]int64{}
	var cutTime, cutRecords int64
	for _, p := range report {
		if p.CutTime == 0 || cutTime != 0 && p.CutTime != cutTime {
			t.Fatalf("report %+v", report)
		}
		cutTime, cutRecords = p.CutTime, cutRecords+p.CutRecords
		cuts[fmt.Sprintf("%s-%d", p.Topic, p.Partition)] = p.DestinationOffset
	}
	if cutRecords < 40 {
		t.Fatalf("%d records given up beyond the cut, want the 40 written on cx while cy was paused", cutRecords)
	}
	x, y := readCommitted(t, dst.Addrs()[0], "cx"), readCommitted(t, dst.Addrs()[0], "cy")
	if len(x) < 60 || !maps.Equal(x, y) {
		t.Fatalf("pairs: %d on cx, %d on cy, want the same 60 or more", len(x), len(y))
	}
	offs, err := kadm.NewClient(dstCl).FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	clamped := 0
	offs.Each(func(o kadm.OffsetResponse) {
		cut := cuts[fmt.Sprintf("%s-%d", o.Topic, o.Partition)]
		switch {
		case o.At > cut:
			t.Errorf("g: %s-%d committed at %d, past the cut %d", o.Topic, o.Partition, o.At, cut)
		case o.At == cut:
			clamped++
		}
	})
	if clamped == 0 {
		t.Fatalf("no offset of g at the cut: %+v (cuts %v)", offs, cuts)
	}
	t.Logf("partitions led by %d brokers; %d records beyond the cut; %d offsets of g at the cut", len(leaders), cutRecords, clamped)
}
