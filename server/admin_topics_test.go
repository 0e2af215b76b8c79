package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/server/config"
)

func newAdmin(t *testing.T, b *Broker) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newClient(t, b))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails the test unless code is want's code.
func wantCode(t *testing.T, what string, code int16, msg *string, want *kerr.Error) {
	t.Helper()
	if code != want.Code {
		m := ""
		if msg != nil {
			m = *msg
		}
		t.Errorf("%s: error code %v (%s), want %s", what, kerr.ErrorForCode(code), m, want.Message)
	}
}

func TestCreateTopics(t *testing.T) {
	b := startBroker(t, map[string]string{"num.partitions": "2"})
	adm, ctx := newAdmin(t, b), testCtx(t)

	resps, err := adm.CreateTopics(ctx, 3, 1, map[string]*string{"retention.ms": kadm.StringPtr("60000")}, "t1")
	if err != nil {
		t.Fatal(err)
	}
	r := resps["t1"]
	if r.Err != nil || r.NumPartitions != 3 || r.ReplicationFactor != 1 || r.ID == (kadm.TopicID{}) {
		t.Fatalf("create t1: %+v", r)
	}
	// The engine holds the partitions, with the topic config, as soon as
	// the response arrived.
	img := b.meta.Image()
	tp := img.Topics["t1"]
	if tp == nil || [16]byte(tp.ID) != [16]byte(r.ID) {
		t.Fatalf("image topic %+v, response ID %v", tp, r.ID)
	}
	for p := range int32(3) {
		ep := b.engine.Partition(engine.TopicID(tp.ID), p)
		if ep == nil {
			t.Fatalf("engine has no partition %d", p)
		}
		if got := ep.Config().RetentionMs; got != 60000 {
			t.Fatalf("partition %d retention.ms %d", p, got)
		}
	}

	// Defaults: num.partitions from the broker, RF -1.
	resps, err = adm.CreateTopics(ctx, -1, -1, nil, "t_2")
	if err != nil || resps["t_2"].Err != nil || resps["t_2"].NumPartitions != 2 {
		t.Fatalf("create t_2 with defaults: %v %+v", err, resps["t_2"])
	}

	for _, tc := range []struct {
		name    string
		parts   int32
		rf      int16
		configs map[string]*string
		want    *kerr.Error
		msg     string
	}{
		{"t1", 1, 1, nil, kerr.TopicAlreadyExists, "already exists"},
		{"bad/name", 1, 1, nil, kerr.InvalidTopicException, "illegal"},
		{"..", 1, 1, nil, kerr.InvalidTopicException, ""},
		{"t.2", 1, 1, nil, kerr.InvalidTopicException, "collides"},
		{"p0", 0, 1, nil, kerr.InvalidPartitions, "non-positive"},
		{"rf0", 1, 0, nil, kerr.InvalidReplicationFactor, "larger than 0"},
		{"rf3", 1, 3, nil, kerr.InvalidReplicationFactor, "only 1 broker"},
		{"cfg1", 1, 1, map[string]*string{"no.such.config": kadm.StringPtr("1")}, kerr.InvalidConfig, "Unknown topic config name: no.such.config"},
		{"cfg2", 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("sometimes")}, kerr.InvalidConfig, "Invalid value sometimes for configuration cleanup.policy"},
		{"cfg3", 1, 1, map[string]*string{"retention.ms": nil}, kerr.InvalidConfig, "Null value"},
	} {
		resps, err := adm.CreateTopics(ctx, tc.parts, tc.rf, tc.configs, tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := resps[tc.name]
		if !errors.Is(r.Err, tc.want) || !strings.Contains(r.ErrMessage, tc.msg) {
			t.Errorf("%s: got %v %q, want %s %q", tc.name, r.Err, r.ErrMessage, tc.want.Message, tc.msg)
		}
	}
	if img := b.meta.Image(); len(img.Topics) != 2 {
		t.Fatalf("failed creations left topics behind: %d topics", len(img.Topics))
	}
}

