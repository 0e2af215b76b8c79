package integration

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// Regression tests of issue 11 ("Mirroring you can trust in a disaster"):
// each one drives real brokers (the built binary, in-process brokers, or
// franz-go's kfake as a foreign source) and asserts on data.

// startKfake starts a kfake cluster on 127.0.0.1 with the given options and
// closes it at the end of the test (closing twice is harmless).
func startKfake(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// produceN writes n records of about 100 bytes to each partition of topic
// at addr (values "<topic>-<partition>-<i>") and returns each partition's
// end offset.
func produceN(t *testing.T, addr, topic string, partitions int32, n int) map[int32]int64 {
	t.Helper()
	cl := tandemtest.Client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends := map[int32]int64{}
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d-%090d", topic, p, i, i)})
		}
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	for _, r := range res {
		ends[r.Record.Partition] = max(ends[r.Record.Partition], r.Record.Offset+1)
	}
	return ends
}

// describe returns the partitions of one mirror by "topic/partition".
func describe(t *testing.T, c *mirrorCluster, name string) (map[string]mirrorproto.PartitionDetail, mirrorproto.DescribedMirror) {
	t.Helper()
	return states(t, c.admin(), name)
}

// waitStates waits until every partition of topic is in state want.
func waitTopicState(t *testing.T, c *mirrorCluster, mirrorName, topic string, partitions int32, want string, d time.Duration) {
	t.Helper()
	waitFor(t, d, fmt.Sprintf("%s to be %s", topic, want), func() bool {
		st, _ := describe(t, c, mirrorName)
		for p := range partitions {
			if st[fmt.Sprintf("%s/%d", topic, p)].State != want {
				return false
			}
		}
		return true
	})
}

// waitMirrored waits until every partition of topic is MIRRORING and holds
// ends[p] offsets on the destination.
func waitMirrored(t *testing.T, c *mirrorCluster, mirrorName, topic string, ends map[int32]int64, d time.Duration) {
	t.Helper()
	waitFor(t, d, topic+" to be mirrored", func() bool {
		st, _ := describe(t, c, mirrorName)
		for p, end := range ends {
			pd := st[fmt.Sprintf("%s/%d", topic, p)]
			if pd.State != "MIRRORING" || pd.DestinationOffset != end {
				return false
			}
		}
		return true
	})
}

func metricValue(text, name string) (float64, bool) {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func (c *mirrorCluster) metrics() string {
	var b strings.Builder
	c.b.WritePrometheus(&b)
	return b.String()
}

// TestMirrorFailoverWithSourceDown is defect 1: with the source killed
// (kill -9), --remove and --delete finish without it and the topics take
// writes, also when the destination restarts in the middle of a stop.
func TestMirrorFailoverWithSourceDown(t *testing.T) {
	src := tandemtest.StartProcess(t, t.TempDir())
	dst := startMirrorCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ends := map[string]map[int32]int64{}
	for _, topic := range []string{"a", "b", "c"} {
		tandemtest.CreateTopic(t, src.Addr, topic, 2)
		ends[topic] = produceN(t, src.Addr, topic, 2, 50)
	}
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.Addr}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"a": "m", "b": "m", "c": "m"}); err != nil {
		t.Fatal(err)
	}
	for topic, e := range ends {
		waitMirrored(t, dst, "m", topic, e, 30*time.Second)
	}
	src.Kill9()

	// --remove with the source dead: a bound well below the 30 s an i/o
	// timeout to the source would take.
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	if _, err := da.RemoveTopicsFromMirror(rctx, "m", []string{"a"}); err != nil {
		t.Fatalf("remove with the source dead: %v", err)
	}
	rcancel()
	for p := range int32(2) {
		if err := produceOne(t, dst, "a", p, "after failover"); err != nil {
			t.Fatalf("produce to a-%d after failover: %v", p, err)
		}
	}

	// A restart of the destination in the middle of a stop: the stop
	// resumes from __mirror_state without the source.
	go func() {
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		defer scancel()
		dst.admin().RemoveTopicsFromMirror(sctx, "m", []string{"b"}) //nolint:errcheck // the broker restarts under it
	}()
	// The stop has begun (with the source dead, a partition still to be
	// copied shows FAILED, so "not MIRRORING" says nothing of the stop).
	stopping := func(s string) bool { return s == "STOPPING" || s == "STOPPED" }
	waitFor(t, 10*time.Second, "b's stop to begin", func() bool {
		st, _ := describe(t, dst, "m")
		return stopping(st["b/0"].State) && stopping(st["b/1"].State)
	})
	dst.restart()
	waitTopicState(t, dst, "m", "b", 2, "STOPPED", 15*time.Second)
	for p := range int32(2) {
		if err := produceOne(t, dst, "b", p, "after failover"); err != nil {
			t.Fatalf("produce to b-%d after a restart mid-stop: %v", p, err)
		}
	}

	// --delete with the source dead: c fails over, the mirror is gone.
	dctx, dcancel := context.WithTimeout(ctx, 15*time.Second)
	defer dcancel()
	if err := dst.admin().DeleteMirror(dctx, "m"); err != nil {
		t.Fatalf("delete with the source dead: %v", err)
	}
	for p := range int32(2) {
		if err := produceOne(t, dst, "c", p, "after delete"); err != nil {
			t.Fatalf("produce to c-%d after delete: %v", p, err)
		}
	}
}

