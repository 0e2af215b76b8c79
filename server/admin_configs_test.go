package server

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
)

// topicConfig describes one config of a topic through kadm.
func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe %s: %v %v", topic, err, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("%s has no config %s", topic, key)
	return kadm.Config{}
}

func TestDescribeTopicConfigs(t *testing.T) {
	b := startBroker(t, map[string]string{"log.retention.hours": "2", "message.max.bytes": "5000"})
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "dc"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, value string
		source     kmsg.ConfigSource
	}{
		{"cleanup.policy", "compact", kmsg.ConfigSourceDynamicTopicConfig},
		{"retention.ms", strconv.Itoa(2 * 3600 * 1000), kmsg.ConfigSourceStaticBrokerConfig},
		{"max.message.bytes", "5000", kmsg.ConfigSourceStaticBrokerConfig},
		{"segment.bytes", "1073741824", kmsg.ConfigSourceDefaultConfig},
		{"message.timestamp.type", "CreateTime", kmsg.ConfigSourceDefaultConfig},
	} {
		c := topicConfig(t, adm, "dc", tc.key)
		if c.MaybeValue() != tc.value || c.Source != tc.source {
			t.Errorf("%s = %q from %v, want %q from %v", tc.key, c.MaybeValue(), c.Source, tc.value, tc.source)
		}
	}
	// kadm asks for synonyms: the static broker key, then the default.
	c := topicConfig(t, adm, "dc", "retention.ms")
	if len(c.Synonyms) != 2 || c.Synonyms[0].Key != "log.retention.hours" || *c.Synonyms[0].Value != "2" ||
		c.Synonyms[1].Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("retention.ms synonyms: %+v", c.Synonyms)
	}

	// Raw: documentation, types, filtered names, errors per resource.
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Version, req.IncludeDocumentation = 4, true
	add := func(typ kmsg.ConfigResourceType, name string, keys ...string) {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.ConfigNames = typ, name, keys
		req.Resources = append(req.Resources, r)
	}
	add(kmsg.ConfigResourceTypeTopic, "dc", "retention.bytes", "no.such.key")
	add(kmsg.ConfigResourceTypeTopic, "missing")
	add(kmsg.ConfigResourceTypeTopic, "bad name")
	add(kmsg.ConfigResourceTypeBrokerLogger, "1")
	add(kmsg.ConfigResourceTypeBroker, "42")
	resp := rawRequest(t, b.Addr(), req).(*kmsg.DescribeConfigsResponse)
	r := resp.Resources
	if len(r) != 5 || r[0].ErrorCode != 0 || len(r[0].Configs) != 1 {
		t.Fatalf("filtered describe: %+v", r)
	}
	rb := r[0].Configs[0]
	if rb.Name != "retention.bytes" || *rb.Value != "-1" || rb.ConfigType != kmsg.ConfigTypeLong || rb.Documentation == nil || rb.ReadOnly {
		t.Fatalf("retention.bytes: %+v", rb)
	}
	wantCode(t, "missing topic", r[1].ErrorCode, r[1].ErrorMessage, kerr.UnknownTopicOrPartition)
	wantCode(t, "bad name", r[2].ErrorCode, r[2].ErrorMessage, kerr.InvalidTopicException)
	wantCode(t, "broker logger", r[3].ErrorCode, r[3].ErrorMessage, kerr.InvalidRequest)
	wantCode(t, "other broker", r[4].ErrorCode, r[4].ErrorMessage, kerr.InvalidRequest)
}