func TestCreateTopicsRaw(t *testing.T) {
	b := startBroker(t, nil)
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	req.TimeoutMillis = 5000
	add := func(name string, parts int32, rf int16, assign ...[]int32) {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, rf
		for i, a := range assign {
			ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			ra.Partition, ra.Replicas = int32(i), a
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
		}
		req.Topics = append(req.Topics, rt)
	}
	add("dup", 1, 1)
	add("dup", 2, 1)
	add("assigned", -1, -1, []int32{1}, []int32{1})
	add("assign-and-count", 2, -1, []int32{1})
	add("assign-unknown-broker", -1, -1, []int32{7})
	add("assign-twice", -1, -1, []int32{1, 1})
	add("assign-empty", -1, -1, []int32{})
	resp := rawRequest(t, b.Addr(), req).(*kmsg.CreateTopicsResponse)
	got := map[string]kmsg.CreateTopicsResponseTopic{}
	for _, rt := range resp.Topics {
		if _, ok := got[rt.Topic]; ok {
			t.Errorf("topic %s answered twice", rt.Topic)
		}
		got[rt.Topic] = rt
	}
	for name, want := range map[string]*kerr.Error{
		"dup": kerr.InvalidRequest, "assign-and-count": kerr.InvalidRequest,
		"assign-unknown-broker": kerr.InvalidReplicaAssignment, "assign-twice": kerr.InvalidReplicaAssignment,
		"assign-empty": kerr.InvalidReplicaAssignment,
	} {
		rt := got[name]
		wantCode(t, name, rt.ErrorCode, rt.ErrorMessage, want)
		if rt.ErrorMessage == nil || rt.NumPartitions != -1 || rt.ReplicationFactor != -1 {
			t.Errorf("%s: message %v, partitions %d, RF %d", name, rt.ErrorMessage, rt.NumPartitions, rt.ReplicationFactor)
		}
	}
	a := got["assigned"]
	if a.ErrorCode != 0 || a.NumPartitions != 2 || a.ReplicationFactor != 1 || a.TopicID == [16]byte{} {
		t.Fatalf("assigned: %+v", a)
	}
	// v5+ returns the topic's configs like DescribeConfigs.
	configs := map[string]kmsg.CreateTopicsResponseTopicConfig{}
	for _, c := range a.Configs {
		configs[c.Name] = c
	}
	if c, ok := configs["cleanup.policy"]; !ok || c.Value == nil || *c.Value != "delete" || c.Source != int8(kmsg.ConfigSourceDefaultConfig) {
		t.Fatalf("cleanup.policy in CreateTopics response: %+v", c)
	}
	if len(configs) != len(config.TopicList) {
		t.Fatalf("%d configs returned, want %d", len(configs), len(config.TopicList))
	}

	// validate_only answers as if created and creates nothing.
	req = kmsg.NewPtrCreateTopicsRequest()
	req.Version, req.ValidateOnly = 5, true
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "validated", 4, 1
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name, c.Value = "retention.ms", kmsg.StringPtr("1000")
	rt.Configs = append(rt.Configs, c)
	req.Topics = append(req.Topics, rt)
	vr := rawRequest(t, b.Addr(), req).(*kmsg.CreateTopicsResponse)
	if v := vr.Topics[0]; v.ErrorCode != 0 || v.NumPartitions != 4 || len(v.Configs) == 0 {
		t.Fatalf("validate only: %+v", v)
	}
	for _, c := range vr.Topics[0].Configs {
		if c.Name == "retention.ms" && (*c.Value != "1000" || c.Source != int8(kmsg.ConfigSourceDynamicTopicConfig)) {
			t.Fatalf("validate only retention.ms: %v from %d", *c.Value, c.Source)
		}
	}
	if b.meta.Image().Topics["validated"] != nil {
		t.Fatal("validate_only created the topic")
	}
}

func TestCreateTopicsAuto(t *testing.T) {
	b := startBroker(t, map[string]string{"num.partitions": "3"})
	ctx := testCtx(t)
	b.admin.CreateTopicsAuto(ctx, []string{"auto1", "auto1", "bad name", "auto2"})
	img := b.meta.Image()
	if img.Topics["bad name"] != nil {
		t.Fatal("invalid name auto-created")
	}
	for _, name := range []string{"auto1", "auto2"} {
		tp := img.Topics[name]
		if tp == nil || len(tp.Partitions) != 3 {
			t.Fatalf("%s: %+v", name, tp)
		}
		if b.engine.Partition(engine.TopicID(tp.ID), 2) == nil {
			t.Fatalf("%s: engine partition missing after CreateTopicsAuto", name)
		}
	}
	b.admin.CreateTopicsAuto(ctx, []string{"auto1"}) // exists: a no-op
	if b.meta.Image().Topics["auto1"].ID != img.Topics["auto1"].ID {
		t.Fatal("auto-create replaced an existing topic")
	}
}

