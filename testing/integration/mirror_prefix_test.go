package integration

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Mirrors with mirror.topic.prefix (issue 43): the source's topic T is
// prefix+T on the destination, with the source's topic ID, offsets and
// batches.

// prefixedMirror creates mirror name on dst copying src's topics under
// prefix, with a quick metadata sync.
func prefixedMirror(t *testing.T, src, dst *mirrorCluster, name, prefix string, extra map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := map[string]string{"bootstrap.servers": src.addr(), "mirror.topic.prefix": prefix, "mirror.metadata.refresh.interval.ms": "500"}
	for k, v := range extra {
		cfg[k] = v
	}
	if err := dst.admin().CreateMirror(ctx, name, cfg); err != nil {
		t.Fatalf("create mirror %s with prefix %q: %v", name, prefix, err)
	}
}

// caughtUpAs waits until every partition of src's topic is mirrored by
// mirror as dstTopic on dst, MIRRORING with lag 0, its log ending where
// the source's does, then checks both logs batch by batch.
func caughtUpAs(t *testing.T, src, dst *mirrorCluster, mirror, srcTopic, dstTopic string, d time.Duration) {
	t.Helper()
	a := dst.admin()
	n := len(src.topic(srcTopic).Partitions)
	waitFor(t, d, dstTopic+" to catch up with "+srcTopic, func() bool {
		st, _ := states(t, a, mirror)
		for p := range n {
			pd := st[fmt.Sprintf("%s/%d", dstTopic, p)]
			se := src.partition(srcTopic, int32(p)).Offsets().LogEnd
			if pd.State != "MIRRORING" || pd.Lag != 0 || pd.SourceOffset != se || pd.DestinationOffset != se {
				return false
			}
		}
		return true
	})
	for p := range n {
		sameLog(t, fmt.Sprintf("%s-%d and %s-%d", srcTopic, p, dstTopic, p), src.partition(srcTopic, int32(p)), dst.partition(dstTopic, int32(p)))
	}
}

