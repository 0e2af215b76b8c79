package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestACLsCommands creates, lists and deletes ACLs with tandem acls and
// reads back with kadm the bindings the broker holds.
func TestACLsCommands(t *testing.T) {
	b := tandemtest.StartInProcess(t, nil)
	bs := []string{"--bootstrap-server", b.Addr()}
	ctx := ctxT(t)
	cmd := func(args ...string) string { return ok(t, "", append(args, bs...)...) }
	// held is every binding the broker holds, read with a raw
	// DescribeACLs of any resource, principal and operation.
	held := func() []kmsg.DescribeACLsResponseResource {
		t.Helper()
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
		req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		resp, err := req.RequestWith(ctx, tandemtest.Client(t, b.Addr()))
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("DescribeACLs: %v %+v", err, resp)
		}
		return resp.Resources
	}
	count := func() int {
		n := 0
		for _, r := range held() {
			n += len(r.ACLs)
		}
		return n
	}

	cmd("acls", "create", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe", "--topic", "orders", "--group", "billing")
	cmd("acls", "create", "--deny-principal", "User:mallory", "--operation", "Write", "--topic", "pay", "--resource-pattern-type", "prefixed")
	if n := count(); n != 5 {
		t.Fatalf("the broker holds %d bindings, want 5 (2 operations × 2 resources + 1): %+v", n, held())
	}
	var acls []listedACL
	unmarshal(t, cmd("acls", "list", "--topic", "pay", "--resource-pattern-type", "prefixed", "--json"), &acls)
	if len(acls) != 1 || acls[0] != (listedACL{"User:mallory", "*", "WRITE", "DENY", "TOPIC", "pay", "PREFIXED"}) {
		t.Fatalf("acls list --topic pay --resource-pattern-type prefixed: %+v", acls)
	}
	// match: the bindings that apply to topic payments, the prefixed one.
	acls = nil
	unmarshal(t, cmd("acls", "list", "--topic", "payments", "--resource-pattern-type", "match", "--json"), &acls)
	if len(acls) != 1 || acls[0].ResourceName != "pay" {
		t.Fatalf("acls list --topic payments --resource-pattern-type match: %+v", acls)
	}
	if text := cmd("acls", "list", "--principal", "User:alice"); !regexp.MustCompile(`(?m)^User:alice\s+\*\s+READ\s+ALLOW\s+GROUP\s+billing\s+LITERAL\s*$`).MatchString(text) {
		t.Fatalf("acls list --principal User:alice:\n%s", text)
	}
	cmd("acls", "delete", "--topic", "orders")
	if n := count(); n != 3 {
		t.Fatalf("after deleting the ACLs of topic orders the broker holds %d bindings, want 3: %+v", n, held())
	}
	cmd("acls", "delete", "--group", "billing", "--allow-principal", "User:alice", "--operation", "Read")
	if n := count(); n != 2 {
		t.Fatalf("after deleting alice's READ on billing the broker holds %d bindings, want 2: %+v", n, held())
	}
}