func TestDescribeBrokerConfigs(t *testing.T) {
	b := startBroker(t, map[string]string{"num.partitions": "4"})
	adm, ctx := newAdmin(t, b), testCtx(t)
	rcs, err := adm.DescribeBrokerConfigs(ctx, b.cfg.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]kadm.Config{}
	for _, c := range rcs[0].Configs {
		got[c.Key] = c
	}
	if c := got["num.partitions"]; c.MaybeValue() != "4" || c.Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Fatalf("num.partitions: %+v", c)
	}
	if c := got["log.retention.hours"]; c.MaybeValue() != "168" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("log.retention.hours: %+v", c)
	}
	if c := got["node.id"]; c.MaybeValue() != strconv.Itoa(int(b.cfg.NodeID)) {
		t.Fatalf("node.id: %+v", c)
	}
	// The cluster default resource holds only dynamic configs: none yet.
	rcs, err = adm.DescribeBrokerConfigs(ctx)
	if err != nil || rcs[0].Err != nil || len(rcs[0].Configs) != 0 {
		t.Fatalf("cluster default: %v %+v", err, rcs)
	}
}

func TestIncrementalAlterTopicConfigs(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 2, 1, nil, "ia"); err != nil {
		t.Fatal(err)
	}
	alter := func(ops ...kadm.AlterConfig) kadm.AlterConfigsResponse {
		t.Helper()
		resps, err := adm.AlterTopicConfigs(ctx, ops, "ia")
		if err != nil {
			t.Fatal(err)
		}
		return resps[0]
	}
	r := alter(kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("12345")},
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "message.timestamp.type", Value: kadm.StringPtr("LogAppendTime")})
	if r.Err != nil {
		t.Fatalf("set: %v %s", r.Err, r.ErrMessage)
	}
	tp := b.meta.Image().Topics["ia"]
	cfg := b.engine.Partition(engine.TopicID(tp.ID), 1).Config()
	if cfg.RetentionMs != 12345 || !cfg.LogAppendTime {
		t.Fatalf("engine config after alter: %+v", cfg)
	}
	if c := topicConfig(t, adm, "ia", "retention.ms"); c.MaybeValue() != "12345" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("described retention.ms: %+v", c)
	}

	// APPEND starts from the default list; SUBTRACT removes.
	if r := alter(kadm.AlterConfig{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")}); r.Err != nil {
		t.Fatalf("append: %v %s", r.Err, r.ErrMessage)
	}
	if c := topicConfig(t, adm, "ia", "cleanup.policy"); c.MaybeValue() != "delete,compact" {
		t.Fatalf("after append: %q", c.MaybeValue())
	}
	if r := alter(kadm.AlterConfig{Op: kadm.SubtractConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}); r.Err != nil {
		t.Fatalf("subtract: %v %s", r.Err, r.ErrMessage)
	}
	if cfg := b.engine.Partition(engine.TopicID(tp.ID), 0).Config(); !cfg.Compact || cfg.Delete {
		t.Fatalf("engine after subtract: %+v", cfg)
	}
	// DELETE falls back to the default.
	if r := alter(kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if c := topicConfig(t, adm, "ia", "retention.ms"); c.MaybeValue() != "604800000" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("after delete: %+v", c)
	}

	for _, tc := range []struct {
		op   kadm.AlterConfig
		want *kerr.Error
		msg  string
	}{
		{kadm.AlterConfig{Op: kadm.SetConfig, Name: "nope", Value: kadm.StringPtr("1")}, kerr.InvalidConfig, "Unknown topic config name: nope"},
		{kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("x")}, kerr.InvalidConfig, "Invalid value x for configuration retention.ms"},
		{kadm.AlterConfig{Op: kadm.AppendConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}, kerr.InvalidConfig, "append is not allowed"},
		{kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms"}, kerr.InvalidRequest, "Null value"},
	} {
		r := alter(tc.op)
		if !errors.Is(r.Err, tc.want) || !strings.Contains(r.ErrMessage, tc.msg) {
			t.Errorf("%+v: %v %q, want %s %q", tc.op, r.Err, r.ErrMessage, tc.want.Message, tc.msg)
		}
	}
	// validate_only changes nothing; unknown topics are reported.
	resps, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}}, "ia", "missing")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resps {
		if r.Name == "ia" && r.Err != nil || r.Name == "missing" && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("validate: %+v", r)
		}
	}
	if c := topicConfig(t, adm, "ia", "retention.ms"); c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("validate_only altered the topic: %+v", c)
	}
}

