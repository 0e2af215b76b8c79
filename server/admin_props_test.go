package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/server/config"
	"github.com/tandem-kafka/tandem/server/plugin"
)

func TestParsePropsDefaults(t *testing.T) {
	p, err := ParseProps(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Props{
		AutoCreateTopics: true, NumPartitions: 1, DefaultReplicationFactor: 1,
		MessageMaxBytes: 1048588, SocketRequestMaxBytes: 104857600,
		LogRetentionMs: 7 * 24 * 3600 * 1000, LogRetentionBytes: -1,
		RetentionCheckInterval: 5 * time.Minute, LogCleanupPolicy: []string{"delete"},
		LogMessageTimestampType: "CreateTime", DeleteTopicEnable: true, SyncWrites: true,
	}
	p.static = nil
	if got := p; !propsEqual(got, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
}

func propsEqual(a, b Props) bool {
	return a.AutoCreateTopics == b.AutoCreateTopics && a.NumPartitions == b.NumPartitions &&
		a.DefaultReplicationFactor == b.DefaultReplicationFactor && a.MessageMaxBytes == b.MessageMaxBytes &&
		a.SocketRequestMaxBytes == b.SocketRequestMaxBytes && a.LogRetentionMs == b.LogRetentionMs &&
		a.LogRetentionBytes == b.LogRetentionBytes && a.RetentionCheckInterval == b.RetentionCheckInterval &&
		strings.Join(a.LogCleanupPolicy, ",") == strings.Join(b.LogCleanupPolicy, ",") &&
		a.LogMessageTimestampType == b.LogMessageTimestampType && a.DeleteTopicEnable == b.DeleteTopicEnable &&
		a.SyncWrites == b.SyncWrites && len(a.Unknown) == len(b.Unknown)
}

func TestParsePropsValues(t *testing.T) {
	p, err := ParseProps(map[string]string{
		"auto.create.topics.enable": "false", "num.partitions": "3", "message.max.bytes": "2000",
		"log.retention.bytes": "1024", "log.retention.check.interval.ms": "1000", "tandem.log.sync": "FALSE",
		"delete.topic.enable": "false", "log.cleanup.policy": "compact, delete", "some.unknown.key": "x",
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.AutoCreateTopics || p.NumPartitions != 3 || p.MessageMaxBytes != 2000 || p.LogRetentionBytes != 1024 ||
		p.RetentionCheckInterval != time.Second || p.SyncWrites || p.DeleteTopicEnable ||
		strings.Join(p.LogCleanupPolicy, ",") != "compact,delete" {
		t.Fatalf("parsed %+v", p)
	}
	if len(p.Unknown) != 1 || p.Unknown[0] != "some.unknown.key" {
		t.Fatalf("unknown keys %v", p.Unknown)
	}
}

func TestParsePropsRetentionPrecedence(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  int64
	}{
		{map[string]string{"log.retention.hours": "1"}, 3600 * 1000},
		{map[string]string{"log.retention.hours": "1", "log.retention.minutes": "2"}, 2 * 60 * 1000},
		{map[string]string{"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "5"}, 5},
		{map[string]string{"log.retention.ms": "-1"}, -1},
	} {
		p, err := ParseProps(tc.props)
		if err != nil {
			t.Fatal(err)
		}
		if p.LogRetentionMs != tc.want {
			t.Errorf("%v: LogRetentionMs %d, want %d", tc.props, p.LogRetentionMs, tc.want)
		}
	}
}

func TestParsePropsInvalid(t *testing.T) {
	for k, v := range map[string]string{
		"num.partitions": "zero", "auto.create.topics.enable": "yes", "message.max.bytes": "-5",
		"log.retention.ms": "-2", "log.cleanup.policy": "forever", "log.message.timestamp.type": "Now",
		"socket.request.max.bytes": "99999999999", "tandem.log.sync": "1",
	} {
		_, err := ParseProps(map[string]string{k: v})
		if err == nil {
			t.Errorf("%s=%s: no error", k, v)
			continue
		}
		if !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), v) {
			t.Errorf("%s=%s: error %q does not name key and value", k, v, err)
		}
	}
}

func TestValidateTopicConfigs(t *testing.T) {
	for _, tc := range []struct {
		configs map[string]string
		msg     string // "" = valid
	}{
		{map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "-1", "max.message.bytes": "0"}, ""},
		{map[string]string{"message.timestamp.type": "LogAppendTime", "compression.type": "zstd", "min.insync.replicas": "1"}, ""},
		{map[string]string{"retention.bytes": "-1", "segment.bytes": "1000", "local.retention.ms": "-2", "unclean.leader.election.enable": "true"}, ""},
		{map[string]string{"bogus": "1"}, "Unknown topic config name: bogus"},
		{map[string]string{"retention.ms": "-2"}, "Invalid value -2 for configuration retention.ms: Value must be at least -1"},
		{map[string]string{"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms: Not a number of type LONG"},
		{map[string]string{"cleanup.policy": "delete,forever"}, "Invalid value delete,forever for configuration cleanup.policy"},
		{map[string]string{"cleanup.policy": ""}, "Invalid value  for configuration cleanup.policy"},
		{map[string]string{"message.timestamp.type": "Now"}, "String must be one of: CreateTime, LogAppendTime"},
		{map[string]string{"compression.type": "brotli"}, "compression.type"},
		{map[string]string{"max.message.bytes": "-1"}, "max.message.bytes"},
		{map[string]string{"min.insync.replicas": "0"}, "min.insync.replicas"},
		{map[string]string{"unclean.leader.election.enable": "maybe"}, "Expected value to be either true or false"},
		{map[string]string{"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"},
		{map[string]string{"remote.storage.enable": "true"}, "Tiered Storage"},
	} {
		err := config.ValidateTopic(tc.configs)
		if tc.msg == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.configs, err)
			}
			continue
		}
		if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: got %v, want INVALID_CONFIG containing %q", tc.configs, err, tc.msg)
		}
		if code, msg := plugin.ErrorCode(err), plugin.ErrorMessage(err); code != kerr.InvalidConfig.Code || msg == nil || *msg != err.Error() {
			t.Errorf("%v: plugin.ErrorCode, ErrorMessage = %d %v", tc.configs, code, msg)
		}
	}
}