func TestDeleteTopics(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 2, 1, nil, "d1", "d2", "d3"); err != nil {
		t.Fatal(err)
	}
	d1 := b.meta.Image().Topics["d1"]
	resps, err := adm.DeleteTopics(ctx, "d1", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if r := resps["d1"]; r.Err != nil {
		t.Fatalf("delete d1: %v", r.Err)
	}
	if r := resps["missing"]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("delete missing: %v", r.Err)
	}
	if b.meta.Image().Topics["d1"] != nil || b.engine.Partition(engine.TopicID(d1.ID), 0) != nil {
		t.Fatal("d1 still exists after delete")
	}

	// v6: by ID, by name, unknown ID, both set, duplicates.
	d2 := b.meta.Image().Topics["d2"]
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.Version = 6
	addT := func(name *string, id [16]byte) {
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic, rt.TopicID = name, id
		req.Topics = append(req.Topics, rt)
	}
	addT(nil, d2.ID)
	addT(nil, [16]byte{9})
	addT(kmsg.StringPtr("d3"), d2.ID)
	addT(kmsg.StringPtr("d3"), [16]byte{})
	addT(kmsg.StringPtr("d3"), [16]byte{})
	resp := rawRequest(t, b.Addr(), req).(*kmsg.DeleteTopicsResponse)
	if len(resp.Topics) != 5 {
		t.Fatalf("%d results", len(resp.Topics))
	}
	r := resp.Topics
	if r[0].ErrorCode != 0 || r[0].Topic == nil || *r[0].Topic != "d2" || r[0].TopicID != d2.ID {
		t.Fatalf("delete by ID: %+v", r[0])
	}
	wantCode(t, "unknown ID", r[1].ErrorCode, r[1].ErrorMessage, kerr.UnknownTopicID)
	wantCode(t, "name and ID", r[2].ErrorCode, r[2].ErrorMessage, kerr.InvalidRequest)
	// The first d3 is deleted, the second is a duplicate.
	if r[3].ErrorCode != 0 {
		t.Fatalf("delete d3: %+v", r[3])
	}
	wantCode(t, "duplicate", r[4].ErrorCode, r[4].ErrorMessage, kerr.InvalidRequest)
	if n := len(b.meta.Image().Topics); n != 0 {
		t.Fatalf("%d topics left", n)
	}
	// The name can be reused, with a new ID.
	cr, err := adm.CreateTopics(ctx, 1, 1, nil, "d1")
	if err != nil || cr["d1"].Err != nil || [16]byte(cr["d1"].ID) == d1.ID {
		t.Fatalf("re-create d1: %v %+v", err, cr["d1"])
	}
}

func TestDeleteTopicsDisabled(t *testing.T) {
	b := startBroker(t, map[string]string{"delete.topic.enable": "false"})
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "keep"); err != nil {
		t.Fatal(err)
	}
	resps, err := adm.DeleteTopics(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(resps["keep"].Err, kerr.TopicDeletionDisabled) || b.meta.Image().Topics["keep"] == nil {
		t.Fatalf("delete with delete.topic.enable=false: %v", resps["keep"].Err)
	}
}

func TestCreatePartitions(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 2, 1, nil, "grow"); err != nil {
		t.Fatal(err)
	}
	resps, err := adm.UpdatePartitions(ctx, 5, "grow")
	if err != nil || resps["grow"].Err != nil {
		t.Fatalf("grow to 5: %v %+v", err, resps["grow"])
	}
	tp := b.meta.Image().Topics["grow"]
	if len(tp.Partitions) != 5 || b.engine.Partition(engine.TopicID(tp.ID), 4) == nil {
		t.Fatalf("after growing: %d partitions", len(tp.Partitions))
	}
	for _, tc := range []struct {
		topic string
		count int
		want  *kerr.Error
	}{
		{"grow", 5, kerr.InvalidPartitions},
		{"grow", 3, kerr.InvalidPartitions},
		{"missing", 3, kerr.UnknownTopicOrPartition},
	} {
		resps, err := adm.UpdatePartitions(ctx, tc.count, tc.topic)
		if err != nil {
			t.Fatal(err)
		}
		if r := resps[tc.topic]; !errors.Is(r.Err, tc.want) || r.ErrMessage == "" {
			t.Errorf("%s to %d: %v %q, want %s", tc.topic, tc.count, r.Err, r.ErrMessage, tc.want.Message)
		}
	}

	req := kmsg.NewPtrCreatePartitionsRequest()
	req.Version, req.ValidateOnly = 3, true
	add := func(count int32, assign ...[]int32) {
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = "grow", count
		for _, a := range assign {
			ra := kmsg.NewCreatePartitionsRequestTopicAssignment()
			ra.Replicas = a
			rt.Assignment = append(rt.Assignment, ra)
		}
		req.Topics = append(req.Topics, rt)
	}
	add(7, []int32{1}, []int32{1})
	resp := rawRequest(t, b.Addr(), req).(*kmsg.CreatePartitionsResponse)
	if resp.Topics[0].ErrorCode != 0 || len(b.meta.Image().Topics["grow"].Partitions) != 5 {
		t.Fatalf("validate only: %+v", resp.Topics[0])
	}
	for _, assign := range [][][]int32{{{1}}, {{1}, {2}}, {{1, 1}, {1}}, {{}, {1}}} {
		req.Topics = nil
		add(7, assign...)
		resp = rawRequest(t, b.Addr(), req).(*kmsg.CreatePartitionsResponse)
		wantCode(t, "assignment", resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage, kerr.InvalidReplicaAssignment)
	}
	req.Topics = nil
	add(7)
	add(8)
	resp = rawRequest(t, b.Addr(), req).(*kmsg.CreatePartitionsResponse)
	if len(resp.Topics) != 1 {
		t.Fatalf("duplicates answered %d times", len(resp.Topics))
	}
	wantCode(t, "duplicate", resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage, kerr.InvalidRequest)
}
