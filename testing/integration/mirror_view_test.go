package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// The operator's view in a disaster (issue 27): what the destination
// decides for its copies, and what every view says when a side is down.

// createTopicRF creates a topic with a replication factor of its own.
func createTopicRF(t *testing.T, c *tandemtest.Cluster, topic string, partitions int32, rf int16, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, rf, configs, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	for p := range partitions {
		c.Leader(topic, p)
	}
}

// replicaCounts is the number of replicas of each partition of topic.
func replicaCounts(img *metadata.Image, topic string) []int {
	tp := img.Topics[topic]
	if tp == nil {
		return nil
	}
	var out []int
	for _, p := range tp.Partitions {
		out = append(out, len(p.Replicas))
	}
	return out
}

// TestMirrorTopicReplicationFactor: a mirror topic gets the destination's
// replication factor (default.replication.factor, or the mirror's
// mirror.topic.replication.factor), not the source's. A source topic of
// one replica mirrored into a three-broker destination has three there,
// so a destination broker killed leaves every partition led and copied;
// mirror topics are moved with reassignment like any other.
func TestMirrorTopicReplicationFactor(t *testing.T) {
	tandemtest.Long(t) // two clusters, a broker killed: the full tier only
	srcProps := maps.Clone(clusterMirrorProps)
	srcProps["default.replication.factor"] = "1"
	src := tandemtest.StartCluster(t, 1, srcProps)
	dst := tandemtest.StartCluster(t, 3, clusterMirrorProps) // default.replication.factor 3
	const topic = "one-replica"
	createTopicRF(t, src, topic, 2, 1, nil)
	produceRange(t, src, topic, 0, 200)

	a := clusterAdmin(t, dst)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bootstrap := strings.Join(src.Addrs(), ",")
	for _, bad := range []string{"0", "-1", "x", "40000"} {
		err := a.CreateMirror(ctx, "bad", map[string]string{"bootstrap.servers": bootstrap, "mirror.topic.replication.factor": bad})
		if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), "mirror.topic.replication.factor") {
			t.Fatalf("mirror.topic.replication.factor=%s: %v, want INVALID_CONFIG naming the key", bad, err)
		}
	}
	if err := a.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": bootstrap}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	dst.WaitFor("the mirror on every broker", func(img *metadata.Image) bool { return img.Mirrors["m"] != nil })
	retryCoord(t, "add topic", func() error { return a.AddTopicsToMirror(ctx, map[string]string{topic: "m"}) })
	dst.WaitFor("the mirror topic", func(img *metadata.Image) bool { return img.Topics[topic] != nil })
	if got := replicaCounts(dst.Image(), topic); len(got) != 2 || got[0] != 3 || got[1] != 3 {
		t.Fatalf("mirror topic replicas per partition: %v, want [3 3] (the destination's default.replication.factor, not the source's 1)", got)
	}
	waitClusterCaughtUp(t, src, dst, "m", topic, 2, time.Minute)

	// The destination leader of partition 0 dies: another replica leads
	// and copies on.
	dead := dst.Leader(topic, 0)
	dst.Broker(dead).Kill()
	dst.WaitFor("a new leader of partition 0", func(img *metadata.Image) bool {
		l := img.Topics[topic].Partitions[0].Leader
		return l >= 0 && l != dead
	})
	produceRange(t, src, topic, 200, 200)
	waitClusterCaughtUp(t, src, dst, "m", topic, 2, time.Minute)
	dst.Broker(dead).Restart()
	dst.WaitFor("every broker back", func(img *metadata.Image) bool {
		for _, b := range img.Brokers {
			if !b.Live() {
				return false
			}
		}
		return len(img.Brokers) == 3
	})

	// A mirror of its own replication factor, shown and altered as its
	// other configs are. It syncs every topic config but
	// min.insync.replicas, which goes with the replication factor: the
	// destination's.
	const other = "two-replicas"
	createTopicRF(t, src, other, 1, 1, map[string]*string{"min.insync.replicas": kadm.StringPtr("1"), "retention.ms": kadm.StringPtr("3600000")})
	produceRange(t, src, other, 0, 100)
	if err := a.CreateMirror(ctx, "m2", map[string]string{"bootstrap.servers": bootstrap, "mirror.topic.replication.factor": "2",
		"mirror.topic.properties.exclude": ""}); err != nil {
		t.Fatalf("create mirror m2: %v", err)
	}
	cfgs, err := a.DescribeMirrorConfigs(ctx, "m2")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cfgs {
		found = found || c.Name == "mirror.topic.replication.factor" && c.Value != nil && *c.Value == "2"
	}
	if !found {
		t.Fatalf("m2's configs %+v lack mirror.topic.replication.factor=2", cfgs)
	}
	dst.WaitFor("mirror m2 on every broker", func(img *metadata.Image) bool { return img.Mirrors["m2"] != nil })
	retryCoord(t, "add topic to m2", func() error { return a.AddTopicsToMirror(ctx, map[string]string{other: "m2"}) })
	dst.WaitFor("m2's topic", func(img *metadata.Image) bool { return img.Topics[other] != nil })
	if got := replicaCounts(dst.Image(), other); len(got) != 1 || got[0] != 2 {
		t.Fatalf("m2's topic replicas: %v, want [2] (mirror.topic.replication.factor)", got)
	}
	waitClusterCaughtUp(t, src, dst, "m2", other, 1, time.Minute)
	dst.WaitFor("m2's topic configs synced", func(img *metadata.Image) bool {
		return img.Topics[other].Configs["retention.ms"] == "3600000"
	})
	if v, ok := dst.Image().Topics[other].Configs["min.insync.replicas"]; ok {
		t.Fatalf("m2's topic has the source's min.insync.replicas=%s; the destination keeps its own", v)
	}
	adm := kadm.NewClient(tandemtest.Client(t, dst.Addrs()[0], kgo.SeedBrokers(dst.Addrs()...)))
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: kadm.StringPtr("2")}}, other)
	if err == nil {
		err = alterErr(rs)
	}
	if err != nil {
		t.Fatalf("set min.insync.replicas on the mirror topic: %v", err)
	}

	// Reassignment moves a mirror topic to three replicas: the new one
	// catches up from the leader, and mirroring goes on.
	tp := dst.Image().Topics[other]
	replicas := append([]int32(nil), tp.Partitions[0].Replicas...)
	for id := int32(1); id <= 3; id++ {
		if !slices.Contains(replicas, id) {
			replicas = append(replicas, id)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addrs()...), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(other, 0, replicas)
	resps, err := kadm.NewClient(cl).AlterPartitionAssignments(ctx, req)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("reassign %s-0 to %v: %v", other, replicas, err)
	}
	dst.WaitFor("three in-sync replicas of the mirror topic", func(img *metadata.Image) bool {
		p := img.Topics[other].Partitions[0]
		return len(p.Replicas) == 3 && len(p.ISR) == 3 && len(p.AddingReplicas) == 0
	})
	produceRange(t, src, other, 100, 100)
	waitClusterCaughtUp(t, src, dst, "m2", other, 1, time.Minute)
	sameOnEveryReplica(t, src, dst, other, 1)
}

