package checker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/faultproxy"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// The RPO campaign (issue 27): what a forced failover says it gave up is
// held against what was really lost. A source and a destination cluster
// of three `tandem serve` processes each; the destination reaches the
// source only through fault proxies (the source brokers advertise them
// on a listener of their own, so that the producer and the source's own
// replication do not go through them). Each run mirrors a fresh topic
// under an acks=all idempotent producer, injects one fault while
// mirroring (a source leader killed, a destination leader killed, the
// source unreachable for a while, a slow link, the source controller
// killed, the topic paused by an operator), then, at a random moment,
// cuts the destination off from the source for good (the disaster: the
// producer goes on writing to the source) and fails over with --force.
// Per partition:
//
//   - the records and milliseconds the failover reported, and those
//     DescribeMirrors (--describe --json) and the console's
//     /api/mirrors showed just before it, equal what the acknowledged
//     records say was given up below the source end the destination
//     had learned (checker.Lost: Known, KnownMs), and a report that
//     claims to be exact (not stale) has nothing beyond it;
//   - every acknowledged record below the failover's stop offset is on
//     the destination at its offset with its value and timestamp: none
//     lost, corrupt, reordered or duplicated;
//   - every fourth run fails back (the old source mirrors the new one
//     again): every acknowledged record the old source no longer holds
//     is in the divergence manifest and in <topic>.diverged.
//
// TANDEM_CAMPAIGN_RUNS (default 20) and TANDEM_CAMPAIGN_SEED replay a
// campaign.

type fault int

const (
	faultSourceLeaderKill fault = iota
	faultDestinationLeaderKill
	faultSourceUnreachable
	faultSlowLink
	faultSourceControllerKill
	faultPaused
	numFaults
)

func (f fault) String() string {
	return [...]string{"source leader kill -9", "destination leader kill -9", "source unreachable", "slow link", "source controller kill -9", "mirror paused"}[f]
}

// campaign is the two clusters and the proxies between them.
type campaign struct {
	t        *testing.T
	src, dst *tandemtest.ProcCluster
	proxies  []*faultproxy.Proxy // proxies[i] leads to source node i+1
	dstAdmin *admin.Client
	rng      *rand.Rand
	seed     uint64
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startCampaign(t *testing.T, seed uint64) *campaign {
	c := &campaign{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for range 3 {
		p, err := faultproxy.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.proxies = append(c.proxies, p)
	}
	// Each source node: INTERNAL for clients and replication, MIRROR
	// advertised as its proxy for the destination.
	var mu sync.Mutex
	internal := map[int32]string{}
	c.src = tandemtest.StartProcClusterNodes(t, 3, map[string]string{
		"listener.security.protocol.map": "INTERNAL:PLAINTEXT,MIRROR:PLAINTEXT",
		"inter.broker.listener.name":     "INTERNAL",
	}, func(id int32) map[string]string {
		in, out := freeAddr(t), freeAddr(t)
		mu.Lock()
		internal[id] = in
		mu.Unlock()
		c.proxies[id-1].SetTarget(out)
		return map[string]string{
			"listeners":            "INTERNAL://" + in + ",MIRROR://" + out,
			"advertised.listeners": "INTERNAL://" + in + ",MIRROR://" + c.proxies[id-1].Addr(),
		}
	})
	c.dst = tandemtest.StartProcCluster(t, 3, nil)
	c.dstAdmin = mirrorAdmin(t, c.dst.Addrs())
	var via []string
	for _, p := range c.proxies {
		via = append(via, p.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.dstAdmin.CreateMirror(ctx, "dr", map[string]string{"bootstrap.servers": strings.Join(via, ",")}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	return c
}

// heal ends every network fault between the clusters.
func (c *campaign) heal() {
	for _, p := range c.proxies {
		p.SetLink(0, 0)
		p.Cut(0)
	}
}

// cut makes the source unreachable from the destination for d.
func (c *campaign) cut(d time.Duration) {
	for _, p := range c.proxies {
		p.Cut(d)
	}
}

// leaderOf is the node leading topic's partition p in cluster cl.
func leaderOf(t *testing.T, cl *tandemtest.ProcCluster, topic string, p int32) int32 {
	return cl.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool { return ps[p].Leader > 0 })[p].Leader
}

// whole waits until every partition of topic has all three replicas in
// its ISR.
func whole(cl *tandemtest.ProcCluster, topic string) {
	cl.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool {
		for _, p := range ps {
			if len(p.ISR) != 3 {
				return false
			}
		}
		return len(ps) > 0
	})
}

// ackedProducer writes value "<topic>-<n>" records to topic, acks=all
// and idempotent, recording each acknowledged one.
type ackedProducer struct {
	acks   checker.Acks
	cancel context.CancelFunc
	done   chan struct{}
}

func produceAcked(t *testing.T, seeds []string, topic string) *ackedProducer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &ackedProducer{cancel: cancel, done: make(chan struct{})}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(20*time.Second), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		defer cl.Close()
		for i := 0; ctx.Err() == nil; i++ {
			cl.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s-%07d", topic, i)}, func(r *kgo.Record, err error) {
				if err == nil {
					p.acks.Add(r.Partition, checker.Acked{Offset: r.Offset, Value: string(r.Value), Timestamp: r.Timestamp.UnixMilli()})
				}
			})
			if i%20 == 19 {
				time.Sleep(5 * time.Millisecond) // a steady few thousand records a second, not a flood
			}
		}
		cl.Flush(context.Background())
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *ackedProducer) stop() { p.cancel(); <-p.done }