// TestMirrorLagTruth is defect 2: lag is never 0 when it is not. Right
// after --add the source end offset is unknown (not 0 lag); one leaderless
// source partition does not stall the others; a paused mirror keeps
// learning the source's end offsets; an unreachable source shows on every
// partition.
func TestMirrorLagTruth(t *testing.T) {
	tandemtest.Long(t) // a throttled mirror, seconds: the full tier only
	src := startKfake(t, kfake.SeedTopics(3, "lag"))
	srcAddr := src.ListenAddrs()[0]
	ends := produceN(t, srcAddr, "lag", 3, 300)
	// Throttled so that the first describe comes before the copy is done.
	dst := startMirrorClusterProps(t, "", map[string]string{"replica.fetch.max.bytes": "4000", "mirror.replication.throttled.rate": "40000"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": srcAddr, "mirror.groups.include": "", "mirror.acl.include": ""}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"lag": "m"}); err != nil {
		t.Fatal(err)
	}
	// The lag is computed from the source end offset last learned; until
	// one is learned it is unknown, never 0.
	checkLag := func(st map[string]mirrorproto.PartitionDetail, ends map[int32]int64) {
		t.Helper()
		for p := range ends {
			pd := st[fmt.Sprintf("lag/%d", p)]
			if pd.SourceOffset < 0 && pd.Lag != -1 || pd.SourceOffset >= 0 && pd.Lag != pd.SourceOffset-pd.DestinationOffset {
				t.Fatalf("lag/%d: lag %d, source offset %d, destination offset %d", p, pd.Lag, pd.SourceOffset, pd.DestinationOffset)
			}
		}
	}
	st, _ := describe(t, dst, "m")
	for p, end := range ends {
		if pd := st[fmt.Sprintf("lag/%d", p)]; pd.Lag == 0 && pd.DestinationOffset != end {
			t.Fatalf("right after --add, lag/%d: lag 0 with %d of %d records mirrored (source offset %d)", p, pd.DestinationOffset, end, pd.SourceOffset)
		}
	}
	checkLag(st, ends)
	for _, l := range strings.Split(dst.metrics(), "\n") {
		if strings.HasPrefix(l, "tandem_mirror_lag_records{") && strings.HasSuffix(l, " 0") {
			t.Fatalf("right after --add, a lag metric reads 0: %s", l)
		}
	}
	waitMirrored(t, dst, "m", "lag", ends, 60*time.Second)

	// Paused: the source grows, the lag shows it.
	if err := da.PauseMirror(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	ends = produceN(t, srcAddr, "lag", 3, 20)
	waitFor(t, 15*time.Second, "the paused mirror to learn the source's end offsets", func() bool {
		st, _ := describe(t, dst, "m")
		checkLag(st, ends)
		for p, end := range ends {
			if pd := st[fmt.Sprintf("lag/%d", p)]; pd.State != "PAUSED" || pd.SourceOffset != end || pd.Lag != 20 {
				return false
			}
		}
		return true
	})
	if err := da.ResumeMirror(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, dst, "m", "lag", ends, 30*time.Second)

	// A leaderless source partition 0 does not stall partitions 1 and 2,
	// and shows why.
	// (Its leader lost leadership: fetches of it fail, and the metadata
	// the mirror then asks for shows no leader.)
	fault := src.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "lag", Partitions: []int32{0}, Err: kerr.LeaderNotAvailable, Count: -1},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "lag", Partitions: []int32{0}, Err: kerr.NotLeaderForPartition, Count: -1})
	ends = produceN(t, srcAddr, "lag", 3, 20)
	waitFor(t, 30*time.Second, "partitions 1 and 2 to be mirrored with partition 0 leaderless", func() bool {
		st, _ := describe(t, dst, "m")
		checkLag(st, ends)
		return st["lag/1"].DestinationOffset == ends[1] && st["lag/2"].DestinationOffset == ends[2] &&
			strings.Contains(st["lag/0"].Reason, "leader")
	})
	fault.Remove()
	waitMirrored(t, dst, "m", "lag", ends, 30*time.Second)

	// The source gone: every partition says so, and /metrics tells how
	// long ago the source last answered.
	src.Close()
	waitFor(t, 30*time.Second, "every partition to report the source unreachable", func() bool {
		st, _ := describe(t, dst, "m")
		for p := range int32(3) {
			if !strings.Contains(st[fmt.Sprintf("lag/%d", p)].Reason, "unreachable") {
				return false
			}
		}
		return true
	})
	age := func() float64 {
		v, ok := metricValue(dst.metrics(), `tandem_mirror_source_contact_age_seconds{mirror="m"}`)
		if !ok {
			t.Fatalf("no tandem_mirror_source_contact_age_seconds for mirror m")
		}
		return v
	}
	first := age()
	waitFor(t, 10*time.Second, "the source contact age to grow", func() bool { return age() > first+0.5 })
	m := dst.metrics()
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, "tandem_mirror_lag_records{") && !strings.HasSuffix(l, " 0") {
			t.Fatalf("lag metric of a caught-up partition: %s", l)
		}
	}
}