// TestShareGroupCommands: groups list and describe show a share group and
// its share-partition start offsets; reset-offsets is refused while it has
// members and moves the start offsets once it has none.
func TestShareGroupCommands(t *testing.T) {
	b := tandemtest.StartInProcess(t, map[string]string{"group.share.heartbeat.interval.ms": "200", "group.share.min.heartbeat.interval.ms": "100"})
	bs := []string{"--bootstrap-server", b.Addr()}
	ctx := ctxT(t)
	cmd := func(in string, args ...string) string { return ok(t, in, append(args, bs...)...) }
	cmd("", "topics", "create", "jobs", "--partitions", "1")
	cmd("a\nb\nc\nd\n", "produce", "jobs")
	cl := tandemtest.Client(t, b.Addr())
	v := "earliest"
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeGroupConfig, ResourceName: "workers",
		Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "share.auto.offset.reset", Value: &v}}}}
	if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("share.auto.offset.reset: %v %+v", err, resp)
	}

	// A member accepts the four records.
	member := tandemtest.Client(t, b.Addr(), kgo.ShareGroup("workers"), kgo.ConsumeTopics("jobs"), kgo.FetchMaxWait(200*time.Millisecond))
	got := 0
	for got < 4 {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := member.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { got++; r.Ack(kgo.AckAccept) })
		if ctx.Err() != nil {
			t.Fatalf("the share consumer read %d of 4 records", got)
		}
	}
	if err := member.FlushAcks(ctx); err != nil {
		t.Fatalf("acknowledging: %v", err)
	}
	var listed []listedGroup
	unmarshal(t, cmd("", "groups", "list", "--type", "share", "--json"), &listed)
	if len(listed) != 1 || listed[0].Group != "workers" || listed[0].Type != "share" {
		t.Fatalf("groups list --type share: %+v", listed)
	}
	startOf := func() *int64 {
		t.Helper()
		var gs []describedGroup
		unmarshal(t, cmd("", "groups", "describe", "workers", "--json"), &gs)
		if len(gs) != 1 || gs[0].Type != "share" || len(gs[0].Partitions) != 1 || gs[0].Partitions[0].CommittedOffset != nil {
			t.Fatalf("groups describe workers: %+v", gs)
		}
		return gs[0].Partitions[0].StartOffset
	}
	waitFor(t, "the share-partition start offset at 4", func() bool { s := startOf(); return s != nil && *s == 4 })

	fails(t, 1, `^tandem groups reset-offsets: group workers has 1 member\(s\)`, append([]string{"groups", "reset-offsets", "workers", "--topic", "jobs", "--to-earliest", "--execute"}, bs...)...)
	member.Close()
	waitFor(t, "workers empty", func() bool {
		var gs []describedGroup
		out := ok(t, "", append([]string{"groups", "describe", "workers", "--json"}, bs...)...)
		return json.Unmarshal([]byte(out), &gs) == nil && len(gs) == 1 && len(gs[0].Members) == 0
	})
	cmd("", "groups", "reset-offsets", "workers", "--topic", "jobs", "--to-offset", "1", "--execute")
	if s := startOf(); s == nil || *s != 1 {
		t.Fatalf("start offset after --to-offset 1 --execute: %v", cli.OrDash(s))
	}
}

// TestClusterHealth: tandem cluster health exits 0 on a whole cluster,
// 1 naming the broker and the under-replicated partitions with one
// broker down, and 0 again once it is back.
func TestClusterHealth(t *testing.T) {
	tandemtest.Long(t)
	c := tandemtest.StartCluster(t, 3, nil)
	bs := []string{"--bootstrap-server", strings.Join(c.Addrs(), ",")}
	ok(t, "", append([]string{"topics", "create", "rf3", "--partitions", "3"}, bs...)...)
	healthy := func() (int, clusterState) {
		r := tandemCLI(t, "", append([]string{"cluster", "health", "--json"}, bs...)...)
		var s clusterState
		if r.code != 2 {
			unmarshal(t, r.stdout, &s)
		}
		return r.code, s
	}
	waitFor(t, "a healthy cluster", func() bool { code, _ := healthy(); return code == 0 })
	// A group's commit creates __consumer_offsets, three replicas of
	// 50 partitions: one broker down leaves every one under-replicated.
	ok(t, "x\n", append([]string{"produce", "rf3"}, bs...)...)
	ok(t, "", append([]string{"consume", "rf3", "--group", "g", "--from-beginning", "--count", "1"}, bs...)...)
	waitFor(t, "a healthy cluster with __consumer_offsets", func() bool { code, _ := healthy(); return code == 0 })

	c.Broker(3).Stop()
	var s clusterState
	waitFor(t, "health to see broker 3 gone", func() bool {
		var code int
		code, s = healthy()
		return code == 1 && len(s.UnderReplicated) == 3+50
	})
	if s.Healthy || len(s.Offline) != 0 {
		t.Fatalf("cluster health with broker 3 down: %+v", s)
	}
	for _, p := range s.UnderReplicated {
		if p.Topic != "rf3" && p.Topic != "__consumer_offsets" || len(p.ISR) != 2 || p.Leader == 3 {
			t.Fatalf("under-replicated %+v with broker 3 down", p)
		}
	}
	text := tandemCLI(t, "", append([]string{"cluster", "health"}, bs...)...)
	if text.code != 1 || !strings.Contains(text.stdout, "unhealthy") || !strings.Contains(text.stdout, "broker 3") {
		t.Fatalf("cluster health, text: exit %d\n%s", text.code, text.stdout)
	}
	// Issue 41: the user's partitions one line each, an internal topic
	// one line (not 50).
	if lines := strings.Count(text.stdout, "\n"); lines > 8 || !strings.Contains(text.stdout, "internal topic __consumer_offsets: 50 partition(s) under-replicated") ||
		strings.Count(text.stdout, "partition rf3/") != 3 {
		t.Fatalf("cluster health with broker 3 down, %d lines:\n%s\nwant rf3's 3 partitions one line each and __consumer_offsets in one line", lines, text.stdout)
	}

	c.Broker(3).Restart()
	waitFor(t, "a healthy cluster after the restart", func() bool { code, _ := healthy(); return code == 0 })
}
