package integration

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/raftmeta"
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
func replicaCounts(img *raftmeta.Image, topic string) []int {
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
	dst.WaitFor("the mirror on every broker", func(img *raftmeta.Image) bool { return img.Mirrors["m"] != nil })
	retryCoord(t, "add topic", func() error { return a.AddTopicsToMirror(ctx, map[string]string{topic: "m"}) })
	dst.WaitFor("the mirror topic", func(img *raftmeta.Image) bool { return img.Topics[topic] != nil })
	if got := replicaCounts(dst.Image(), topic); len(got) != 2 || got[0] != 3 || got[1] != 3 {
		t.Fatalf("mirror topic replicas per partition: %v, want [3 3] (the destination's default.replication.factor, not the source's 1)", got)
	}
	waitClusterCaughtUp(t, src, dst, "m", topic, 2, time.Minute)

	// The destination leader of partition 0 dies: another replica leads
	// and copies on.
	dead := dst.Leader(topic, 0)
	dst.Broker(dead).Kill()
	dst.WaitFor("a new leader of partition 0", func(img *raftmeta.Image) bool {
		l := img.Topics[topic].Partitions[0].Leader
		return l >= 0 && l != dead
	})
	produceRange(t, src, topic, 200, 200)
	waitClusterCaughtUp(t, src, dst, "m", topic, 2, time.Minute)
	dst.Broker(dead).Restart()
	dst.WaitFor("every broker back", func(img *raftmeta.Image) bool {
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
	dst.WaitFor("mirror m2 on every broker", func(img *raftmeta.Image) bool { return img.Mirrors["m2"] != nil })
	retryCoord(t, "add topic to m2", func() error { return a.AddTopicsToMirror(ctx, map[string]string{other: "m2"}) })
	dst.WaitFor("m2's topic", func(img *raftmeta.Image) bool { return img.Topics[other] != nil })
	if got := replicaCounts(dst.Image(), other); len(got) != 1 || got[0] != 2 {
		t.Fatalf("m2's topic replicas: %v, want [2] (mirror.topic.replication.factor)", got)
	}
	waitClusterCaughtUp(t, src, dst, "m2", other, 1, time.Minute)
	dst.WaitFor("m2's topic configs synced", func(img *raftmeta.Image) bool {
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
	dst.WaitFor("three in-sync replicas of the mirror topic", func(img *raftmeta.Image) bool {
		p := img.Topics[other].Partitions[0]
		return len(p.Replicas) == 3 && len(p.ISR) == 3 && len(p.AddingReplicas) == 0
	})
	produceRange(t, src, other, 100, 100)
	waitClusterCaughtUp(t, src, dst, "m2", other, 1, time.Minute)
	sameOnEveryReplica(t, src, dst, other, 1)
}