func TestAlterConfigsLegacy(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("1000")}, "la"); err != nil {
		t.Fatal(err)
	}
	// The legacy API replaces the whole set: retention.ms goes away.
	resps, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kadm.StringPtr("2048")}}, "la")
	if err != nil || resps[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, resps)
	}
	if got := b.meta.Image().Topics["la"].Configs; len(got) != 1 || got["retention.bytes"] != "2048" {
		t.Fatalf("configs after legacy alter: %v", got)
	}
	req := kmsg.NewPtrAlterConfigsRequest()
	req.Version = 2
	add := func(typ kmsg.ConfigResourceType, name, key string, value *string) {
		r := kmsg.NewAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = typ, name
		c := kmsg.NewAlterConfigsRequestResourceConfig()
		c.Name, c.Value = key, value
		r.Configs = append(r.Configs, c)
		req.Resources = append(req.Resources, r)
	}
	add(kmsg.ConfigResourceTypeTopic, "la", "max.message.bytes", kmsg.StringPtr("-3"))
	add(kmsg.ConfigResourceTypeBroker, "", "num.partitions", kmsg.StringPtr("3"))
	add(kmsg.ConfigResourceTypeUnknown, "x", "a", kmsg.StringPtr("b"))
	add(kmsg.ConfigResourceTypeTopic, "la", "retention.ms", nil)
	resp := rawRequest(t, b.Addr(), req).(*kmsg.AlterConfigsResponse)
	r := resp.Resources
	// "la" twice: both are duplicates.
	wantCode(t, "duplicate 1", r[0].ErrorCode, r[0].ErrorMessage, kerr.InvalidRequest)
	wantCode(t, "read-only broker config", r[1].ErrorCode, r[1].ErrorMessage, kerr.InvalidRequest)
	if r[1].ErrorMessage == nil || !strings.Contains(*r[1].ErrorMessage, "Cannot update these configs dynamically: num.partitions") {
		t.Errorf("read-only broker config message: %v", r[1].ErrorMessage)
	}
	wantCode(t, "unknown resource type", r[2].ErrorCode, r[2].ErrorMessage, kerr.InvalidRequest)
	wantCode(t, "duplicate 2", r[3].ErrorCode, r[3].ErrorMessage, kerr.InvalidRequest)

	req.Resources = nil
	add(kmsg.ConfigResourceTypeTopic, "la", "max.message.bytes", kmsg.StringPtr("-3"))
	resp = rawRequest(t, b.Addr(), req).(*kmsg.AlterConfigsResponse)
	wantCode(t, "bad value", resp.Resources[0].ErrorCode, resp.Resources[0].ErrorMessage, kerr.InvalidConfig)
}