func TestLogConfigLayers(t *testing.T) {
	l := config.Layers{
		Topic:   map[string]string{"cleanup.policy": "compact"},
		Dynamic: map[string]string{"log.retention.ms": "1000", "message.max.bytes": "500"},
		Static:  map[string]string{"log.retention.hours": "1", "message.max.bytes": "700", "log.message.timestamp.type": "LogAppendTime", "log.cleaner.min.compaction.lag.ms": "250"},
	}
	got := config.LogConfig(l)
	want := engine.LogConfig{RetentionMs: 1000, RetentionBytes: -1, MaxMessageBytes: 500, Compact: true, LogAppendTime: true, MinCompactionLag: 250 * time.Millisecond, DeleteRetention: 24 * time.Hour,
		SegmentBytes: 1 << 30, SegmentMs: 7 * 24 * 3600 * 1000, MinCleanableDirtyRatio: 0.5}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got := config.LogConfig(config.Layers{}); got != engine.DefaultLogConfig() {
		t.Fatalf("defaults: got %+v, want engine's %+v", got, engine.DefaultLogConfig())
	}
	// The static hours are scaled when nothing takes precedence.
	if got := config.LogConfig(config.Layers{Static: l.Static}); got.RetentionMs != 3600*1000 || got.MaxMessageBytes != 700 {
		t.Fatalf("static: %+v", got)
	}

	// Describe: source and synonyms in Kafka's order.
	cv := l.TopicConfig(config.Topics["retention.ms"])
	if cv.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig || *cv.Value != "1000" {
		t.Fatalf("retention.ms = %v from %v", *cv.Value, cv.Source)
	}
	var syns []string
	for _, s := range cv.Synonyms {
		syns = append(syns, s.Name+"="+*s.Value+"/"+s.Source.String())
	}
	wantSyns := "log.retention.ms=1000/DYNAMIC_DEFAULT_BROKER_CONFIG log.retention.hours=1/STATIC_BROKER_CONFIG log.retention.hours=168/DEFAULT_CONFIG"
	if strings.Join(syns, " ") != wantSyns {
		t.Fatalf("synonyms\n got %s\nwant %s", strings.Join(syns, " "), wantSyns)
	}
	cv = l.TopicConfig(config.Topics["cleanup.policy"])
	if cv.Source != kmsg.ConfigSourceDynamicTopicConfig || *cv.Value != "compact" || len(cv.Synonyms) != 2 {
		t.Fatalf("cleanup.policy = %v from %v (%d synonyms)", *cv.Value, cv.Source, len(cv.Synonyms))
	}
}