// describeJSON runs `tandem mirrors --describe --json` and returns its
// exit code and the mirrors it printed, as generic JSON (so that a key
// that is missing reads as missing, not as false).
func describeJSON(t *testing.T, addr string, args ...string) (int, []map[string]any, string) {
	t.Helper()
	code, out, errOut := runMirrors(t, append([]string{"--bootstrap-server", addr, "--describe", "--json"}, args...)...)
	var ms []map[string]any
	if out != "" {
		if err := json.Unmarshal([]byte(out), &ms); err != nil {
			t.Fatalf("--describe --json: %v\n%s", err, out)
		}
	}
	return code, ms, errOut
}

// jsonPartitions are the partitions of a described mirror.
func jsonPartitions(m map[string]any) []map[string]any {
	var out []map[string]any
	ps, _ := m["partitions"].([]any)
	for _, p := range ps {
		out = append(out, p.(map[string]any))
	}
	return out
}

// consoleMirror is one mirror of a broker's /api/mirrors.
func consoleMirror(t *testing.T, httpAddr, name string) map[string]any {
	t.Helper()
	_, body := httpGet(t, "http://"+httpAddr+"/api/mirrors")
	var ms []map[string]any
	if err := json.Unmarshal([]byte(body), &ms); err != nil {
		t.Fatalf("/api/mirrors: %v\n%s", err, body)
	}
	for _, m := range ms {
		if m["name"] == name {
			return m
		}
	}
	return nil
}