// TestMirrorSourceTopicDeletion is defect 6: a source topic named __audit
// is mirrored like any other; a per-topic error in the source's Metadata
// is not a deletion; a real deletion stops the mirror topic; internal
// topics are never mirrored.
func TestMirrorSourceTopicDeletion(t *testing.T) {
	tandemtest.Long(t) // a mirror from kfake, seconds: the full tier only
	src := startKfake(t, kfake.SeedTopics(1, "__audit", "plain"))
	srcAddr := src.ListenAddrs()[0]
	produceN(t, srcAddr, "__audit", 1, 10)
	produceN(t, srcAddr, "plain", 1, 10)
	dst := startMirrorCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": srcAddr, "mirror.metadata.refresh.interval.ms": "200",
		"mirror.topics.include": ".*", "mirror.groups.include": "", "mirror.acl.include": ""}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, dst, "m", "__audit", map[int32]int64{0: 10}, 30*time.Second)
	waitMirrored(t, dst, "m", "plain", map[int32]int64{0: 10}, 30*time.Second)

	// A topic-level error for plain in every Metadata answer for a while.
	fault := src.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "plain", Err: kerr.TopicAuthorizationFailed, Count: -1})
	time.Sleep(2 * time.Second) // ten refreshes
	fault.Remove()
	st, _ := describe(t, dst, "m")
	for _, k := range []string{"__audit/0", "plain/0"} {
		if st[k].State != "MIRRORING" {
			t.Fatalf("%s is %s (%s) after refreshes with per-topic errors", k, st[k].State, st[k].Reason)
		}
	}

	// A real deletion stops plain only.
	if _, err := kadm.NewClient(tandemtest.Client(t, srcAddr)).DeleteTopics(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	waitTopicState(t, dst, "m", "plain", 1, "STOPPED", 30*time.Second)
	if st, _ := describe(t, dst, "m"); st["__audit/0"].State != "MIRRORING" {
		t.Fatalf("__audit is %s after plain was deleted", st["__audit/0"].State)
	}
	img := dst.b.Metadata().Image()
	for _, internal := range []string{"__consumer_offsets", "__transaction_state", "__mirror_state"} {
		if m := img.MirrorOf(internal); m != "" {
			t.Fatalf("internal topic %s is mirrored by %s", internal, m)
		}
	}
}