// consolePart is the console's /api/mirrors view of partition p of
// topic in mirror dr, from the destination broker that leads it (the
// console shows what its broker knows: other brokers' partitions read
// unknown).
func consolePart(c *campaign, topic string, p int32) (map[string]any, error) {
	b := c.dst.Broker(leaderOf(c.t, c.dst, topic, p))
	resp, err := http.Get("http://" + b.HTTPAddr + "/api/mirrors")
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var view []struct {
		Name       string           `json:"name"`
		Partitions []map[string]any `json:"partitions"`
	}
	if err := json.Unmarshal(body, &view); err != nil {
		return nil, fmt.Errorf("/api/mirrors: %v: %s", err, body)
	}
	for _, m := range view {
		for _, pv := range m.Partitions {
			if m.Name == "dr" && pv["topic"] == topic && pv["partition"] == float64(p) {
				return pv, nil
			}
		}
	}
	return nil, fmt.Errorf("/api/mirrors of broker %s has no %s-%d", b.HTTPAddr, topic, p)
}

// readAll reads partition p of topic from offset 0 up to end (exclusive;
// -1: its high watermark) from seeds: offset → record. Control records
// (transaction markers, a failover's barrier) are not records.
func readAll(ctx context.Context, seeds []string, topic string, p int32, end int64) (map[int64]*kgo.Record, error) {
	if end < 0 {
		adm := kadm.NewClient(mustClient(seeds))
		defer adm.Close()
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return nil, err
		}
		o, ok := ends.Lookup(topic, p)
		if !ok || o.Err != nil {
			return nil, fmt.Errorf("%s-%d: end offset: %v", topic, p, o.Err)
		}
		end = o.Offset
	}
	out := map[int64]*kgo.Record{}
	if end <= 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(0)}}))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	// The log does not change while it is read (the failover is over):
	// a poll that brings nothing for two seconds has reached its end;
	// markers are not records, so the last offsets may never come.
	last := int64(-1)
	for last < end-1 {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return out, fmt.Errorf("%s-%d: read up to %d of %d: %w", topic, p, last, end, ctx.Err())
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if r.Offset < end {
				out[r.Offset] = r
			}
			last = max(last, r.Offset)
		})
		if n == 0 && pctx.Err() != nil {
			break
		}
	}
	return out, nil
}

func mustClient(seeds []string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		panic(err)
	}
	return cl
}