// TestMirrorTopicPrefix: a mirror with mirror.topic.prefix=a. copies A's
// orders into a.orders on B, byte for byte at the same offsets with A's
// topic ID; --describe, --describe-config and /metrics show both names;
// the prefix is validated and cannot be altered; the prefixed topic is
// read-only and fails over to a writable a.orders; the console's view
// names the source topic.
func TestMirrorTopicPrefix(t *testing.T) {
	a, b := startMirrorCluster(t, ""), startMirrorCluster(t, "")
	createMirrorTopic(t, a, "orders", 3)
	produceMixed(t, a, "orders", 3000)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ba := b.admin()

	for _, bad := range []string{"a/", "__a.", strings.Repeat("x", 201)} {
		err := ba.CreateMirror(ctx, "bad", map[string]string{"bootstrap.servers": a.addr(), "mirror.topic.prefix": bad})
		if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), "mirror.topic.prefix") {
			t.Fatalf("mirror.topic.prefix=%q: %v, want INVALID_CONFIG naming the key", bad, err)
		}
	}
	prefixedMirror(t, a, b, "from-a", "a.", nil)
	if err := ba.AddTopicsToMirror(ctx, map[string]string{"orders": "from-a"}); err != nil {
		t.Fatal(err)
	}
	if b.topic("orders") != nil || b.topic("a.orders") == nil || b.topic("a.orders").ID != a.topic("orders").ID {
		t.Fatalf("after --add orders: orders here %v, a.orders %v; want only a.orders, with A's topic ID %v", b.topic("orders"), b.topic("a.orders"), a.topic("orders").ID)
	}
	caughtUpAs(t, a, b, "from-a", "orders", "a.orders", time.Minute)

	// Both names wherever they differ.
	_, dm := states(t, ba, "from-a")
	if dm.TopicPrefix != "a." || len(dm.Topics) != 1 || dm.Topics[0].TopicName != "a.orders" || dm.Topics[0].SourceTopicName != "orders" {
		t.Fatalf("describe: prefix %q, topics %+v; want a.orders from source topic orders", dm.TopicPrefix, dm.Topics)
	}
	cfgs, err := ba.DescribeMirrorConfigs(ctx, "from-a")
	if err != nil || !slices.ContainsFunc(cfgs, func(c admin.MirrorConfig) bool {
		return c.Name == "mirror.topic.prefix" && c.Value != nil && *c.Value == "a."
	}) {
		t.Fatalf("--describe-config: %v %+v, want mirror.topic.prefix=a.", err, cfgs)
	}
	if m := b.metrics(); !strings.Contains(m, `topic="a.orders",source_topic="orders"`) {
		t.Fatalf("/metrics has no series of a.orders naming its source topic orders")
	}
	var views []plugin.MirrorView
	for _, pl := range b.b.Plugins() {
		if d, ok := pl.(plugin.MirrorDescriber); ok {
			views = d.DescribeMirrors(ctx)
		}
	}
	if len(views) != 1 || len(views[0].Partitions) != 3 || slices.ContainsFunc(views[0].Partitions, func(p plugin.MirrorPartitionView) bool {
		return p.Topic != "a.orders" || p.SourceTopic != "orders"
	}) {
		t.Fatalf("the console's mirrors: %+v, want the partitions of a.orders naming source topic orders", views)
	}
	err = ba.AlterMirrorConfigs(ctx, "from-a", map[string]string{"mirror.topic.prefix": "x."}, nil)
	if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), "cannot be changed") {
		t.Fatalf("altering mirror.topic.prefix: %v, want INVALID_CONFIG", err)
	}
	if err := produceOne(t, b, "a.orders", 0, "local"); err == nil {
		t.Fatal("a produce to the prefixed mirror topic was accepted")
	}

	// Fail over: a.orders becomes writable, with everything mirrored.
	ends := produceN(t, a.addr(), "orders", 3, 10)
	waitMirrored(t, b, "from-a", "a.orders", ends, time.Minute)
	if _, err := ba.Failover(ctx, "from-a", []string{"a.orders"}, admin.FailoverOptions{Timeout: 30 * time.Second}); err != nil {
		t.Fatalf("failover of a.orders: %v", err)
	}
	if err := produceOne(t, b, "a.orders", 0, "local"); err != nil {
		t.Fatalf("produce to a.orders after its failover: %v", err)
	}
	for p, end := range ends {
		if got := b.partition("a.orders", p).Offsets().LogEnd; got < end {
			t.Fatalf("a.orders-%d ends at %d after failover, want at least %d", p, got, end)
		}
	}
}