// TestMirrorConfigValidation is defect 7: every mirror config is checked
// at CreateMirror and at IncrementalAlterConfigs on the MIRROR resource;
// secrets are masked.
func TestMirrorConfigValidation(t *testing.T) {
	dst := startMirrorCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	da := dst.admin()
	base := map[string]string{"bootstrap.servers": "127.0.0.1:1"}
	bad := []struct {
		key   string // the key the error must name
		extra map[string]string
	}{
		{"security.protocol", map[string]string{"security.protocol": "BOGUS"}},
		{"mirror.metadata.refresh.interval.ms", map[string]string{"mirror.metadata.refresh.interval.ms": "soon"}},
		{"mirror.metadata.refresh.interval.ms", map[string]string{"mirror.metadata.refresh.interval.ms": "-5"}},
		{"mirror.topics.include", map[string]string{"mirror.topics.include": "(unclosed"}},
		{"mirror.groups.exclude", map[string]string{"mirror.groups.exclude": "[z-a]"}},
		{"mirror.acl.include", map[string]string{"mirror.acl.include": "NOSUCHTYPE;*"}},
		{"no.such.key", map[string]string{"no.such.key": "1"}},
		{"bootstrap.servers", map[string]string{"bootstrap.servers": "no-port"}},
		{"sasl.mechanism", map[string]string{"sasl.mechanism": "GSSAPI", "security.protocol": "SASL_PLAINTEXT"}},
	}
	for i, c := range bad {
		cfg := maps.Clone(base)
		maps.Copy(cfg, c.extra)
		name := fmt.Sprintf("bad%d", i)
		err := da.CreateMirror(ctx, name, cfg)
		if err == nil || !strings.Contains(err.Error(), "INVALID_CONFIG") || !strings.Contains(err.Error(), c.key) {
			t.Fatalf("CreateMirror with %v: %v, want INVALID_CONFIG naming %s", c.extra, err, c.key)
		}
		if dst.b.Metadata().Image().Mirrors[name] != nil {
			t.Fatalf("CreateMirror with %v left mirror %s behind", c.extra, name)
		}
	}
	secret := map[string]string{"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
		"sasl.oauthbearer.token": "tok-123"}
	if err := da.CreateMirror(ctx, "good", secret); err != nil {
		t.Fatalf("CreateMirror with a valid OAUTHBEARER config: %v", err)
	}
	alter := func(key string, value *string) error {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceType(64), "good"
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = key, value
		r.Configs = append(r.Configs, c)
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, dst.client())
		if err != nil {
			return err
		}
		rr := resp.Resources[0]
		if rr.ErrorCode != 0 {
			msg := ""
			if rr.ErrorMessage != nil {
				msg = *rr.ErrorMessage
			}
			return fmt.Errorf("%s: %w", msg, kerr.ErrorForCode(rr.ErrorCode))
		}
		return nil
	}
	for key, value := range map[string]string{"security.protocol": "BOGUS", "mirror.topics.exclude": "(x", "unknown.key": "v"} {
		if err := alter(key, &value); err == nil || !strings.Contains(err.Error(), "INVALID_CONFIG") || !strings.Contains(err.Error(), key) {
			t.Fatalf("IncrementalAlterConfigs %s=%s: %v, want INVALID_CONFIG naming the key", key, value, err)
		}
	}
	if got := dst.b.Metadata().Image().Mirrors["good"].Configs["security.protocol"]; got != "SASL_PLAINTEXT" {
		t.Fatalf("a refused alter changed security.protocol to %q", got)
	}
	dreq := kmsg.NewPtrDescribeConfigsRequest()
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceType(64), "good"
	dreq.Resources = append(dreq.Resources, dr)
	dresp, err := dreq.RequestWith(ctx, dst.client())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range dresp.Resources[0].Configs {
		if c.Name == "sasl.oauthbearer.token" && (c.Value != nil || !c.IsSensitive) {
			t.Fatalf("%s described in clear: %v", c.Name, c.Value)
		}
	}
}

