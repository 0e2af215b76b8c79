package integration

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// What a new user found wrong in the operator's view and the first
// five minutes (issue 41): each test is one of the items.

// TestMirrorTopicRFDefault: a three-broker destination with neither
// default.replication.factor nor mirror.topic.replication.factor set
// gives a mirror topic three replicas (min(3, brokers)), not Kafka's
// default.replication.factor of 1: a DR copy that one broker kill makes
// unavailable is no DR copy. default.replication.factor, when set, still
// decides.
func TestMirrorTopicRFDefault(t *testing.T) {
	src := tandemtest.StartCluster(t, 1, clusterMirrorProps)
	unset := maps.Clone(clusterMirrorProps)
	unset["default.replication.factor"] = "" // the broker's own default, 1
	dst := tandemtest.StartCluster(t, 3, unset)
	createTopicRF(t, src, "events", 2, 1, nil)

	a := clusterAdmin(t, dst)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.CreateMirror(ctx, "dr", map[string]string{"bootstrap.servers": strings.Join(src.Addrs(), ",")}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	dst.WaitFor("the mirror on every broker", func(img *metadata.Image) bool { return img.Mirrors["dr"] != nil })
	retryCoord(t, "add topic", func() error { return a.AddTopicsToMirror(ctx, map[string]string{"events": "dr"}) })
	dst.WaitFor("the mirror topic", func(img *metadata.Image) bool { return img.Topics["events"] != nil })
	if got := replicaCounts(dst.Image(), "events"); len(got) != 2 || got[0] != 3 || got[1] != 3 {
		t.Fatalf("mirror topic replicas per partition on a three-broker destination with defaults: %v, want [3 3]", got)
	}
}