// TestMirrorRPOCampaign runs the campaign.
func TestMirrorRPOCampaign(t *testing.T) {
	tandemtest.Long(t)
	runs := 20
	if v, err := strconv.Atoi(os.Getenv("TANDEM_CAMPAIGN_RUNS")); err == nil && v > 0 {
		runs = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("TANDEM_CAMPAIGN_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("campaign: %d runs, TANDEM_CAMPAIGN_SEED=%d", runs, seed)
	c := startCampaign(t, seed)
	var total runResult
	for r := range runs {
		f := fault(r % int(numFaults))
		res := c.run(r, f, r%4 == 3)
		total.acked += res.acked
		total.reported += res.reported
		total.known += res.known
		total.beyond += res.beyond
		total.unknown += res.unknown
		if t.Failed() {
			return
		}
	}
	t.Logf("campaign total: %d runs, %d acknowledged, %d records reported given up, %d measured below the learned source end, %d beyond it (unknowable); %d partitions whose leader knew no source end",
		runs, total.acked, total.reported, total.known, total.beyond, total.unknown)
}

type runResult struct{ acked, reported, known, beyond, unknown int64 }

func (c *campaign) run(r int, f fault, failback bool) runResult {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const parts = int32(2)
	topic := fmt.Sprintf("rpo%02d", r)
	createTopic(t, ctx, c.src.Addrs(), topic, parts)
	prod := produceAcked(t, c.src.Addrs(), topic)
	defer prod.stop()
	// The mirror reads the new topic from the source's metadata, which
	// may not have reached the broker it asks yet: retried, as an
	// operator would.
	waitCond(t, time.Minute, fmt.Sprintf("run %d: %s added to the mirror", r, topic), func() error {
		return c.dstAdmin.AddTopicsToMirror(ctx, map[string]string{topic: "dr"})
	})
	waitCond(t, time.Minute, fmt.Sprintf("run %d: %s mirroring", r, topic), func() error {
		ds, err := describePartitions(ctx, c.dstAdmin, "dr")
		if err != nil {
			return err
		}
		for p := range parts {
			d := ds[fmt.Sprintf("%s/%d", topic, p)]
			if d.State != mirrorstate.Mirroring.String() || d.DestinationOffset <= 0 {
				return fmt.Errorf("%s-%d: %s at %d", topic, p, d.State, d.DestinationOffset)
			}
		}
		return nil
	})

	// The fault, while mirroring.
	switch f {
	case faultSourceLeaderKill:
		b := c.src.Broker(leaderOf(t, c.src, topic, 0))
		b.Kill9()
		time.Sleep(time.Duration(c.rng.IntN(1500)) * time.Millisecond)
		b.Restart()
		whole(c.src, topic)
	case faultDestinationLeaderKill:
		b := c.dst.Broker(leaderOf(t, c.dst, topic, 0))
		b.Kill9()
		time.Sleep(time.Duration(c.rng.IntN(1500)) * time.Millisecond)
		b.Restart()
		whole(c.dst, topic)
	case faultSourceUnreachable:
		d := time.Duration(500+c.rng.IntN(2500)) * time.Millisecond
		c.cut(d)
		time.Sleep(d)
	case faultSlowLink:
		for _, p := range c.proxies {
			p.SetLink(time.Duration(5+c.rng.IntN(40))*time.Millisecond, int64(64<<10+c.rng.IntN(256<<10)))
		}
	case faultSourceControllerKill:
		adm := kadm.NewClient(tandemtest.Client(t, c.src.Addrs()[0], kgo.SeedBrokers(c.src.Addrs()...)))
		cd, err := adm.BrokerMetadata(ctx)
		if err != nil || cd.Controller < 1 {
			t.Fatalf("run %d: the source's controller: %v %+v", r, err, cd)
		}
		b := c.src.Broker(cd.Controller)
		b.Kill9()
		time.Sleep(time.Duration(c.rng.IntN(1500)) * time.Millisecond)
		b.Restart()
		whole(c.src, topic)
	}

	if f == faultPaused {
		// An operator paused the topic: it copies nothing, but its
		// leader still learns the source's end (once a second), so the
		// failover gives up records it knows of: the exact part.
		if err := c.dstAdmin.PauseMirror(ctx, "dr", topic); err != nil {
			t.Fatalf("run %d: pause: %v", r, err)
		}
		time.Sleep(time.Duration(1500+c.rng.IntN(1500)) * time.Millisecond)
		// The source's end offset and its newest record time are learned
		// by two ListOffsets, once a second: under a steady producer they
		// are of instants apart, and the milliseconds of the one do not
		// belong to the offset of the other (a campaign in CI found 2030
		// ms reported for 2043 ms measured). Quiet, both are exact.
		prod.stop()
		time.Sleep(2500 * time.Millisecond)
	}

	// The disaster at a random moment: the destination loses the source
	// for good, while the producer goes on writing there.
	time.Sleep(time.Duration(200+c.rng.IntN(1800)) * time.Millisecond)
	c.cut(time.Hour)
	time.Sleep(time.Duration(c.rng.IntN(3000)) * time.Millisecond)
	prod.stop()

	// What every view says just before the failover: the source is gone,
	// so nothing moves until it.
	// --describe on any broker shows the leaders' view, which the
	// console of each partition's leader shows directly: they agree (a
	// leader that never learned its source's end, just elected after a
	// kill, says unknown in both).
	var before map[string]mirrorproto.PartitionDetail
	console := map[int32]map[string]any{}
	waitCond(t, 30*time.Second, fmt.Sprintf("run %d: --describe and the leaders' consoles agreeing", r), func() error {
		var err error
		if before, err = describePartitions(ctx, c.dstAdmin, "dr"); err != nil {
			return err
		}
		for p := range parts {
			if console[p], err = consolePart(c, topic, p); err != nil {
				return err
			}
			if d := before[fmt.Sprintf("%s/%d", topic, p)]; console[p]["sourceOffset"] != float64(d.SourceOffset) {
				return fmt.Errorf("%s-%d: --describe %+v, the leader's console %v", topic, p, d, console[p])
			}
		}
		return nil
	})
	fps, err := c.dstAdmin.Failover(ctx, "dr", []string{topic}, admin.FailoverOptions{Force: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("run %d: forced failover: %v", r, err)
	}
	var res runResult
	for _, fp := range fps {
		acked := prod.acks.Partition(fp.Partition)
		loss := checker.Lost(acked, fp.DestinationOffset, fp.SourceOffset)
		res.acked += int64(len(acked))
		res.known += loss.Known
		res.beyond += loss.Beyond
		if fp.Lag > 0 {
			res.reported += fp.Lag
		}
		t.Logf("run %2d %-27s %s-%d: %5d acked; reported lag %d records %d ms (source end %d, stale %v, stop at %d); measured %s",
			r, f, topic, fp.Partition, len(acked), fp.Lag, fp.LagMs, fp.SourceOffset, fp.SourceStale, fp.DestinationOffset, loss)
		where := fmt.Sprintf("run %d (%s, TANDEM_CAMPAIGN_SEED=%d) %s-%d", r, f, c.seed, topic, fp.Partition)
		switch {
		case fp.SourceOffset < 0:
			// The leader never learned its source's end (elected after a
			// kill, the source cut before its first fetch): unknown, and
			// said so, whatever was lost.
			if fp.Lag != -1 || fp.LagMs != -1 {
				t.Errorf("%s: no source end known, yet a lag of %d records (%d ms) reported", where, fp.Lag, fp.LagMs)
			}
			res.unknown++
		case fp.Lag != loss.Known:
			t.Errorf("%s: the failover reported %d records given up, the acknowledged records say %d below the source end it knew", where, fp.Lag, loss.Known)
		case loss.Known > 0 && fp.LagMs != loss.KnownMs:
			t.Errorf("%s: the failover reported %d ms given up, the acknowledged records say %d ms", where, fp.LagMs, loss.KnownMs)
		case loss.Beyond > 0 && !fp.SourceStale:
			t.Errorf("%s: %d acknowledged records beyond the source end the destination knew, but the failover's report claims to be exact (not stale)", where, loss.Beyond)
		}
		// --describe --json and the console, just before, showed the same
		// numbers (nothing moves with the source gone); their "at least"
		// may come later than the failover's, which is exact only for
		// what the source answered after the failover began.
		d := before[fmt.Sprintf("%s/%d", topic, fp.Partition)]
		if d.Lag != fp.Lag || d.SourceOffset != fp.SourceOffset || d.DestinationOffset != fp.DestinationOffset || d.SourceStale && !fp.SourceStale || fp.Lag > 0 && d.LagMs != fp.LagMs {
			t.Errorf("%s: --describe said source %d destination %d lag %d (%d ms, stale %v) just before; the failover %d %d %d (%d ms, stale %v)",
				where, d.SourceOffset, d.DestinationOffset, d.Lag, d.LagMs, d.SourceStale, fp.SourceOffset, fp.DestinationOffset, fp.Lag, fp.LagMs, fp.SourceStale)
		}
		if cp := console[fp.Partition]; cp["lag"] != float64(fp.Lag) || cp["lagMs"] != float64(d.LagMs) || cp["sourceOffset"] != float64(fp.SourceOffset) || cp["sourceStale"] == true && !fp.SourceStale {
			t.Errorf("%s: the console showed %v just before; the failover lag %d", where, cp, fp.Lag)
		}

		// Nothing on the destination is corrupt, reordered or duplicated.
		got, err := readAll(ctx, c.dst.Addrs(), topic, fp.Partition, fp.DestinationOffset)
		if err != nil {
			t.Fatalf("%s: reading the destination: %v", where, err)
		}
		seen := map[string]int64{}
		for o, rec := range got {
			if prev, dup := seen[string(rec.Value)]; dup {
				t.Errorf("%s: %q at offsets %d and %d", where, rec.Value, prev, o)
			}
			seen[string(rec.Value)] = o
		}
		for _, a := range acked {
			if a.Offset >= fp.DestinationOffset {
				break
			}
			rec := got[a.Offset]
			if rec == nil || string(rec.Value) != a.Value || rec.Timestamp.UnixMilli() != a.Timestamp {
				t.Errorf("%s: acknowledged %q at %d (timestamp %d), the destination has %v", where, a.Value, a.Offset, a.Timestamp, rec)
			}
		}
	}
	c.heal()
	if failback {
		c.failback(ctx, r, topic, parts, prod)
	}
	return res
}

// failback makes the old source a mirror of the new one (the
// destination), after a few writes there, and checks that every
// acknowledged record the old source no longer holds is listed in the
// divergence manifest and kept in <topic>.diverged.
func (c *campaign) failback(ctx context.Context, r int, topic string, parts int32, prod *ackedProducer) {
	t := c.t
	// Writable once every destination broker's metadata shows the
	// failover (mirror.name cleared with the membership).
	waitCond(t, 30*time.Second, fmt.Sprintf("run %d: %s writable after the failover", r, topic), func() error {
		for _, b := range c.dst.Brokers {
			rc, err := kadm.NewClient(tandemtest.Client(t, b.Addr)).DescribeTopicConfigs(ctx, topic)
			if err != nil {
				return err
			}
			for _, cf := range rc[0].Configs {
				if cf.Key == "mirror.name" && cf.Value != nil && *cf.Value != "" {
					return fmt.Errorf("broker %s: mirror.name=%s", b.Addr, *cf.Value)
				}
			}
		}
		return nil
	})
	cl := tandemtest.Client(t, c.dst.Addrs()[0], kgo.SeedBrokers(c.dst.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s-after-%d", topic, i)}).FirstErr(); err != nil {
			t.Fatalf("run %d: produce on the new primary: %v", r, err)
		}
	}
	srcAdmin := mirrorAdmin(t, c.src.Addrs())
	back := fmt.Sprintf("back%02d", r)
	if err := srcAdmin.CreateMirror(ctx, back, map[string]string{"bootstrap.servers": strings.Join(c.dst.Addrs(), ",")}); err != nil {
		t.Fatalf("run %d: failback mirror: %v", r, err)
	}
	if err := srcAdmin.AddTopicsToMirror(ctx, map[string]string{topic: back}); err != nil {
		t.Fatalf("run %d: failback add: %v", r, err)
	}
	waitCond(t, 2*time.Minute, fmt.Sprintf("run %d: %s failed back, identical to the new primary", r, topic), func() error {
		return sameAsSource(ctx, c.dst.Addrs(), c.src.Addrs(), topic, parts)
	})
	ms, err := srcAdmin.DescribeMirrors(ctx, back)
	if err != nil || len(ms) != 1 {
		t.Fatalf("run %d: describe %s: %v", r, back, err)
	}
	for p := range parts {
		var ranges []mirrorproto.DivergedRange
		for _, d := range ms[0].Diverged {
			if d.Topic == topic && d.Partition == p {
				ranges = append(ranges, d)
			}
		}
		now, err := readAll(ctx, c.src.Addrs(), topic, p, -1)
		if err != nil && ctx.Err() == nil {
			t.Fatalf("run %d: read %s-%d: %v", r, topic, p, err)
		}
		var lost []checker.Acked
		for _, a := range prod.acks.Partition(p) {
			if rec := now[a.Offset]; rec == nil || string(rec.Value) != a.Value {
				lost = append(lost, a)
			}
		}
		listed := func(o int64) bool {
			for _, d := range ranges {
				if o >= d.FirstOffset && o <= d.LastOffset {
					return true
				}
			}
			return false
		}
		kept, err := readAll(ctx, c.src.Addrs(), topic+".diverged", p, -1)
		if err != nil && ctx.Err() == nil {
			t.Fatalf("run %d: read %s.diverged-%d: %v", r, topic, p, err)
		}
		keptValues := map[string]bool{}
		for _, rec := range kept {
			keptValues[string(rec.Value)] = true
		}
		for _, a := range lost {
			if !listed(a.Offset) || !keptValues[a.Value] {
				t.Errorf("run %d: failback: acknowledged %q at %s-%d@%d is gone from the old primary; listed %v, in %s.diverged %v",
					r, a.Value, topic, p, a.Offset, listed(a.Offset), topic, keptValues[a.Value])
			}
		}
		t.Logf("run %2d failback %s-%d: %d acknowledged records truncated, all listed (%d manifest ranges) and kept", r, topic, p, len(lost), len(ranges))
	}
}