// TestMirrorACLSyncUnsupportedSource is defect 8: a source without
// DescribeAcls is detected once; the rest of the metadata sync stays
// healthy and the ACL sync counts no errors.
func TestMirrorACLSyncUnsupportedSource(t *testing.T) {
	v := kversion.Stable()
	noACLs := new(kversion.Versions)
	v.EachMaxKeyVersion(func(k, max int16) {
		if k != int16(kmsg.DescribeACLs) {
			noACLs.SetMaxKeyVersion(k, max)
		}
	})
	src := startKfake(t, kfake.SeedTopics(1, "t"), kfake.MaxVersions(noACLs))
	srcAddr := src.ListenAddrs()[0]
	produceN(t, srcAddr, "t", 1, 5)
	dst := startSyncCluster(t) // with the security plugin: ACL sync runs
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dst.admin().CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": srcAddr, "mirror.metadata.refresh.interval.ms": "200", "mirror.topics.include": "t"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "t to be mirrored", func() bool {
		st, _ := dst.mirrorStates("m")
		return st["t/0"].State == "MIRRORING" && st["t/0"].DestinationOffset == 5
	})
	time.Sleep(1500 * time.Millisecond) // several sync cycles
	m := dst.metrics()
	if n, _ := metricValue(m, `tandem_mirror_acl_sync_errors_total{mirror="m"}`); n != 0 {
		t.Fatalf("ACL sync errors counted against a source without DescribeAcls: %v", n)
	}
	if ts, _ := metricValue(m, `tandem_mirror_metadata_sync_last_success_timestamp_seconds{mirror="m"}`); ts == 0 {
		t.Fatalf("the metadata sync never succeeded against a source without DescribeAcls")
	}
}

// TestMirrorLogsThroughBrokerLogger is defect 9: the mirror plugin logs
// through the broker's logger, so --log-level applies to it and its lines
// have the broker's format.
func TestMirrorLogsThroughBrokerLogger(t *testing.T) {
	run := func(level string) string {
		p := tandemtest.StartProcess(t, t.TempDir(), "--log-level", level, "--set", "mirror.metadata.refresh.interval.ms=100")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl := tandemtest.Client(t, p.Addr, admin.Opt())
		if err := admin.New(cl).CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
		// The metadata sync of a mirror whose source is down warns every
		// cycle.
		time.Sleep(time.Second)
		if err := p.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		return p.Logs()
	}
	if logs := run("error"); strings.Contains(logs, "WARN") {
		t.Fatalf("--log-level error, yet warnings were logged:\n%s", logs)
	}
	logs := run("info")
	var mirrorLines int
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "mirror") && strings.Contains(l, "WARN") {
			if !strings.HasPrefix(l, "time=") || !strings.Contains(l, "level=WARN") {
				t.Fatalf("mirror log line not in the broker's format: %q", l)
			}
			mirrorLines++
		}
	}
	if mirrorLines == 0 {
		t.Fatalf("no mirror warning logged at --log-level info:\n%s", logs)
	}
}