// TestMirrorViewsWithTheSourceDown kills the source of a caught-up mirror
// and asks every view: --describe (and --json) says the source is
// unreachable, that the lag is a lower bound (rpo_known false) and why,
// and exits 1; the console says "at least" rather than an RPO of 0, and
// its partition badges are not green under a FAILED mirror; /healthz
// names the source. A forced failover says that what it gave up is a
// lower bound; afterwards the mirror and its partitions are STOPPED and
// /healthz is quiet; a second failover answers where the first left each
// partition, with exit 0. A --topic that matches nothing is an error.
func TestMirrorViewsWithTheSourceDown(t *testing.T) {
	src := tandemtest.StartProcess(t, t.TempDir(), "--set", "offsets.topic.num.partitions=2", "--set", "mirror.topic.num.partitions=2")
	createTopicOn(t, src.Addr, "orders", 2)
	produceN(t, src.Addr, "orders", 2, 100)
	dst := tandemtest.StartProcess(t, t.TempDir(), "--set", "mirror.topic.num.partitions=2", "--set", "offsets.topic.num.partitions=2",
		"--set", "replica.fetch.wait.max.ms=200", "--set", "mirror.replica.fetch.backoff.ms=200", "--set", "mirror.request.timeout.ms=3000",
		"--set", "mirror.socket.connection.setup.timeout.ms=1000")
	if code, out, errOut := runMirrors(t, "--bootstrap-server", dst.Addr, "--create", "--add", "--mirror", "m1",
		"--source-bootstrap", src.Addr, "--topic", "orders"); code != 0 {
		t.Fatalf("--create --add: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, 60*time.Second, "the mirror caught up, with a known RPO", func() bool {
		code, ms, _ := describeJSON(t, dst.Addr, "--mirror", "m1")
		if code != 0 || len(ms) != 1 || ms[0]["source_reachable"] != true {
			return false
		}
		ps := jsonPartitions(ms[0])
		for _, p := range ps {
			if p["state"] != "MIRRORING" || p["lag"] != 0.0 || p["rpo_known"] != true {
				return false
			}
		}
		return len(ps) == 2
	})
	if m := consoleMirror(t, dst.HTTPAddr, "m1"); m == nil || m["rpo"].(map[string]any)["known"] != true {
		t.Fatalf("console: %v, want an RPO known", m)
	}

	// A --topic that matches nothing is an error, not an empty table.
	code, out, errOut := runMirrors(t, "--bootstrap-server", dst.Addr, "--describe", "--mirror", "m1", "--topic", "nosuch")
	if code != 1 || !strings.Contains(errOut, "nosuch") {
		t.Fatalf("--describe --topic nosuch: exit %d, stdout %q, stderr %q; want exit 1 naming nosuch", code, out, errOut)
	}

	src.Kill9()
	var last string
	waitFor(t, 60*time.Second, "--describe to say the source is unreachable and the RPO not known", func() bool {
		code, ms, _ := describeJSON(t, dst.Addr, "--mirror", "m1")
		last = fmt.Sprint(code, ms)
		if code != 1 || len(ms) != 1 || ms[0]["source_reachable"] != false || ms[0]["state"] != "FAILED" {
			return false
		}
		for _, p := range jsonPartitions(ms[0]) {
			if p["rpo_known"] != false || p["reason"] == nil || p["lag"] == nil {
				return false
			}
		}
		return true
	})
	t.Logf("source down: %s", last)
	m := consoleMirror(t, dst.HTTPAddr, "m1")
	rpo := m["rpo"].(map[string]any)
	if m["state"] != "FAILED" || rpo["known"] != false || rpo["asOf"] == 0.0 {
		t.Fatalf("console with the source down: state %v, rpo %v; want FAILED, not known, as of when last learned", m["state"], rpo)
	}
	for _, p := range m["partitions"].([]any) {
		if pp := p.(map[string]any); pp["sourceStale"] != true || pp["reason"] == "" {
			t.Fatalf("console partition %v with the source down: want sourceStale and a reason", pp)
		}
	}
	_, health := httpGet(t, "http://"+dst.HTTPAddr+"/healthz")
	if !strings.Contains(health, "\nwarning: mirror m1: source "+src.Addr) {
		t.Fatalf("/healthz with the source down:\n%s\nwant a warning naming mirror m1's source %s", health, src.Addr)
	}
	if _, err := os.Stat(chromiumPath); err == nil {
		t.Logf("the mirrors page in %s", chromiumPath)
		var dom string
		waitFor(t, 90*time.Second, "the mirrors page to show the source down", func() bool {
			dom = chromium(t, "http://"+dst.HTTPAddr+"/#mirrors", "--dump-dom")
			return strings.Contains(dom, `data-rpo-known="false"`)
		})
		if !strings.Contains(dom, "at least") || strings.Contains(dom, `class="badge ok" data-state="MIRRORING"`) ||
			!strings.Contains(dom, `data-problem="source unreachable"`) {
			t.Fatalf("the mirrors page with the source down shows a green partition or an RPO without \"at least\":\n%s", dom)
		}
	}

	// Forced failover: what it gave up is a lower bound.
	code, out, errOut = runMirrors(t, "--bootstrap-server", dst.Addr, "--describe", "--mirror", "m1")
	t.Logf("--describe with the source down: exit %d\n%s%s", code, out, errOut)
	code, out, errOut = runMirrors(t, "--bootstrap-server", dst.Addr, "--failover", "--mirror", "m1", "--force", "--timeout", "5s")
	if code != 0 || !strings.Contains(out, "last learned") || !strings.Contains(out, ">=") {
		t.Fatalf("--failover --force with the source down: exit %d\n%s%s\nwant the lag as a lower bound, with when the source end was last learned", code, out, errOut)
	}
	t.Logf("--failover --force:\n%s", out)
	stops := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 7 && f[0] == "orders" {
			stops[f[1]] = f[len(f)-3] // DESTINATION-OFFSET
		}
	}
	if len(stops) != 2 {
		t.Fatalf("--failover --force: no destination offset of both partitions in\n%s", out)
	}
	waitFor(t, 30*time.Second, "the failed-over mirror to show STOPPED", func() bool {
		code, ms, _ := describeJSON(t, dst.Addr, "--mirror", "m1")
		if code != 0 || len(ms) != 1 || ms[0]["state"] != "STOPPED" {
			return false
		}
		for _, p := range jsonPartitions(ms[0]) {
			if p["state"] != "STOPPED" {
				return false
			}
		}
		return true
	})
	if m := consoleMirror(t, dst.HTTPAddr, "m1"); m["state"] != "STOPPED" {
		t.Fatalf("console after the failover: mirror %v, want STOPPED", m["state"])
	}
	if _, health := httpGet(t, "http://"+dst.HTTPAddr+"/healthz"); strings.Contains(health, "mirror m1") {
		t.Fatalf("/healthz after the failover still warns of m1's source:\n%s", health)
	}

	// Again: it was done, here is where.
	code, out, errOut = runMirrors(t, "--bootstrap-server", dst.Addr, "--failover", "--mirror", "m1", "--force")
	if code != 0 || !strings.Contains(out, "failed over already") {
		t.Fatalf("a second --failover: exit %d\n%s%s\nwant exit 0 saying it was failed over already", code, out, errOut)
	}
	for p, at := range stops {
		if !strings.Contains(out, fmt.Sprintf("partition %s at offset %s", p, at)) {
			t.Fatalf("a second --failover does not say partition %s stopped at offset %s:\n%s", p, at, out)
		}
	}
}

