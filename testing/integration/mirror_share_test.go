package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/share"
	"github.com/tandem-kafka/tandem/plugins/txn"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// startShareSyncCluster is a single-node cluster with the plugins the
// share-group part of the metadata sync talks to: groups, share groups,
// transactions and the mirror, without security.
func startShareSyncCluster(t *testing.T) *syncCluster {
	t.Helper()
	props := maps.Clone(mirrorProps)
	maps.Copy(props, map[string]string{
		"listeners":                                    "PLAINTEXT://127.0.0.1:0",
		"mirror.metadata.refresh.interval.ms":          fmt.Sprint(syncInterval.Milliseconds()),
		"group.share.heartbeat.interval.ms":            "500",
		"group.share.min.heartbeat.interval.ms":        "100",
		"share.coordinator.state.topic.num.partitions": "4",
	})
	log := tandemtest.Logger(t)
	b, err := server.New(server.Config{DataDir: t.TempDir(), Props: props, Logger: log,
		Plugins: []any{groups.New(props, log), share.New(props, log), txn.New(props, log), mirror.New(props, log)}})
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

// shareAccept consumes topic in a share group until accept has said yes
// to want records, releasing the others, and returns the accepted values.
// The client stays in the group until the caller closes it.
func shareAccept(t *testing.T, cl *kgo.Client, want int, accept func(*kgo.Record) bool) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accepted := map[string]bool{}
	for len(accepted) < want {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("share poll: %v (accepted %d of %d)", err, len(accepted), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(accepted) < want && accept(r) {
				accepted[string(r.Value)] = true
				r.Ack(kgo.AckAccept)
			} else {
				r.Ack(kgo.AckRelease)
			}
		})
	}
	if err := cl.FlushAcks(ctx); err != nil {
		t.Fatalf("flush acknowledgements: %v", err)
	}
	return accepted
}

// TestMirrorShareGroupSync: the metadata sync copies share groups' start
// offsets that mirror.groups.include selects, leaves excluded groups and
// groups with members on the destination alone, and after a failover a
// share consumer on the destination resumes where the source's stopped:
// it receives the records not acknowledged on the source and none of
// those acknowledged.
func TestMirrorShareGroupSync(t *testing.T) {
	tandemtest.Long(t) // two clusters: the full tier only
	src, dst := startShareSyncCluster(t), startShareSyncCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n, done = "sq.orders", 100, 40
	src.createTopic(topic, 1, nil)
	produceValues(t, src.b.Addr(), topic, 0, n)
	for _, g := range []string{"sq-main", "sq-active", "sq-skip"} {
		setShareReset(t, src.b.Addr(), g)
	}
	da := dst.admin()
	if err := da.CreateMirror(ctx, "shares", map[string]string{"bootstrap.servers": src.b.Addr(),
		"mirror.topics.include": `sq\..*`, "mirror.groups.include": "sq-.*", "mirror.groups.exclude": "sq-skip", "mirror.acl.include": ""}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	caughtUpLogs(t, src, dst, topic)

	// A share group with a member on the destination, reading the mirror
	// topic there: its progress is its own.
	setShareReset(t, dst.b.Addr(), "sq-active")
	active := dst.client(kgo.ShareGroup("sq-active"), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	shareAccept(t, active, 10, func(r *kgo.Record) bool { return r.Offset < 10 })
	eventually(t, "sq-active's start offset 10 on the destination", func() bool { return shareStarts(t, dst.b.Addr(), "sq-active") == 10 })

	// On the source, sq-main accepts the first 40 records and releases
	// the rest; sq-active and the excluded sq-skip accept everything.
	mainCl := src.client(kgo.ShareGroup("sq-main"), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	accepted := shareAccept(t, mainCl, done, func(r *kgo.Record) bool { return r.Offset < done })
	mainCl.Close() // leaving releases whatever it still holds
	for _, g := range []string{"sq-active", "sq-skip"} {
		cl := src.client(kgo.ShareGroup(g), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
		shareAccept(t, cl, n, func(*kgo.Record) bool { return true })
		cl.Close()
	}
	for g, want := range map[string]int64{"sq-main": done, "sq-active": n, "sq-skip": n} {
		eventually(t, g+"'s start offset on the source", func() bool { return shareStarts(t, src.b.Addr(), g) == want })
	}

	eventually(t, "sq-main's start offset on the destination", func() bool { return shareStarts(t, dst.b.Addr(), "sq-main") == done })
	time.Sleep(3 * syncInterval) // cycles that must leave sq-active and sq-skip alone
	if got := shareStarts(t, dst.b.Addr(), "sq-active"); got != 10 {
		t.Fatalf("sq-active, active on the destination, moved to %d (want its own 10)", got)
	}
	listed, err := dst.kadm().ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed["sq-skip"]; ok {
		t.Fatalf("excluded share group sq-skip exists on the destination: %+v", listed["sq-skip"])
	}
	if g := listed["sq-main"]; g.GroupType != "share" || g.State != "Empty" {
		t.Fatalf("sq-main on the destination: %+v, want an empty share group", g)
	}
	active.Close()

	// Failover: a share consumer on the destination gets exactly the
	// records sq-main had not acknowledged on the source.
	if _, err := da.RemoveTopicsFromMirror(ctx, "shares", []string{topic}); err != nil {
		t.Fatalf("failover: %v", err)
	}
	cont := dst.client(kgo.ShareGroup("sq-main"), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	rest := shareAccept(t, cont, n-done, func(*kgo.Record) bool { return true })
	// Nothing more arrives: the acknowledged records are not delivered.
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	for _, r := range cont.PollFetches(pctx).Records() {
		rest[string(r.Value)] = true
	}
	pcancel()
	var want []string
	for i := done; i < n; i++ {
		want = append(want, groupValue(i))
	}
	got := slices.Sorted(maps.Keys(rest))
	if !slices.Equal(got, want) {
		t.Fatalf("after failover the destination delivered %d records %v..., want %s..%s", len(got), got[:min(3, len(got))], want[0], want[len(want)-1])
	}
	for v := range accepted {
		if rest[v] {
			t.Fatalf("%s was acknowledged on the source and delivered again on the destination", v)
		}
	}
}