// TestMirrorSpecPoints covers the KIP points issue 11 lists: the fetcher
// sends the source leader epoch; PAUSED partitions get no metadata sync
// while the others do; ReadMirrorStates without NeedPartitionStates
// answers per topic; WriteMirrorStates deletes RemovedTopics' states; the
// metrics have the KIP's names.
func TestMirrorSpecPoints(t *testing.T) {
	src := startKfake(t, kfake.SeedTopics(2, "p"), kfake.SeedTopics(1, "q"))
	srcAddr := src.ListenAddrs()[0]
	produceN(t, srcAddr, "p", 2, 10)
	produceN(t, srcAddr, "q", 1, 10)
	epochs := make(chan int32, 1000)
	src.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		src.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				select {
				case epochs <- rp.CurrentLeaderEpoch:
				default:
				}
			}
		}
		return nil, nil, false
	})
	dst := startMirrorCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": srcAddr, "mirror.metadata.refresh.interval.ms": "200", "mirror.acl.include": ""}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"p": "m", "q": "m"}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, dst, "m", "p", map[int32]int64{0: 10, 1: 10}, 30*time.Second)
	waitMirrored(t, dst, "m", "q", map[int32]int64{0: 10}, 30*time.Second)
	md, err := kadm.NewClient(tandemtest.Client(t, srcAddr)).Metadata(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	want := md.Topics["q"].Partitions[0].LeaderEpoch
	for range 3 {
		if e := <-epochs; e != want {
			t.Fatalf("a mirror fetch carried CurrentLeaderEpoch %d, the source leader's epoch is %d", e, want)
		}
	}

	// Pause p only: the source changes p and q's configs, grows p and
	// commits a group's offsets for both; q gets them, p none of them.
	if err := da.PauseMirror(ctx, "m", "p"); err != nil {
		t.Fatal(err)
	}
	sk := kadm.NewClient(tandemtest.Client(t, srcAddr))
	for _, topic := range []string{"p", "q"} {
		if _, err := sk.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("3600000")}}, topic); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sk.CreatePartitions(ctx, 1, "p"); err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	offs.AddOffset("p", 0, 4, -1)
	offs.AddOffset("q", 0, 4, -1)
	if _, err := sk.CommitOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	dk := kadm.NewClient(dst.client())
	waitFor(t, 30*time.Second, "q's config and group offset to be synced", func() bool {
		got, err := dk.FetchOffsets(ctx, "g")
		o, ok := got.Lookup("q", 0)
		return err == nil && ok && o.At == 4 && dst.topic("q").Configs["retention.ms"] == "3600000"
	})
	time.Sleep(time.Second) // more cycles
	if v, ok := dst.topic("p").Configs["retention.ms"]; ok || len(dst.topic("p").Partitions) != 2 {
		t.Fatalf("paused topic p got the metadata sync: retention.ms %q, %d partitions", v, len(dst.topic("p").Partitions))
	}
	if got, _ := dk.FetchOffsets(ctx, "g"); got != nil {
		if o, ok := got.Lookup("p", 0); ok && o.At >= 0 {
			t.Fatalf("paused partition p-0 got the group offset %d", o.At)
		}
	}
	if err := da.ResumeMirror(ctx, "m", "p"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "p to be synced once resumed", func() bool {
		tp := dst.topic("p")
		return tp.Configs["retention.ms"] == "3600000" && len(tp.Partitions) == 3
	})

	// ReadMirrorStates per topic; WriteMirrorStates' RemovedTopics.
	cl := dst.client()
	readStates := func(req *mirrorproto.ReadMirrorStatesRequest) *mirrorproto.ReadMirrorStatesResponse {
		t.Helper()
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*mirrorproto.ReadMirrorStatesResponse)
	}
	rs := readStates(&mirrorproto.ReadMirrorStatesRequest{MirrorName: "m", Topics: []mirrorproto.PartitionsTopic{{Name: "q"}}})
	if got := rs.Topics[0].Partitions; len(got) != 1 || got[0].PartitionIndex != -1 || got[0].State != int8(mirrorstate.Mirroring) {
		t.Fatalf("ReadMirrorStates without partition states: %+v", got)
	}
	if _, err := da.RemoveTopicsFromMirror(ctx, "m", []string{"q"}); err != nil {
		t.Fatal(err)
	}
	ws, err := cl.Request(ctx, &mirrorproto.WriteMirrorStatesRequest{MirrorName: "m", RemovedTopics: []string{"q"}})
	if err != nil || ws.(*mirrorproto.WriteMirrorStatesResponse).Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("WriteMirrorStates removing q: %v %+v", err, ws)
	}
	rs = readStates(&mirrorproto.ReadMirrorStatesRequest{MirrorName: "m", NeedPartitionStates: true, Topics: []mirrorproto.PartitionsTopic{{Name: "q", Partitions: []int32{0}}}})
	if got := rs.Topics[0].Partitions[0]; got.State != int8(mirrorstate.Unknown) || got.LastMirroredOffset != -1 {
		t.Fatalf("q-0 after its states were removed: state %d, last mirrored offset %d", got.State, got.LastMirroredOffset)
	}

	// The metrics the KIP's map onto (docs/metrics.md).
	m := dst.metrics()
	for _, name := range []string{
		`tandem_mirror_max_lag_records{mirror="m"}`,
		`tandem_mirror_partitions{mirror="m",state="MIRRORING"}`,
		`tandem_mirror_partitions{mirror="m",state="STOPPED"}`,
		`tandem_mirror_partitions{mirror="m",state="FAILED"} 0`,
		`tandem_mirror_metadata_refresh_errors_total{mirror="m"}`,
		`tandem_mirror_lag_records{mirror="m",topic="p",source_topic="p",partition="0",client_id="MirrorFetcherThread-0-0-m"}`,
		`tandem_mirror_fetch_bytes_total{mirror="m",client_id="MirrorFetcherThread-0-0-m"`,
		`tandem_mirror_fetch_requests_total{mirror="m",client_id="MirrorFetcherThread-0-0-m"`,
	} {
		if !strings.Contains(m, name) {
			t.Fatalf("metric %s missing from /metrics", name)
		}
	}
}