func TestAlterBrokerConfigs(t *testing.T) {
	b := startBroker(t, map[string]string{"log.retention.hours": "5"})
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "bc"); err != nil {
		t.Fatal(err)
	}
	// Cluster-wide default: applies to every topic without an override.
	resps, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "log.retention.ms", Value: kadm.StringPtr("7777")}})
	if err != nil || resps[0].Err != nil {
		t.Fatalf("alter cluster default: %v %+v", err, resps)
	}
	tp := b.meta.Image().Topics["bc"]
	if got := b.engine.Partition(engine.TopicID(tp.ID), 0).Config().RetentionMs; got != 7777 {
		t.Fatalf("engine retention after dynamic broker config: %d", got)
	}
	c := topicConfig(t, adm, "bc", "retention.ms")
	if c.MaybeValue() != "7777" || c.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Fatalf("topic retention.ms: %+v", c)
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx)
	if err != nil || len(rcs[0].Configs) != 1 || rcs[0].Configs[0].Key != "log.retention.ms" {
		t.Fatalf("cluster default configs: %v %+v", err, rcs)
	}
	// This broker's own dynamic config wins over the cluster default.
	resps, err = adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "message.max.bytes", Value: kadm.StringPtr("3000")}}, b.cfg.NodeID)
	if err != nil || resps[0].Err != nil {
		t.Fatalf("alter broker %d: %v %+v", b.cfg.NodeID, err, resps)
	}
	if got := b.engine.Partition(engine.TopicID(tp.ID), 0).Config().MaxMessageBytes; got != 3000 {
		t.Fatalf("engine max message bytes: %d", got)
	}
	rcs, err = adm.DescribeBrokerConfigs(ctx, b.cfg.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rcs[0].Configs {
		if c.Key == "message.max.bytes" && (c.MaybeValue() != "3000" || c.Source != kmsg.ConfigSourceDynamicBrokerConfig) {
			t.Fatalf("message.max.bytes: %+v", c)
		}
	}
	for _, tc := range []struct {
		op   kadm.AlterConfig
		want *kerr.Error
	}{
		{kadm.AlterConfig{Op: kadm.SetConfig, Name: "auto.create.topics.enable", Value: kadm.StringPtr("false")}, kerr.InvalidRequest},
		{kadm.AlterConfig{Op: kadm.SetConfig, Name: "log.retention.ms", Value: kadm.StringPtr("-9")}, kerr.InvalidRequest},
		{kadm.AlterConfig{Op: kadm.SetConfig, Name: "made.up", Value: kadm.StringPtr("1")}, kerr.InvalidRequest},
	} {
		resps, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{tc.op})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(resps[0].Err, tc.want) || resps[0].ErrMessage == "" {
			t.Errorf("%s: %v %q", tc.op.Name, resps[0].Err, resps[0].ErrMessage)
		}
	}
	// Deleting the dynamic default brings back the static hours.
	if _, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "log.retention.ms"}}); err != nil {
		t.Fatal(err)
	}
	if got := b.engine.Partition(engine.TopicID(tp.ID), 0).Config().RetentionMs; got != 5*3600*1000 {
		t.Fatalf("engine retention after delete: %d", got)
	}
}

// TestKafka3ConfigsAccepted: what Kafka 3.x accepts and librdkafka's
// suite sets (0092_mixed_msgver, 0081_admin): the deprecated topic
// config message.format.version (accepted, described, ignored: every
// batch is v2), and a per-broker dynamic config of Kafka's that Tandem
// has no use for (sasl.kerberos.min.time.before.relogin, accepted on a
// broker, refused at the cluster-wide default as Kafka refuses it).
func TestKafka3ConfigsAccepted(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "mv"); err != nil {
		t.Fatal(err)
	}
	resps, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "message.format.version", Value: kadm.StringPtr("0.10.0")}}, "mv")
	if err != nil || resps[0].Err != nil {
		t.Fatalf("AlterConfigs message.format.version=0.10.0: %v %+v %s", err, resps, resps[0].ErrMessage)
	}
	if c := topicConfig(t, adm, "mv", "message.format.version"); c.MaybeValue() != "0.10.0" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("message.format.version described as %+v", c)
	}
	resps, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "message.format.version", Value: kadm.StringPtr("not-a-version")}}, "mv")
	if err != nil || !errors.Is(resps[0].Err, kerr.InvalidConfig) {
		t.Fatalf("message.format.version=not-a-version: %v %+v, want INVALID_CONFIG", err, resps)
	}

	set := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "sasl.kerberos.min.time.before.relogin", Value: kadm.StringPtr("58000")}}
	resps, err = adm.AlterBrokerConfigs(ctx, set, b.cfg.NodeID)
	if err != nil || resps[0].Err != nil {
		t.Fatalf("alter broker %d sasl.kerberos.min.time.before.relogin: %v %+v %s", b.cfg.NodeID, err, resps, resps[0].ErrMessage)
	}
	resps, err = adm.AlterBrokerConfigs(ctx, set)
	if err != nil || !errors.Is(resps[0].Err, kerr.InvalidRequest) || !strings.Contains(resps[0].ErrMessage, "broker id must be specified") {
		t.Fatalf("the same at the cluster-wide default: %v %+v, want INVALID_REQUEST (a per-broker config)", err, resps)
	}
}
