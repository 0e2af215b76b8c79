package integration

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/acl"
	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/txn"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

const syncInterval = 500 * time.Millisecond

// syncCluster is a single-node cluster with every plugin the metadata
// sync talks to: groups, transactions, mirror, and the security plugin
// authorizing. PLAINTEXT clients (the tests, the mirror) are the super
// user ANONYMOUS; SASL_PLAINTEXT users are bob and eve.
type syncCluster struct {
	t *testing.T
	b *server.Broker
}

func startSyncCluster(t *testing.T) *syncCluster {
	t.Helper()
	props := maps.Clone(mirrorProps)
	maps.Copy(props, map[string]string{
		"listeners":                           "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms":             "PLAIN",
		"tandem.sasl.plain.users":             "bob:bob-secret,eve:eve-secret",
		"super.users":                         "User:ANONYMOUS",
		"mirror.metadata.refresh.interval.ms": fmt.Sprint(syncInterval.Milliseconds()),
	})
	log := tandemtest.Logger(t)
	sec, err := acl.New(props)
	if err != nil {
		t.Fatal(err)
	}
	b, err := server.New(server.Config{DataDir: t.TempDir(), Props: props, Logger: log,
		Plugins: []any{sec, sec.Authorizer(), groups.New(props, log), txn.New(props, log), mirror.New(props, log)}})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return &syncCluster{t: t, b: b}
}

func (c *syncCluster) client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.b.Addr()), kgo.RetryTimeout(20 * time.Second), admin.Opt()}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// saslClient connects as user over SASL_PLAINTEXT.
func (c *syncCluster) saslClient(user string, opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.b.ListenerAddr("SASL_PLAINTEXT")), kgo.SASL(franzSASL(user, "PLAIN"))}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

func (c *syncCluster) kadm() *kadm.Client   { return kadm.NewClient(c.client()) }
func (c *syncCluster) admin() *admin.Client { return admin.New(c.client()) }
func (c *syncCluster) topic(name string) *metadata.Topic {
	return c.b.Metadata().Image().Topics[name]
}

func (c *syncCluster) createTopic(name string, partitions int32, configs map[string]*string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.kadm().CreateTopic(ctx, partitions, 1, configs, name); err != nil {
		c.t.Fatalf("create topic %s: %v", name, err)
	}
}

// produceTo writes n records round-robin over the partitions of topic.
func (c *syncCluster) produceTo(topic string, n int) {
	c.t.Helper()
	cl := c.client(kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "%s-%d", topic, i)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		c.t.Fatalf("produce to %s: %v", topic, err)
	}
}

func (c *syncCluster) metrics() string {
	var b bytes.Buffer
	c.b.WritePrometheus(&b)
	return b.String()
}

// mirrorStates returns the partition states and the description of a mirror.
func (c *syncCluster) mirrorStates(name string) (map[string]mirrorproto.PartitionDetail, mirrorproto.DescribedMirror) {
	return states(c.t, c.admin(), name)
}

// caughtUpLogs waits until the destination partitions of topic end where
// the source's do.
func caughtUpLogs(t *testing.T, src, dst *syncCluster, topic string) {
	t.Helper()
	waitFor(t, 30*time.Second, topic+" to be mirrored", func() bool {
		st, dt := src.topic(topic), dst.topic(topic)
		if dt == nil || len(dt.Partitions) != len(st.Partitions) {
			return false
		}
		for i := range st.Partitions {
			sp, dp := src.b.Engine().Partition(engine.TopicID(st.ID), int32(i)), dst.b.Engine().Partition(engine.TopicID(dt.ID), int32(i))
			if dp == nil || dp.Offsets().LogEnd != sp.Offsets().LogEnd {
				return false
			}
		}
		return true
	})
}