// TestMirrorPrefixRefusals: what a prefixed mirror refuses, each with a
// message naming what clashes: a second mirror with the same prefix; a
// topic whose name here another mirror already writes; a copy of a
// mirror topic of the source (a.b.orders); a copy of a topic whose ID
// this cluster already holds under another name; a mirror of this very
// cluster.
func TestMirrorPrefixRefusals(t *testing.T) {
	a, b, c := startMirrorCluster(t, ""), startMirrorCluster(t, ""), startMirrorCluster(t, "")
	createMirrorTopic(t, a, "orders", 1)
	createMirrorTopic(t, c, "a.orders", 1)
	produceN(t, a.addr(), "orders", 1, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	aa, ba := a.admin(), b.admin()

	// B mirrors A's orders as a.orders.
	prefixedMirror(t, a, b, "from-a", "a.", nil)
	if err := ba.AddTopicsToMirror(ctx, map[string]string{"orders": "from-a"}); err != nil {
		t.Fatal(err)
	}
	// Another source with the same prefix: refused at --create.
	err := ba.CreateMirror(ctx, "from-c", map[string]string{"bootstrap.servers": c.addr(), "mirror.topic.prefix": "a."})
	if err == nil || !strings.Contains(err.Error(), "from-c") || !strings.Contains(err.Error(), "from-a") {
		t.Fatalf("a second mirror with prefix a.: %v, want a refusal naming both mirrors", err)
	}
	// C's own a.orders, unprefixed, would be B's a.orders: refused at --add.
	if err := ba.CreateMirror(ctx, "from-c", map[string]string{"bootstrap.servers": c.addr()}); err != nil {
		t.Fatal(err)
	}
	err = ba.AddTopicsToMirror(ctx, map[string]string{"a.orders": "from-c"})
	if !errors.Is(err, mirrorproto.ErrTopicAlreadyMirrored) || !strings.Contains(err.Error(), "from-c") || !strings.Contains(err.Error(), "from-a") {
		t.Fatalf("C's a.orders onto B's a.orders: %v, want TOPIC_ALREADY_MIRRORED naming both mirrors", err)
	}
	// ... and at --create, when its patterns would discover it.
	err = ba.CreateMirror(ctx, "from-c2", map[string]string{"bootstrap.servers": c.addr(), "mirror.topics.include": "a\\..*", "mirror.topic.prefix": ""})
	if err == nil || !strings.Contains(err.Error(), "from-c2") || !strings.Contains(err.Error(), "from-a") {
		t.Fatalf("a mirror whose patterns select a name another mirror holds: %v, want a refusal naming both", err)
	}

	// A mirrors B with prefix b.: B's a.orders is a mirror topic there,
	// never copied back (it would be b.a.orders).
	prefixedMirror(t, b, a, "from-b", "b.", nil)
	err = aa.AddTopicsToMirror(ctx, map[string]string{"a.orders": "from-b"})
	if !errors.Is(err, mirrorproto.ErrTopicAlreadyMirrored) || !strings.Contains(err.Error(), "mirror topic there") {
		t.Fatalf("copying B's a.orders back as b.a.orders: %v, want TOPIC_ALREADY_MIRRORED (a mirror topic of the source)", err)
	}
	// Once B failed it over it is B's own topic, but its ID is A's
	// orders': one ID, one topic.
	if _, err := ba.RemoveTopicsFromMirror(ctx, "from-a", []string{"a.orders"}); err != nil {
		t.Fatal(err)
	}
	err = aa.AddTopicsToMirror(ctx, map[string]string{"a.orders": "from-b"})
	if !errors.Is(err, kerr.InconsistentTopicID) || !strings.Contains(err.Error(), "already topic orders here") {
		t.Fatalf("copying B's failed-over a.orders as b.a.orders: %v, want INCONSISTENT_TOPIC_ID naming orders", err)
	}
	if a.topic("b.a.orders") != nil {
		t.Fatal("b.a.orders was created")
	}

	// A mirror of this very cluster: refused, with or without a prefix.
	for _, prefix := range []string{"self.", ""} {
		err = aa.CreateMirror(ctx, "self", map[string]string{"bootstrap.servers": a.addr(), "mirror.topic.prefix": prefix})
		if err == nil || !strings.Contains(err.Error(), "this very cluster") {
			t.Fatalf("a mirror of this cluster (prefix %q): %v, want a refusal", prefix, err)
		}
	}
}

// TestMirrorPrefixFailback: B mirrors A's orders as a.orders (tandem
// mirrors --describe shows both names); B fails a.orders over and takes
// writes while A, cut off, writes too; `tandem mirrors --failback` on A
// makes A's orders a copy of B's a.orders (A's own writes after the
// split go to orders.diverged, whose manifest names both topics in
// --diverged and the console); then back to where it started: A fails
// over, and --failback on B makes a.orders a mirror of A's orders again.
func TestMirrorPrefixFailback(t *testing.T) {
	a, b := startMirrorCluster(t, ""), startMirrorCluster(t, "")
	createMirrorTopic(t, a, "orders", 2)
	ends := produceN(t, a.addr(), "orders", 2, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefixedMirror(t, a, b, "m", "a.", nil)
	if err := b.admin().AddTopicsToMirror(ctx, map[string]string{"orders": "m"}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, b, "m", "a.orders", ends, time.Minute)
	ok := func(addr string, args ...string) string {
		t.Helper()
		code, out, errOut := runMirrors(t, append([]string{"--bootstrap-server", addr}, args...)...)
		if code != 0 {
			t.Fatalf("tandem mirrors %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}

	// tandem mirrors --describe names the source topic.
	if out := ok(b.addr(), "--describe", "--mirror", "m"); !regexp.MustCompile(`(?m)^MIRROR\s+TOPIC\s+SOURCE-TOPIC\s+PARTITION\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^m\s+a\.orders\s+orders\s+1\s`).MatchString(out) {
		t.Fatalf("--describe:\n%s\nwant a SOURCE-TOPIC column naming orders", out)
	}
	if out := ok(b.addr(), "--describe", "--mirror", "m", "--json"); !strings.Contains(out, `"topic_prefix":"a."`) || !strings.Contains(out, `"topic":"a.orders","source_topic":"orders"`) {
		t.Fatalf("--describe --json:\n%s\nwant topic_prefix and source_topic", out)
	}

	// The split: B fails over and takes writes, A writes too.
	ok(b.addr(), "--failover", "--mirror", "m", "--topic", "a.orders", "--force")
	produceN(t, b.addr(), "a.orders", 2, 5)
	produceN(t, a.addr(), "orders", 2, 3)

	// Failback on A: A's orders becomes B's a.orders, byte for byte.
	ok(a.addr(), "--failback", "--mirror", "m", "--source-bootstrap", b.addr(), "--yes")
	for p := range int32(2) {
		waitFor(t, time.Minute, "A's orders to converge with B's a.orders", func() bool {
			return a.partition("orders", p).Offsets().LogEnd == b.partition("a.orders", p).Offsets().LogEnd
		})
		sameLog(t, fmt.Sprintf("A's orders-%d and B's a.orders-%d", p, p), b.partition("a.orders", p), a.partition("orders", p))
		if got := a.partition("orders.diverged", p).Offsets().LogEnd; got == 0 {
			t.Fatalf("orders.diverged-%d on A is empty: A's own writes after the split were not kept", p)
		}
	}
	_, dm := states(t, a.admin(), "m")
	if len(dm.Topics) != 1 || dm.Topics[0].TopicName != "orders" || dm.Topics[0].SourceTopicName != "a.orders" {
		t.Fatalf("A's mirror m after failback: %+v, want orders copying a.orders", dm.Topics)
	}
	if len(dm.Diverged) == 0 || !slices.ContainsFunc(dm.Diverged, func(d mirrorproto.DivergedRange) bool { return d.Topic == "orders" && d.SourceTopic == "a.orders" }) {
		t.Fatalf("A's divergence manifest %+v, want entries of orders naming its source topic a.orders", dm.Diverged)
	}
	if out := ok(a.addr(), "--diverged", "--mirror", "m", "--json"); !strings.Contains(out, `"source_topic":"a.orders"`) {
		t.Fatalf("--diverged --json: %s", out)
	}
	for _, pl := range a.b.Plugins() {
		if d, isD := pl.(plugin.MirrorDescriber); isD {
			views := d.DescribeMirrors(ctx)
			if len(views) != 1 || len(views[0].Diverged) == 0 || slices.ContainsFunc(views[0].Diverged, func(d plugin.DivergedView) bool { return d.Topic != "orders" || d.SourceTopic != "a.orders" }) {
				t.Fatalf("the console's divergence manifest on A: %+v, want entries of orders naming source topic a.orders", views)
			}
		}
	}

	// Back to where it started.
	ok(a.addr(), "--failover", "--mirror", "m")
	ends = produceN(t, a.addr(), "orders", 2, 4)
	ok(b.addr(), "--failback", "--mirror", "m", "--source-bootstrap", a.addr(), "--yes")
	waitMirrored(t, b, "m", "a.orders", ends, time.Minute)
	for p := range int32(2) {
		sameLog(t, fmt.Sprintf("A's orders-%d and B's a.orders-%d after going back", p, p), a.partition("orders", p), b.partition("a.orders", p))
	}
	if err := produceOne(t, b, "a.orders", 0, "local"); err == nil {
		t.Fatal("a.orders on B is writable after going back")
	}
}

// TestMirrorPrefixSync: a prefixed mirror's metadata sync follows the
// prefix: the source topic's configs land on p.orders, a group's
// committed offsets of orders on p.orders, and ACL bindings on orders
// (literal), on topics starting ord (prefixed) and on every topic (the
// literal wildcard) on p.orders, p.ord (prefixed) and the prefixed
// pattern p.; a group binding keeps its name.
func TestMirrorPrefixSync(t *testing.T) {
	src, dst := startSyncCluster(t), startSyncCluster(t)
	retention := "7200000"
	src.createTopic("orders", 2, map[string]*string{"retention.ms": &retention})
	src.produceTo("orders", 20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sk, dk := src.kadm(), dst.kadm()
	for _, b := range []*kadm.ACLBuilder{
		kadm.NewACLs().Topics("orders").ResourcePatternType(kadm.ACLPatternLiteral).Allow("User:bob").Operations(kadm.OpRead),
		kadm.NewACLs().Topics("*").ResourcePatternType(kadm.ACLPatternLiteral).Allow("User:eve").Operations(kadm.OpDescribe),
		kadm.NewACLs().Topics("ord").ResourcePatternType(kadm.ACLPatternPrefixed).Allow("User:carl").Operations(kadm.OpWrite),
		kadm.NewACLs().Groups("g").ResourcePatternType(kadm.ACLPatternLiteral).Allow("User:bob").Operations(kadm.OpRead),
	} {
		if res, err := sk.CreateACLs(ctx, b); err != nil || res[0].Err != nil {
			t.Fatalf("create source ACL: %v %v", err, res)
		}
	}
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 7, LeaderEpoch: -1})
	commit.Add(kadm.Offset{Topic: "orders", Partition: 1, At: 3, LeaderEpoch: -1})
	if _, err := sk.CommitOffsets(ctx, "cg", commit); err != nil {
		t.Fatal(err)
	}
	if err := dst.admin().CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.b.Addr(), "mirror.topic.prefix": "p.",
		"mirror.topics.include": "orders", "mirror.acl.include": "*"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "p.orders with the source's retention.ms", func() bool {
		tp := dst.topic("p.orders")
		return tp != nil && tp.ID == src.topic("orders").ID && tp.Configs["retention.ms"] == retention
	})
	waitFor(t, 20*time.Second, "cg's offsets on p.orders", func() bool {
		offs, err := dk.FetchOffsets(ctx, "cg")
		if err != nil {
			return false
		}
		o0, ok0 := offs.Lookup("p.orders", 0)
		o1, ok1 := offs.Lookup("p.orders", 1)
		_, plain := offs.Lookup("orders", 0)
		return ok0 && ok1 && o0.At == 7 && o1.At == 3 && !plain
	})
	want := []string{
		"GROUP:g:LITERAL:User:bob:READ:ALLOW",
		"TOPIC:p.:PREFIXED:User:eve:DESCRIBE:ALLOW",
		"TOPIC:p.ord:PREFIXED:User:carl:WRITE:ALLOW",
		"TOPIC:p.orders:LITERAL:User:bob:READ:ALLOW",
	}
	var got []string
	waitFor(t, 20*time.Second, "the prefixed ACLs", func() bool {
		res, err := dk.DescribeACLs(ctx, kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Allow().AllowHosts().Deny().DenyHosts().Operations(kadm.OpAny))
		if err != nil {
			return false
		}
		got = nil
		for _, r := range res {
			for _, d := range r.Described {
				got = append(got, fmt.Sprintf("%s:%s:%s:%s:%s:%s", d.Type, d.Name, d.Pattern, d.Principal, d.Operation, d.Permission))
			}
		}
		slices.Sort(got)
		return slices.Equal(slices.Compact(got), want)
	})
}