// createTopicOn creates a topic of one replica on the cluster at addr.
func createTopicOn(t *testing.T, addr, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(tandemtest.Client(t, addr)).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// A mirror created through one broker is known at once to every other:
// describing it, its configs or its list on another broker right after
// the create never answers MIRROR_NOT_FOUND (read your writes across
// brokers, as an operator's next command expects).
func TestMirrorReadYourWrites(t *testing.T) {
	tandemtest.Long(t) // two clusters: the full tier only
	src := tandemtest.StartCluster(t, 1, clusterMirrorProps)
	dst := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addrs()...), admin.Opt())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrap := strings.Join(src.Addrs(), ",")
	via := func(i int) *kgo.Broker { return cl.Broker(int(dst.Brokers[i%3].ID)) }
	for i := range 30 {
		name := fmt.Sprintf("ryw-%d", i)
		create := &mirrorproto.CreateMirrorRequest{MirrorName: &name, Configs: []mirrorproto.MirrorConfig{{Name: "bootstrap.servers", Value: &bootstrap}}}
		resp, err := via(i).Request(ctx, create)
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.(*mirrorproto.CreateMirrorResponse); r.ErrorCode != 0 {
			t.Fatalf("create %s: %v", name, admin.ErrorOf(r.ErrorCode, r.ErrorMessage))
		}

		describe := kmsg.NewPtrDescribeConfigsRequest()
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceType(64), name
		describe.Resources = append(describe.Resources, res)
		dresp, err := via(i+1).Request(ctx, describe)
		if err != nil {
			t.Fatal(err)
		}
		r := dresp.(*kmsg.DescribeConfigsResponse).Resources[0]
		if err := admin.ErrorOf(r.ErrorCode, r.ErrorMessage); err != nil {
			t.Fatalf("configs of %s on broker %d right after its create on broker %d: %v", name, dst.Brokers[(i+1)%3].ID, dst.Brokers[i%3].ID, err)
		}

		list, err := via(i+2).Request(ctx, &mirrorproto.DescribeMirrorsRequest{MirrorNames: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range list.(*mirrorproto.DescribeMirrorsResponse).Mirrors {
			if m.ErrorCode != 0 {
				t.Fatalf("describe %s on broker %d right after its create on broker %d: %v", name, dst.Brokers[(i+2)%3].ID, dst.Brokers[i%3].ID, admin.ErrorOf(m.ErrorCode, m.ErrorMessage))
			}
		}

		if i%2 == 0 { // a list right after a create, or right after a delete
			del := mirrorproto.NewDeleteMirrorRequest()
			del.MirrorName = name
			resp, err = via(i+1).Request(ctx, del)
			if err != nil {
				t.Fatal(err)
			}
			if r := resp.(*mirrorproto.MirrorTopicsResponse); r.ErrorCode != 0 {
				t.Fatalf("delete %s: %v", name, admin.ErrorOf(r.ErrorCode, r.ErrorMessage))
			}
		}
		listed, err := via(i+2).Request(ctx, &mirrorproto.ListMirrorsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		found := slices.ContainsFunc(listed.(*mirrorproto.ListMirrorsResponse).Mirrors, func(m mirrorproto.ListedMirror) bool { return m.MirrorName == name })
		if found != (i%2 == 1) {
			t.Fatalf("ListMirrors on broker %d lists %s: %v, want %v (deleted: %v)", dst.Brokers[(i+2)%3].ID, name, found, i%2 == 1, i%2 == 0)
		}
	}
}