// TestMirrorMetadataSync covers issue 8's acceptance: topic discovery,
// partitions and configs; consumer group offsets across a failover; ACLs;
// a deleted source topic; a changed source cluster ID.
func TestMirrorMetadataSync(t *testing.T) {
	tandemtest.Long(t) // tens of seconds: the full tier only
	src, dst := startSyncCluster(t), startSyncCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	da := dst.admin()
	noGroupsNoACLs := func(cfg map[string]string) map[string]string {
		cfg["bootstrap.servers"] = src.b.Addr()
		cfg["mirror.groups.include"], cfg["mirror.acl.include"] = "", ""
		return cfg
	}

	t.Run("topics", func(t *testing.T) {
		ms := func(v string) *string { return &v }
		src.createTopic("sync.a", 3, map[string]*string{"retention.ms": ms("3600000"), "min.insync.replicas": ms("1"), "cleanup.policy": ms("delete")})
		src.createTopic("sync.b", 2, nil)
		src.createTopic("sync.skip", 1, nil)
		src.createTopic("other.x", 1, nil)
		src.createTopic("other.y", 1, nil)
		if err := da.CreateMirror(ctx, "topics", noGroupsNoACLs(map[string]string{
			"mirror.topics.include": `sync\..*`, "mirror.topics.exclude": `sync\.skip`})); err != nil {
			t.Fatalf("create mirror: %v", err)
		}
		// The first cycle runs as soon as the mirror exists: one cycle.
		waitFor(t, syncInterval+2*time.Second, "discovered topics", func() bool {
			return dst.topic("sync.a") != nil && dst.topic("sync.b") != nil
		})
		time.Sleep(2 * syncInterval) // more cycles discover nothing more
		for _, name := range []string{"sync.skip", "other.x", "other.y"} {
			if dst.topic(name) != nil {
				t.Fatalf("topic %s was mirrored", name)
			}
		}
		for _, name := range []string{"sync.a", "sync.b"} {
			s, d := src.topic(name), dst.topic(name)
			if s.ID != d.ID || len(s.Partitions) != len(d.Partitions) {
				t.Fatalf("%s: source ID %s with %d partitions, destination %s with %d", name, s.ID, len(s.Partitions), d.ID, len(d.Partitions))
			}
		}
		if want, got := map[string]string{"retention.ms": "3600000", "cleanup.policy": "delete", "mirror.name": "topics"}, dst.topic("sync.a").Configs; !maps.Equal(want, got) {
			t.Fatalf("sync.a configs on the destination: %v, want %v (min.insync.replicas excluded, mirror.name the mirror's)", got, want)
		}

		// Growth and a config change on the source arrive next cycle.
		sk := src.kadm()
		if _, err := sk.CreatePartitions(ctx, 2, "sync.a"); err != nil {
			t.Fatalf("create partitions: %v", err)
		}
		if _, err := sk.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: ms("7200000")}}, "sync.a"); err != nil {
			t.Fatalf("alter source configs: %v", err)
		}
		waitFor(t, 2*syncInterval+2*time.Second, "partitions and retention.ms on the destination", func() bool {
			d := dst.topic("sync.a")
			return len(d.Partitions) == 5 && d.Configs["retention.ms"] == "7200000"
		})
		// A synced key cannot be set by hand on the destination.
		resps, err := dst.kadm().AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: ms("1000")}}, "sync.a")
		if err != nil || len(resps) != 1 || resps[0].Err == nil || !strings.Contains(resps[0].ErrMessage, "read-only") && !strings.Contains(resps[0].ErrMessage, "synced") {
			t.Fatalf("altering a synced config of a mirror topic: %v %+v", err, resps)
		}
		if v := dst.topic("sync.a").Configs["retention.ms"]; v != "7200000" {
			t.Fatalf("retention.ms %q after a refused hand change", v)
		}
		// The new partitions are mirrored too.
		src.produceTo("sync.a", 50)
		caughtUpLogs(t, src, dst, "sync.a")
	})

	t.Run("deleted source topic", func(t *testing.T) {
		src.produceTo("sync.b", 40)
		caughtUpLogs(t, src, dst, "sync.b")
		d := dst.topic("sync.b")
		ends := []int64{}
		for i := range d.Partitions {
			ends = append(ends, dst.b.Engine().Partition(engine.TopicID(d.ID), int32(i)).Offsets().LogEnd)
		}
		if _, err := src.kadm().DeleteTopic(ctx, "sync.b"); err != nil {
			t.Fatalf("delete source topic: %v", err)
		}
		waitFor(t, 20*time.Second, "sync.b partitions to be STOPPED", func() bool {
			st, _ := dst.mirrorStates("topics")
			return st["sync.b/0"].State == "STOPPED" && st["sync.b/1"].State == "STOPPED"
		})
		if d2 := dst.topic("sync.b"); d2 == nil || d2.ID != d.ID {
			t.Fatalf("destination topic sync.b is gone or replaced")
		}
		for i, end := range ends {
			// The stop appends its producer-state barrier after the data.
			if o := dst.b.Engine().Partition(engine.TopicID(d.ID), int32(i)).Offsets(); o.LogEnd < end || o.LogStart != 0 {
				t.Fatalf("sync.b-%d: log [%d, %d) after the source deletion, want [0, %d+)", i, o.LogStart, o.LogEnd, end)
			}
		}
		if st, _ := dst.mirrorStates("topics"); st["sync.a/0"].State != "MIRRORING" {
			t.Fatalf("sync.a is %s after sync.b was deleted", st["sync.a/0"].State)
		}
	})

	t.Run("group offsets", func(t *testing.T) {
		const topic = "grp.orders"
		src.createTopic(topic, 2, nil)
		src.produceTo(topic, 200)
		if err := da.CreateMirror(ctx, "groups", map[string]string{"bootstrap.servers": src.b.Addr(),
			"mirror.topics.include": `grp\..*`, "mirror.groups.include": "cg-.*", "mirror.groups.exclude": "cg-skip", "mirror.acl.include": ""}); err != nil {
			t.Fatalf("create mirror: %v", err)
		}
		caughtUpLogs(t, src, dst, topic)

		// A consumer group reads half of each partition on the source and
		// commits that.
		seen := map[string]bool{}
		cons := src.client(kgo.ConsumerGroup("cg-main"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var polled, consumed []*kgo.Record
		for len(polled) < 200 {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			fs := cons.PollFetches(pctx)
			pcancel()
			if err := fs.Err0(); err != nil {
				t.Fatalf("poll: %v", err)
			}
			polled = append(polled, fs.Records()...)
		}
		for _, r := range polled {
			if r.Offset < 50 {
				consumed = append(consumed, r)
				seen[string(r.Value)] = true
			}
		}
		if err := cons.CommitRecords(ctx, consumed...); err != nil {
			t.Fatalf("commit: %v", err)
		}
		cons.Close()
		srcCommits, err := src.kadm().FetchOffsets(ctx, "cg-main")
		if err != nil {
			t.Fatal(err)
		}
		// The same group committed elsewhere, and a group active on the
		// destination: the latter keeps its own offsets.
		if _, err := src.kadm().CommitOffsets(ctx, "cg-skip", kadm.OffsetsFromRecords(*consumed[0])); err != nil {
			t.Fatal(err)
		}
		active := dst.client(kgo.ConsumerGroup("cg-active"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var activeRecs []*kgo.Record
		for len(activeRecs) < 150 {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			activeRecs = append(activeRecs, active.PollFetches(pctx).Records()...)
			pcancel()
		}
		if err := active.CommitRecords(ctx, activeRecs...); err != nil {
			t.Fatal(err)
		}
		activeCommits, err := dst.kadm().FetchOffsets(ctx, "cg-active")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.kadm().CommitOffsets(ctx, "cg-active", kadm.OffsetsFromRecords(*consumed[0])); err != nil {
			t.Fatal(err)
		}

		waitFor(t, 10*time.Second, "cg-main offsets on the destination", func() bool {
			got, err := dst.kadm().FetchOffsets(ctx, "cg-main")
			if err != nil {
				return false
			}
			ok := len(got) > 0
			srcCommits.Each(func(o kadm.OffsetResponse) {
				g, found := got.Lookup(o.Topic, o.Partition)
				ok = ok && found && g.At == o.At && g.LeaderEpoch == o.LeaderEpoch
			})
			return ok
		})
		time.Sleep(3 * syncInterval) // cycles that must leave cg-active and cg-skip alone
		after, err := dst.kadm().FetchOffsets(ctx, "cg-active")
		if err != nil {
			t.Fatal(err)
		}
		activeCommits.Each(func(o kadm.OffsetResponse) {
			if g, _ := after.Lookup(o.Topic, o.Partition); g.At != o.At {
				t.Fatalf("active group cg-active: %s-%d moved from %d to %d", o.Topic, o.Partition, o.At, g.At)
			}
		})
		if skip, err := dst.kadm().FetchOffsets(ctx, "cg-skip"); err != nil || len(skip) != 0 {
			t.Fatalf("excluded group cg-skip has offsets on the destination: %v %v", skip, err)
		}
		active.Close()

		// Failover; the group continues on the destination exactly where
		// it stopped on the source.
		if _, err := da.RemoveTopicsFromMirror(ctx, "groups", []string{topic}); err != nil {
			t.Fatalf("failover: %v", err)
		}
		cont := dst.client(kgo.ConsumerGroup("cg-main"), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var rest []*kgo.Record
		deadline := time.Now().Add(20 * time.Second)
		for len(rest) < 100 && time.Now().Before(deadline) {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cont.PollFetches(pctx)
			pcancel()
			for _, e := range fs.Errors() {
				if e.Err != context.DeadlineExceeded {
					t.Fatalf("consume on the destination: %v", e.Err)
				}
			}
			rest = append(rest, fs.Records()...)
		}
		for _, r := range rest {
			if seen[string(r.Value)] {
				t.Fatalf("record %s read twice", r.Value)
			}
			seen[string(r.Value)] = true
		}
		if len(seen) != 200 {
			t.Fatalf("%d distinct records read across the failover, want 200", len(seen))
		}
	})

	t.Run("acls", func(t *testing.T) {
		src.createTopic("acl.t1", 1, nil)
		src.produceTo("acl.t1", 5)
		lit, pref := kadm.ACLPatternLiteral, kadm.ACLPatternPrefixed
		sk, dk := src.kadm(), dst.kadm()
		mustCreate := func(k *kadm.Client, b *kadm.ACLBuilder) {
			t.Helper()
			res, err := k.CreateACLs(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
		}
		mustCreate(sk, kadm.NewACLs().Topics("acl.t1").ResourcePatternType(lit).Allow("User:*").Operations(kadm.OpRead))
		mustCreate(sk, kadm.NewACLs().Topics("acl.t1").ResourcePatternType(lit).Deny("User:eve").Operations(kadm.OpRead))
		mustCreate(sk, kadm.NewACLs().Groups("acl-").ResourcePatternType(pref).Allow("User:bob").Operations(kadm.OpRead))
		mustCreate(sk, kadm.NewACLs().Groups("acl-").ResourcePatternType(pref).Allow("User:bob").Operations(kadm.OpDescribe)) // operation not included
		mustCreate(sk, kadm.NewACLs().Topics("other.x").ResourcePatternType(lit).Allow("User:bob").Operations(kadm.OpRead))   // name not included
		// One made by hand on the destination, matching the rules: not the mirror's to delete.
		mustCreate(dk, kadm.NewACLs().Topics("acl.hand").ResourcePatternType(lit).Allow("User:bob").Operations(kadm.OpRead))

		if err := da.CreateMirror(ctx, "acls", map[string]string{"bootstrap.servers": src.b.Addr(), "mirror.topics.include": `acl\..*`,
			"mirror.groups.include": "", "mirror.acl.include": `TOPIC;acl\..*,GROUP;acl-.*;READ;ALLOW;User:bob`}); err != nil {
			t.Fatalf("create mirror: %v", err)
		}
		destACLs := func() []string {
			res, err := dk.DescribeACLs(ctx, kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Allow().AllowHosts().Deny().DenyHosts().Operations(kadm.OpAny))
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				for _, d := range r.Described {
					out = append(out, fmt.Sprintf("%s:%s:%s:%s:%s:%s", d.Type, d.Name, d.Pattern, d.Principal, d.Operation, d.Permission))
				}
			}
			slices.Sort(out)
			return slices.Compact(out)
		}
		want := []string{
			"GROUP:acl-:PREFIXED:User:bob:READ:ALLOW",
			"TOPIC:acl.hand:LITERAL:User:bob:READ:ALLOW",
			"TOPIC:acl.t1:LITERAL:User:*:READ:ALLOW",
			"TOPIC:acl.t1:LITERAL:User:eve:READ:DENY",
		}
		waitFor(t, 10*time.Second, "ACLs on the destination", func() bool { return slices.Equal(destACLs(), want) })

		// Deleted on the source: deleted here; the hand-made one stays.
		if _, err := sk.DeleteACLs(ctx, kadm.NewACLs().Groups("acl-").ResourcePatternType(pref).Allow("User:bob").AllowHosts().Operations(kadm.OpRead)); err != nil {
			t.Fatal(err)
		}
		want = slices.DeleteFunc(want, func(s string) bool { return strings.HasPrefix(s, "GROUP") })
		waitFor(t, 10*time.Second, "deleted ACL to disappear", func() bool { return slices.Equal(destACLs(), want) })
		time.Sleep(2 * syncInterval)
		if got := destACLs(); !slices.Equal(got, want) {
			t.Fatalf("ACLs on the destination: %v, want %v", got, want)
		}

		// After failover bob may read acl.t1 on the destination, eve (DENY) may not.
		caughtUpLogs(t, src, dst, "acl.t1")
		if _, err := da.RemoveTopicsFromMirror(ctx, "acls", []string{"acl.t1"}); err != nil {
			t.Fatalf("failover: %v", err)
		}
		read := func(user string) (int, error) {
			cl := dst.saslClient(user, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"acl.t1": {0: kgo.NewOffset().AtStart()}}))
			n := 0
			deadline := time.Now().Add(10 * time.Second)
			for n < 5 && time.Now().Before(deadline) {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				fs := cl.PollFetches(pctx)
				pcancel()
				for _, e := range fs.Errors() {
					if e.Err != context.DeadlineExceeded {
						return n, e.Err
					}
				}
				n += len(fs.Records())
			}
			return n, nil
		}
		if n, err := read("bob"); err != nil || n != 5 {
			t.Fatalf("bob on the destination: %d records, %v", n, err)
		}
		if _, err := read("eve"); err == nil || !strings.Contains(err.Error(), kerr.TopicAuthorizationFailed.Message) {
			t.Fatalf("eve on the destination: %v, want TOPIC_AUTHORIZATION_FAILED", err)
		}
	})

	t.Run("source cluster ID changed", func(t *testing.T) {
		other := startSyncCluster(t)
		other.createTopic("sync.a", 7, nil) // another topic of the same name
		other.createTopic("sync.new", 1, nil)
		before := *dst.topic("sync.a")
		st, _ := dst.mirrorStates("topics")
		cl := dst.client()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = 64, "topics"
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = "bootstrap.servers", kmsg.StringPtr(other.b.Addr())
		r.Configs = append(r.Configs, c)
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("point the mirror at another cluster: %v %+v", err, resp)
		}
		waitFor(t, 10*time.Second, "the mirror to report the changed cluster ID", func() bool {
			_, m := dst.mirrorStates("topics")
			return m.ErrorCode == kerr.InconsistentClusterID.Code && m.ErrorMessage != nil && strings.Contains(*m.ErrorMessage, "cluster ID changed")
		})
		time.Sleep(3 * syncInterval)
		if !strings.Contains(dst.metrics(), `tandem_mirror_source_cluster_id_mismatch{mirror="topics"} 1`) {
			t.Fatalf("no tandem_mirror_source_cluster_id_mismatch of 1 for mirror topics")
		}
		if dst.topic("sync.new") != nil {
			t.Fatalf("a topic of the other cluster was created")
		}
		after := dst.topic("sync.a")
		if after.ID != before.ID || len(after.Partitions) != len(before.Partitions) || !maps.Equal(after.Configs, before.Configs) {
			t.Fatalf("sync.a altered after the cluster ID changed: %+v → %+v", before, after)
		}
		// Not stopped nor otherwise changed: shown FAILED, as a partition
		// cut off from its source is (its source is another cluster now),
		// and MIRRORING again once the source is right.
		st2, _ := dst.mirrorStates("topics")
		for k, pd := range st2 {
			if strings.HasPrefix(k, "sync.a/") && pd.State != st[k].State && pd.State != "FAILED" {
				t.Fatalf("%s went from %s to %s", k, st[k].State, pd.State)
			}
		}
		for _, m := range []string{"metadata_refresh_errors_total", "metadata_sync_duration_seconds_count", "metadata_sync_last_success_timestamp_seconds"} {
			if !strings.Contains(dst.metrics(), "tandem_mirror_"+m+`{mirror="topics"}`) {
				t.Fatalf("metric %s missing", m)
			}
		}
	})
}
