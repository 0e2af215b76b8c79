package raftmeta

import (
	"testing"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// TestMirrorNameFollowsMembership: a topic's mirror.name is set in the
// batch that adds it to a mirror (a topic created by the mirror and one
// that existed, as on failback) and cleared in the batch that stops its
// membership, so no image shows a writable topic that names a mirror. A
// failback's loop check reads mirror.name on the other cluster: a
// separate clear, raced by a metadata sync that named the topic again,
// made it refuse a failed-over topic.
func TestMirrorNameFollowsMembership(t *testing.T) {
	n := newNode(t)
	c := n.c
	registerBrokers(t, c, 1)
	mustCreate(t, c, metadata.TopicSpec{Name: "existing", Partitions: 1, ReplicationFactor: 1})
	if err := c.CreateMirror(ctxT(t), "m", map[string]string{"bootstrap.servers": "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	existing := c.Image().Topics["existing"]
	created := uuid.Random()
	err := c.AddMirrorTopics(ctxT(t), "m", []metadata.TopicSpec{
		{Name: "existing", ID: existing.ID, Partitions: 1},
		{Name: "created", ID: created, Partitions: 2, ReplicationFactor: 1, Configs: map[string]string{"retention.ms": "1000"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Image()
	for _, name := range []string{"existing", "created"} {
		if got := img.Topics[name].Configs[metadata.MirrorNameConfig]; got != "m" || img.MirrorOf(name) != "m" {
			t.Fatalf("%s after AddMirrorTopics: mirror.name %q, mirrored by %q; want m and m", name, got, img.MirrorOf(name))
		}
	}
	if got := img.Topics["created"].Configs["retention.ms"]; got != "1000" {
		t.Fatalf("created topic's retention.ms %q, want the spec's 1000", got)
	}

	before := img.Index
	if err := c.StopMirrorTopic(ctxT(t), "m", "existing"); err != nil {
		t.Fatal(err)
	}
	img = c.Image()
	if got := img.Topics["existing"].Configs[metadata.MirrorNameConfig]; got != "" || img.MirrorOf("existing") != "" {
		t.Fatalf("after StopMirrorTopic: mirror.name %q, mirrored by %q; want both cleared", got, img.MirrorOf("existing"))
	}
	if img.Index != before+1 {
		t.Fatalf("StopMirrorTopic took log entries %d..%d, want one", before+1, img.Index)
	}
	if img.Topics["created"].Configs[metadata.MirrorNameConfig] != "m" {
		t.Fatalf("stopping one topic cleared the other's mirror.name")
	}

	// A stop of an older version left mirror.name set on a stopped
	// topic: stopping it again clears it, and changes nothing else.
	if err := c.AlterConfigs(ctxT(t), []metadata.ConfigChange{{Resource: metadata.ConfigResourceTopic, Name: "existing", Key: metadata.MirrorNameConfig, Value: strPtr("m")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.StopMirrorTopic(ctxT(t), "m", "existing"); err != nil {
		t.Fatal(err)
	}
	if got := c.Image().Topics["existing"].Configs[metadata.MirrorNameConfig]; got != "" {
		t.Fatalf("a second stop left mirror.name %q", got)
	}
	before = c.Image().Index
	if err := c.StopMirrorTopic(ctxT(t), "m", "existing"); err != nil || c.Image().Index != before {
		t.Fatalf("a stop of a stopped, cleared topic: err %v, index %d → %d; want nothing written", err, before, c.Image().Index)
	}
}

func strPtr(s string) *string { return &s }

// TestMirrorTopicSourceName: a mirror topic named otherwise than on its
// source (mirror.topic.prefix) keeps its source name through its stop,
// and one named the same records none.
func TestMirrorTopicSourceName(t *testing.T) {
	n := newNode(t)
	c := n.c
	registerBrokers(t, c, 1)
	if err := c.CreateMirror(ctxT(t), "m", map[string]string{"bootstrap.servers": "127.0.0.1:1", "mirror.topic.prefix": "a."}); err != nil {
		t.Fatal(err)
	}
	err := c.AddMirrorTopics(ctxT(t), "m", []metadata.TopicSpec{
		{Name: "a.orders", Source: "orders", ID: uuid.Random(), Partitions: 1, ReplicationFactor: 1},
		{Name: "same", Source: "same", ID: uuid.Random(), Partitions: 1, ReplicationFactor: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		m := c.Image().Mirrors["m"]
		if got := m.Topics["a.orders"].SourceName("a.orders"); got != "orders" {
			t.Fatalf("%s: a.orders's source name %q, want orders", when, got)
		}
		if mt := m.Topics["same"]; mt.Source != "" || mt.SourceName("same") != "same" {
			t.Fatalf("%s: same's source %q, want none (the same name)", when, mt.Source)
		}
		if by := m.BySource(); by["orders"] != "a.orders" || by["same"] != "same" {
			t.Fatalf("%s: BySource %v", when, by)
		}
	}
	check("added")
	if err := c.StopMirrorTopic(ctxT(t), "m", "a.orders"); err != nil {
		t.Fatal(err)
	}
	if !c.Image().Mirrors["m"].Topics["a.orders"].Stopped {
		t.Fatal("a.orders not stopped")
	}
	check("stopped")
}
