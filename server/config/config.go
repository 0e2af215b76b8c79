// Package config holds Kafka's topic and broker configs as Tandem knows
// them: their names, types, defaults, validation and documentation, and
// the layers a value resolves through (topic override, dynamic broker
// config, dynamic cluster default, static property, default).
package config

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
)

// Def describes one Kafka config: its type, default and validation.
type Def struct {
	Name    string
	Type    kmsg.ConfigType
	Default *string // nil: Kafka's default is null
	// Valid checks a value that parsed as typ; it returns the reason a
	// value is invalid in Kafka's words.
	Valid func(v string) string
	// Synonyms are, for a topic config, the broker keys it defaults from,
	// in Kafka's order of precedence; scale converts their unit to the
	// topic config's (hours to ms).
	Synonyms []Synonym
	// Dynamic: a broker config that can be altered cluster-wide at run
	// time (Kafka's DynamicBrokerConfig set, restricted to what Tandem
	// uses or reports).
	Dynamic bool
	// PerBroker: a dynamic broker config Kafka takes only for one broker
	// (AlterConfigs on BROKER "<id>"), never as the cluster-wide default.
	PerBroker bool
	Sensitive bool
	Doc       string
}

type Synonym struct {
	Name  string
	Scale int64
}

func (d *Def) Check(v string) error {
	reason := d.parseReason(v)
	if reason == "" && d.Valid != nil {
		reason = d.Valid(v)
	}
	if reason != "" {
		return Errorf(kerr.InvalidConfig, "Invalid value %s for configuration %s: %s", v, d.Name, reason)
	}
	return nil
}

// parseReason checks that v parses as the config's type.
func (d *Def) parseReason(v string) string {
	v = strings.TrimSpace(v)
	var err error
	switch d.Type {
	case kmsg.ConfigTypeBoolean:
		if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
			return "Expected value to be either true or false"
		}
	case kmsg.ConfigTypeShort:
		_, err = strconv.ParseInt(v, 10, 16)
	case kmsg.ConfigTypeInt:
		_, err = strconv.ParseInt(v, 10, 32)
	case kmsg.ConfigTypeLong:
		_, err = strconv.ParseInt(v, 10, 64)
	case kmsg.ConfigTypeDouble:
		_, err = strconv.ParseFloat(v, 64)
	}
	if err != nil {
		return "Not a number of type " + strings.ToUpper(d.Type.String())
	}
	return ""
}

func atLeast(min int64) func(string) string {
	return func(v string) string {
		if n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64); n < min {
			return fmt.Sprintf("Value must be at least %d", min)
		}
		return ""
	}
}

func between(min, max float64) func(string) string {
	return func(v string) string {
		n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if n < min {
			return fmt.Sprintf("Value must be no less than %v", min)
		}
		if n > max {
			return fmt.Sprintf("Value must be no more than %v", max)
		}
		return ""
	}
}

func oneOf(values ...string) func(string) string {
	return func(v string) string {
		if !slices.Contains(values, strings.TrimSpace(v)) {
			return "String must be one of: " + strings.Join(values, ", ")
		}
		return ""
	}
}

// throttledReplicas accepts Kafka's throttled replicas list: empty, "*",
// or partition:broker pairs separated by commas.
func throttledReplicas(v string) string {
	if _, err := ParseThrottled(v); err != nil {
		return err.Error()
	}
	return ""
}

// listOf accepts a non-empty comma-separated list of the given values.
func listOf(values ...string) func(string) string {
	return func(v string) string {
		items := List(v)
		if len(items) == 0 {
			return "Empty list is not allowed"
		}
		for _, it := range items {
			if !slices.Contains(values, it) {
				return "String must be one of: " + strings.Join(values, ", ")
			}
		}
		return ""
	}
}

// List splits a Kafka LIST value: comma-separated, blanks trimmed.
func List(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

const maxLong = "9223372036854775807"

// compressionTypes are the values of compression.type. Tandem stores
// batches as the producer sent them; a topic's compression.type other than
// producer is accepted and reported but batches are not recompressed.
var compressionTypes = []string{"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}

// TopicList is every topic config Tandem knows, with Kafka's names,
// types, defaults and validation (Kafka 4.0's LogConfig).
var TopicList = []*Def{
	{Name: "cleanup.policy", Type: kmsg.ConfigTypeList, Default: kmsg.StringPtr("delete"), Valid: listOf("compact", "delete"), Synonyms: syn("log.cleanup.policy"),
		Doc: "A comma separated list of valid policies: delete (discard old segments) and/or compact (keep the latest value per key)."},
	{Name: "compression.type", Type: kmsg.ConfigTypeString, Default: kmsg.StringPtr("producer"), Valid: oneOf(compressionTypes...), Synonyms: syn("compression.type"),
		Doc: "The final compression type for the topic. Tandem stores batches as the producer sent them."},
	{Name: "compression.gzip.level", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("-1"), Valid: gzipLevel, Synonyms: syn("compression.gzip.level"), Doc: "The compression level for gzip."},
	{Name: "compression.lz4.level", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("9"), Valid: between(1, 17), Synonyms: syn("compression.lz4.level"), Doc: "The compression level for lz4."},
	{Name: "compression.zstd.level", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("3"), Valid: between(-131072, 22), Synonyms: syn("compression.zstd.level"), Doc: "The compression level for zstd."},
	{Name: "delete.retention.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("86400000"), Valid: atLeast(0), Synonyms: syn("log.cleaner.delete.retention.ms"),
		Doc: "How long delete tombstones are retained on compacted topics."},
	{Name: "file.delete.delay.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("60000"), Valid: atLeast(0), Synonyms: syn("log.segment.delete.delay.ms"), Doc: "The time to wait before deleting a file."},
	{Name: "flush.messages", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(1), Synonyms: syn("log.flush.interval.messages"), Doc: "Force an fsync every this many messages."},
	{Name: "flush.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(0), Synonyms: syn("log.flush.interval.ms"), Doc: "Force an fsync after this much time."},
	{Name: "index.interval.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("4096"), Valid: atLeast(0), Synonyms: syn("log.index.interval.bytes"), Doc: "How frequently an index entry is added."},
	{Name: "local.retention.bytes", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("-2"), Valid: atLeast(-2), Synonyms: syn("log.local.retention.bytes"), Doc: "Bytes kept locally with tiered storage (-2: retention.bytes)."},
	{Name: "local.retention.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("-2"), Valid: atLeast(-2), Synonyms: syn("log.local.retention.ms"), Doc: "Time kept locally with tiered storage (-2: retention.ms)."},
	{Name: "max.compaction.lag.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(1), Synonyms: syn("log.cleaner.max.compaction.lag.ms"), Doc: "The longest a message remains ineligible for compaction."},
	{Name: "max.message.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1048588"), Valid: atLeast(0), Synonyms: syn("message.max.bytes"),
		Doc: "The largest record batch size allowed."},
	// Kafka 3.x accepts and ignores it (every batch is v2 from IBP 3.0);
	// 4.0 dropped it. Clients and tools that set it keep working.
	{Name: "message.format.version", Type: kmsg.ConfigTypeString, Default: kmsg.StringPtr("3.0-IV1"), Valid: messageFormatVersion, Synonyms: syn("log.message.format.version"),
		Doc: "Deprecated (Kafka 3.x), accepted and ignored: every batch is stored as the client sent it, in message format v2."},
	{Name: "message.timestamp.after.max.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("3600000"), Valid: atLeast(0), Synonyms: syn("log.message.timestamp.after.max.ms"),
		Doc: "How far in the future a CreateTime timestamp may be."},
	{Name: "message.timestamp.before.max.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(0), Synonyms: syn("log.message.timestamp.before.max.ms"),
		Doc: "How far in the past a CreateTime timestamp may be."},
	{Name: "message.timestamp.type", Type: kmsg.ConfigTypeString, Default: kmsg.StringPtr("CreateTime"), Valid: oneOf("CreateTime", "LogAppendTime"), Synonyms: syn("log.message.timestamp.type"),
		Doc: "Whether the timestamp in the message is message create time or log append time."},
	{Name: "min.cleanable.dirty.ratio", Type: kmsg.ConfigTypeDouble, Default: kmsg.StringPtr("0.5"), Valid: between(0, 1), Synonyms: syn("log.cleaner.min.cleanable.ratio"), Doc: "How dirty a log must be before it is compacted."},
	{Name: "min.compaction.lag.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("0"), Valid: atLeast(0), Synonyms: syn("log.cleaner.min.compaction.lag.ms"),
		Doc: "The minimum time a message remains uncompacted."},
	{Name: "min.insync.replicas", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1"), Valid: atLeast(1), Synonyms: syn("min.insync.replicas"),
		Doc: "The minimum number of in-sync replicas for acks=all."},
	{Name: "mirror.name", Type: kmsg.ConfigTypeString, Default: kmsg.StringPtr(""),
		Doc: "The cluster mirror that manages this topic (KIP-1279). A topic with it set is read-only; only the mirror APIs set and clear it."},
	{Name: "leader.replication.throttled.replicas", Type: kmsg.ConfigTypeList, Default: kmsg.StringPtr(""), Valid: throttledReplicas,
		Doc: "The followers to which the leader of this topic's partitions, while they are out of the ISR, sends no more than its broker's leader.replication.throttled.rate: partition:broker,... or *."},
	{Name: "follower.replication.throttled.replicas", Type: kmsg.ConfigTypeList, Default: kmsg.StringPtr(""), Valid: throttledReplicas,
		Doc: "The followers whose replication of this topic, while out of the ISR, is throttled to their broker's follower.replication.throttled.rate: partition:broker,... or *."},
	{Name: "mirror.replication.throttled.replicas", Type: kmsg.ConfigTypeList, Default: kmsg.StringPtr(""), Valid: throttledReplicas,
		Doc: "The followers whose replication of this mirror topic is throttled to their broker's mirror.replication.throttled.rate: partition:broker,... or * (KIP-1279)."},
	{Name: "preallocate", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("false"), Synonyms: syn("log.preallocate"), Doc: "Preallocate files on disk (no effect in Tandem)."},
	{Name: "remote.storage.enable", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("false"), Valid: noTieredStorage, Doc: "Tiered storage (not supported by Tandem)."},
	{Name: "retention.bytes", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("-1"), Synonyms: syn("log.retention.bytes"),
		Doc: "The maximum size of a partition before old data is discarded (-1: no limit)."},
	{Name: "retention.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("604800000"), Valid: atLeast(-1),
		Synonyms: []Synonym{{"log.retention.ms", 1}, {"log.retention.minutes", 60 * 1000}, {"log.retention.hours", 3600 * 1000}},
		Doc:      "The maximum time a log is retained before old data is discarded (-1: no limit)."},
	// Tandem has no segment files; Kafka 3.x's minimum (14) is kept rather
	// than 4.0's 1 MiB so that tools and tests that set small values work.
	{Name: "segment.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1073741824"), Valid: atLeast(14), Synonyms: syn("log.segment.bytes"), Doc: "The segment file size for the log."},
	{Name: "segment.index.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("10485760"), Valid: atLeast(4), Synonyms: syn("log.index.size.max.bytes"), Doc: "The size of the offset index."},
	{Name: "segment.jitter.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("0"), Valid: atLeast(0),
		Synonyms: []Synonym{{"log.roll.jitter.ms", 1}, {"log.roll.jitter.hours", 3600 * 1000}}, Doc: "Maximum random jitter subtracted from segment.ms."},
	{Name: "segment.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("604800000"), Valid: atLeast(1),
		Synonyms: []Synonym{{"log.roll.ms", 1}, {"log.roll.hours", 3600 * 1000}}, Doc: "The time after which the log rolls a segment."},
	{Name: "unclean.leader.election.enable", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("false"), Synonyms: syn("unclean.leader.election.enable"),
		Doc: "Whether replicas not in the ISR may be elected leader as a last resort."},
}

func syn(name string) []Synonym { return []Synonym{{name, 1}} }

// messageFormatVersion accepts what Kafka 3.x's MetadataVersion parses:
// 0.8.0 … 3.x, with or without an -IVn suffix.
func messageFormatVersion(v string) string {
	if !messageFormatRE.MatchString(strings.TrimSpace(v)) {
		return "Version " + v + " is not a valid version"
	}
	return ""
}

var messageFormatRE = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+){0,2}(-IV[0-9]+)?$`)

// kerberos is a SASL/GSSAPI setting Kafka lets each broker change at run
// time. Tandem has no GSSAPI: they are accepted, stored and described,
// so that tools that set them (librdkafka's suite) work, and do nothing.
func kerberos(name string, typ kmsg.ConfigType, def string) *Def {
	return &Def{Name: name, Type: typ, Default: kmsg.StringPtr(def), Dynamic: true, PerBroker: true,
		Doc: "Kafka's SASL/GSSAPI setting, accepted per broker and ignored: Tandem has no GSSAPI."}
}

func gzipLevel(v string) string {
	n, _ := strconv.Atoi(strings.TrimSpace(v))
	if n == -1 || (n >= 1 && n <= 9) {
		return ""
	}
	return "Value must be -1 or between 1 and 9"
}

func noTieredStorage(v string) string {
	if strings.EqualFold(strings.TrimSpace(v), "true") {
		return "Tiered Storage functionality is not supported by this broker"
	}
	return ""
}

// BrokerList is every broker config Tandem knows or reports.
var BrokerList = []*Def{
	{Name: "auto.create.topics.enable", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("true"), Doc: "Enable auto creation of topics on the server."},
	{Name: "auto.leader.rebalance.enable", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("true"), Doc: "Move leadership back to preferred replicas when brokers lead too few of theirs."},
	{Name: "broker.heartbeat.interval.ms", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("2000"), Valid: atLeast(1), Doc: "How often a broker heartbeats to the active controller."},
	{Name: "broker.rack", Type: kmsg.ConfigTypeString, Doc: "The rack of the broker, for rack-aware replica placement."},
	{Name: "broker.session.timeout.ms", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("9000"), Valid: atLeast(1), Doc: "A broker that has not heartbeated for this long is fenced and its leaderships move."},
	{Name: "controller.listener.names", Type: kmsg.ConfigTypeString, Doc: "The listener (in listeners) the controller port binds to; by default a voter binds its controller.quorum.voters entry."},
	{Name: "controller.quorum.election.timeout.ms", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1000"), Valid: atLeast(1), Doc: "How long a candidate waits for votes."},
	{Name: "controller.quorum.fetch.timeout.ms", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("2000"), Valid: atLeast(1), Doc: "The longest a voter waits for the leader before it starts an election (it starts one after a random time between half of this and all of it)."},
	{Name: "controller.quorum.voters", Type: kmsg.ConfigTypeList, Default: kmsg.StringPtr(""), Valid: validVoters, Doc: "The metadata quorum, id@host:port,...; unset: a standalone broker."},
	{Name: "controlled.shutdown.enable", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("true"), Doc: "On shutdown, move leaderships away before stopping."},
	{Name: "compression.type", Type: kmsg.ConfigTypeString, Default: kmsg.StringPtr("producer"), Valid: oneOf(compressionTypes...), Dynamic: true, Doc: "The default compression type for topics."},
	{Name: "compression.gzip.level", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("-1"), Valid: gzipLevel, Dynamic: true, Doc: "The compression level for gzip."},
	{Name: "compression.lz4.level", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("9"), Valid: between(1, 17), Dynamic: true, Doc: "The compression level for lz4."},
	{Name: "compression.zstd.level", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("3"), Valid: between(-131072, 22), Dynamic: true, Doc: "The compression level for zstd."},
	{Name: "connection.failed.authentication.delay.ms", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("100"), Valid: atLeast(0),
		Doc: "How long the answer to a failed authentication is delayed; repeated failures of one user or address are spaced out in proportion (0: neither)."},
	{Name: "default.replication.factor", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1"), Valid: atLeast(1), Doc: "The replication factor for automatically created topics."},
	{Name: "delete.topic.enable", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("true"), Doc: "Enables topic deletion."},
	{Name: "leader.imbalance.check.interval.seconds", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("300"), Valid: atLeast(1), Doc: "How often the controller checks for leader imbalance."},
	{Name: "log.cleaner.delete.retention.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("86400000"), Valid: atLeast(0), Dynamic: true, Doc: "How long delete tombstones are retained."},
	{Name: "log.cleaner.max.compaction.lag.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(1), Dynamic: true, Doc: "The maximum time a message remains ineligible for compaction."},
	{Name: "log.cleaner.min.cleanable.ratio", Type: kmsg.ConfigTypeDouble, Default: kmsg.StringPtr("0.5"), Valid: between(0, 1), Dynamic: true, Doc: "The minimum ratio of dirty log to total log for a log to be compacted."},
	{Name: "log.cleaner.min.compaction.lag.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("0"), Valid: atLeast(0), Dynamic: true, Doc: "The minimum time a message remains uncompacted."},
	{Name: "log.cleanup.policy", Type: kmsg.ConfigTypeList, Default: kmsg.StringPtr("delete"), Valid: listOf("compact", "delete"), Dynamic: true, Doc: "The default cleanup policy for topics."},
	{Name: "log.flush.interval.messages", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(1), Dynamic: true, Doc: "Messages accumulated before an fsync."},
	{Name: "log.flush.interval.ms", Type: kmsg.ConfigTypeLong, Valid: atLeast(0), Dynamic: true, Doc: "Maximum time a message is kept in memory before an fsync."},
	{Name: "log.index.interval.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("4096"), Valid: atLeast(0), Dynamic: true, Doc: "The interval with which an offset index entry is added."},
	{Name: "log.index.size.max.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("10485760"), Valid: atLeast(4), Dynamic: true, Doc: "The maximum size of the offset index."},
	{Name: "log.local.retention.bytes", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("-2"), Valid: atLeast(-2), Dynamic: true, Doc: "Bytes kept locally with tiered storage."},
	{Name: "log.local.retention.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("-2"), Valid: atLeast(-2), Dynamic: true, Doc: "Time kept locally with tiered storage."},
	{Name: "log.message.timestamp.after.max.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("3600000"), Valid: atLeast(0), Dynamic: true, Doc: "How far in the future a CreateTime timestamp may be."},
	{Name: "log.message.timestamp.before.max.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(0), Dynamic: true, Doc: "How far in the past a CreateTime timestamp may be."},
	{Name: "log.message.timestamp.type", Type: kmsg.ConfigTypeString, Default: kmsg.StringPtr("CreateTime"), Valid: oneOf("CreateTime", "LogAppendTime"), Dynamic: true, Doc: "The default timestamp type of topics."},
	{Name: "log.preallocate", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("false"), Dynamic: true, Doc: "Preallocate files (no effect in Tandem)."},
	{Name: "log.retention.bytes", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("-1"), Dynamic: true, Doc: "The maximum size of a partition's log before deleting it."},
	{Name: "log.retention.check.interval.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("300000"), Valid: atLeast(1), Doc: "How often retention and compaction run."},
	{Name: "log.retention.hours", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("168"), Dynamic: true, Doc: "Hours to keep a log (after log.retention.ms and log.retention.minutes)."},
	{Name: "log.retention.minutes", Type: kmsg.ConfigTypeInt, Dynamic: true, Doc: "Minutes to keep a log (after log.retention.ms)."},
	{Name: "log.retention.ms", Type: kmsg.ConfigTypeLong, Valid: atLeast(-1), Dynamic: true, Doc: "Milliseconds to keep a log; -1 means no limit."},
	{Name: "log.roll.hours", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("168"), Valid: atLeast(1), Dynamic: true, Doc: "The maximum time before a new segment is rolled out (in hours)."},
	{Name: "log.roll.jitter.hours", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("0"), Valid: atLeast(0), Dynamic: true, Doc: "Maximum jitter subtracted from the roll time (in hours)."},
	{Name: "log.roll.jitter.ms", Type: kmsg.ConfigTypeLong, Dynamic: true, Doc: "Maximum jitter subtracted from the roll time (in ms)."},
	{Name: "log.roll.ms", Type: kmsg.ConfigTypeLong, Dynamic: true, Doc: "The maximum time before a new segment is rolled out (in ms)."},
	{Name: "log.segment.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1073741824"), Valid: atLeast(14), Dynamic: true, Doc: "The maximum size of a single log file."},
	{Name: "log.segment.delete.delay.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("60000"), Valid: atLeast(0), Dynamic: true, Doc: "The time to wait before deleting a file."},
	{Name: "max.broker.partitions", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr(strconv.Itoa(raftmeta.DefaultMaxBrokerPartitions)), Valid: atLeast(1),
		Doc: "The most partition replicas one broker may host (KIP-578); creations beyond it fail with POLICY_VIOLATION."},
	{Name: "message.max.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1048588"), Valid: atLeast(0), Dynamic: true, Doc: "The largest record batch size allowed."},
	{Name: "min.insync.replicas", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1"), Valid: atLeast(1), Dynamic: true, Doc: "The minimum number of in-sync replicas for acks=all."},
	{Name: "leader.replication.throttled.rate", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(1), Dynamic: true,
		Doc: "Bytes per second this broker sends, as a leader, to followers out of the ISR named in their topic's leader.replication.throttled.replicas; the default is unlimited."},
	{Name: "follower.replication.throttled.rate", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr(maxLong), Valid: atLeast(1), Dynamic: true,
		Doc: "Bytes per second this broker replicates, as a follower out of the ISR, of the partitions named in their topic's follower.replication.throttled.replicas; the default is unlimited."},
	{Name: "mirror.replication.throttled.rate", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("0"), Valid: atLeast(0), Dynamic: true,
		Doc: "Bytes per second this broker replicates, as a follower, of the mirror partitions named in their topic's mirror.replication.throttled.replicas; 0: unlimited (KIP-1279)."},
	{Name: "num.partitions", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1"), Valid: atLeast(1), Doc: "The default number of partitions per topic."},
	{Name: "queued.max.request.bytes", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("134217728"), Valid: atLeast(-1),
		Doc: "The bytes of requests being read or waiting for their handler before no more are read (-1: no limit)."},
	{Name: "replica.fetch.max.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("1048576"), Valid: atLeast(0), Doc: "The bytes a follower fetches per partition."},
	{Name: "replica.fetch.response.max.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("10485760"), Valid: atLeast(0), Doc: "The bytes of one replica fetch response."},
	{Name: "replica.fetch.wait.max.ms", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("500"), Valid: atLeast(0), Doc: "How long a follower's fetch waits for data."},
	{Name: "replica.lag.time.max.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("30000"), Valid: atLeast(1), Doc: "A follower that has not caught up for this long leaves the ISR."},
	{Name: "socket.request.max.bytes", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr("104857600"), Valid: atLeast(1), Doc: "The maximum number of bytes in a socket request."},
	{Name: "tandem.request.read.timeout.ms", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("60000"), Valid: atLeast(1),
		Doc: "How long a client may take to send one request once its size arrived; slower connections are closed."},
	{Name: "tandem.max.partitions.per.request", Type: kmsg.ConfigTypeInt, Default: kmsg.StringPtr(strconv.Itoa(raftmeta.DefaultMaxPartitionsPerRequest)), Valid: atLeast(1),
		Doc: "The most partitions one CreateTopics or CreatePartitions request may add."},
	{Name: "tandem.log.sync", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("true"), Doc: "Fsync appended batches before acknowledging them (acks != 0)."},
	{Name: "tandem.memory.budget", Type: kmsg.ConfigTypeLong, Default: kmsg.StringPtr("268435456"), Valid: atLeast(32 << 20),
		Doc: "Memory the broker sizes its caches to; tandem serve makes it the Go runtime's soft memory limit (unless GOMEMLIMIT is set)."},
	{Name: "unclean.leader.election.enable", Type: kmsg.ConfigTypeBoolean, Default: kmsg.StringPtr("false"), Dynamic: true, Doc: "Whether replicas not in the ISR may be elected leader as a last resort."},
	kerberos("sasl.kerberos.kinit.cmd", kmsg.ConfigTypeString, "/usr/bin/kinit"),
	kerberos("sasl.kerberos.min.time.before.relogin", kmsg.ConfigTypeLong, "60000"),
	kerberos("sasl.kerberos.ticket.renew.jitter", kmsg.ConfigTypeDouble, "0.05"),
	kerberos("sasl.kerberos.ticket.renew.window.factor", kmsg.ConfigTypeDouble, "0.8"),
}

var (
	Topics  = indexConfigs(TopicList)
	Brokers = indexConfigs(BrokerList)
)

func indexConfigs(list []*Def) map[string]*Def {
	m := make(map[string]*Def, len(list))
	for _, d := range list {
		m[d.Name] = d
	}
	return m
}

// ValidateTopic checks topic config names and values the way
// Kafka's LogConfig.validate does: an unknown name or a bad value is
// INVALID_CONFIG with a message.
func ValidateTopic(configs map[string]string) error {
	names := make([]string, 0, len(configs))
	for k := range configs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		d := Topics[k]
		if d == nil {
			return Errorf(kerr.InvalidConfig, "Unknown topic config name: %s", k)
		}
		if err := d.Check(configs[k]); err != nil {
			return err
		}
	}
	return nil
}

// Layers are the places a config value comes from, in Kafka's order
// of precedence: topic override, dynamic config of this broker, dynamic
// cluster-wide default, static broker property, Kafka's default.
type Layers struct {
	Topic   map[string]string
	Node    map[string]string
	Dynamic map[string]string
	Static  map[string]string
}

// brokerLayers are the broker-level layers of l, highest precedence first.
func (l Layers) brokerLayers() [3]struct {
	m   map[string]string
	src kmsg.ConfigSource
} {
	return [3]struct {
		m   map[string]string
		src kmsg.ConfigSource
	}{
		{l.Node, kmsg.ConfigSourceDynamicBrokerConfig},
		{l.Dynamic, kmsg.ConfigSourceDynamicDefaultBrokerConfig},
		{l.Static, kmsg.ConfigSourceStaticBrokerConfig},
	}
}

// Value is a resolved config, where it came from, and the synonyms
// (every layer that sets it, highest precedence first, then the default).
type Value struct {
	Value    *string
	Source   kmsg.ConfigSource
	Synonyms []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
}

func (cv *Value) Add(name string, v *string, src kmsg.ConfigSource) {
	s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
	s.Name, s.Value, s.Source = name, v, src
	cv.Synonyms = append(cv.Synonyms, s)
}

// Broker resolves a Broker config.
func (l Layers) Broker(d *Def) Value {
	var cv Value
	for _, layer := range l.brokerLayers() {
		if v, ok := layer.m[d.Name]; ok {
			if cv.Source == 0 {
				cv.Value, cv.Source = kmsg.StringPtr(v), layer.src
			}
			cv.Add(d.Name, kmsg.StringPtr(v), layer.src)
		}
	}
	if cv.Source == 0 {
		cv.Value, cv.Source = d.Default, kmsg.ConfigSourceDefaultConfig
	}
	cv.Add(d.Name, d.Default, kmsg.ConfigSourceDefaultConfig)
	return cv
}

// TopicConfig resolves a topic config: the topic's own value, then the first
// broker synonym set at some broker layer, then Kafka's default.
func (l Layers) TopicConfig(d *Def) Value {
	var cv Value
	if v, ok := l.Topic[d.Name]; ok {
		cv.Value, cv.Source = kmsg.StringPtr(v), kmsg.ConfigSourceDynamicTopicConfig
		cv.Add(d.Name, kmsg.StringPtr(v), cv.Source)
	}
	for _, s := range d.Synonyms {
		for _, layer := range l.brokerLayers() {
			v, ok := layer.m[s.Name]
			if !ok {
				continue
			}
			// The synonym lists the broker value as set; the topic's
			// value is converted to the topic config's unit.
			if cv.Source == 0 {
				cv.Value, cv.Source = kmsg.StringPtr(scaleValue(v, s.Scale)), layer.src
			}
			cv.Add(s.Name, kmsg.StringPtr(v), layer.src)
		}
	}
	if cv.Source == 0 {
		cv.Value, cv.Source = d.Default, kmsg.ConfigSourceDefaultConfig
	}
	// Kafka reports the default under the broker key that holds it.
	name, def := d.Name, d.Default
	if len(d.Synonyms) > 0 {
		name = d.Synonyms[len(d.Synonyms)-1].Name
		if bd := Brokers[name]; bd != nil {
			def = bd.Default
		}
	}
	cv.Add(name, def, kmsg.ConfigSourceDefaultConfig)
	return cv
}

// scaleValue converts a broker synonym (hours, minutes) to milliseconds.
func scaleValue(v string, scale int64) string {
	if scale == 1 {
		return v
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return v
	}
	if n > math.MaxInt64/scale || n < math.MinInt64/scale {
		return maxLong
	}
	return strconv.FormatInt(n*scale, 10)
}

// Str returns the effective value of a config (a topic config when the
// name is one, else a broker config); "" if null.
func (l Layers) Str(name string) string {
	var cv Value
	if d := Topics[name]; d != nil && l.Topic != nil {
		cv = l.TopicConfig(d)
	} else if d := Brokers[name]; d != nil {
		cv = l.Broker(d)
	}
	if cv.Value == nil {
		return ""
	}
	return strings.TrimSpace(*cv.Value)
}

// Int returns the effective value of a numeric config (0 if null).
func (l Layers) Int(name string) int64 {
	v, _ := strconv.ParseInt(l.Str(name), 10, 64)
	return v
}

func (l Layers) Bool(name string) bool { return strings.EqualFold(l.Str(name), "true") }

func (l Layers) Float(name string) float64 {
	f, _ := strconv.ParseFloat(l.Str(name), 64) // validated as a double when set
	return f
}

func LogConfig(l Layers) engine.LogConfig {
	if l.Topic == nil {
		l.Topic = map[string]string{}
	}
	policy := List(l.Str("cleanup.policy"))
	return engine.LogConfig{
		RetentionMs:            l.Int("retention.ms"),
		RetentionBytes:         l.Int("retention.bytes"),
		MaxMessageBytes:        int32(l.Int("max.message.bytes")),
		Compact:                slices.Contains(policy, engine.CleanupCompact),
		Delete:                 slices.Contains(policy, engine.CleanupDelete),
		LogAppendTime:          l.Str("message.timestamp.type") == "LogAppendTime",
		MinCompactionLag:       time.Duration(l.Int("min.compaction.lag.ms")) * time.Millisecond,
		DeleteRetention:        time.Duration(l.Int("delete.retention.ms")) * time.Millisecond,
		SegmentBytes:           l.Int("segment.bytes"),
		SegmentMs:              l.Int("segment.ms"),
		MinCleanableDirtyRatio: l.Float("min.cleanable.dirty.ratio"),
	}
}

// Error is a Kafka error with the message for the response's
// ErrorMessage, in Kafka's words; errors.As finds its *kerr.Error.
type Error struct {
	code *kerr.Error
	msg  string
}

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.code }

// Errorf returns an Error of code with a formatted message.
func Errorf(code *kerr.Error, format string, args ...any) error {
	return &Error{code, fmt.Sprintf(format, args...)}
}

// validVoters accepts controller.quorum.voters: empty (a standalone
// broker) or id@host:port,...
func validVoters(v string) string {
	if strings.TrimSpace(v) == "" {
		return ""
	}
	if _, err := raftmeta.ParseVoters(v); err != nil {
		return err.Error()
	}
	return ""
}

// Throttled is a parsed throttled replicas list.
type Throttled struct {
	all   bool
	pairs map[[2]int32]bool // partition, broker
}

// ParseThrottled parses "", "*" or "p:b,p:b" (whitespace and the
// brackets kafka-configs.sh users write around lists are allowed).
func ParseThrottled(v string) (Throttled, error) {
	v = strings.TrimSpace(v)
	v = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"))
	if v == "*" {
		return Throttled{all: true}, nil
	}
	s := Throttled{pairs: map[[2]int32]bool{}}
	if v == "" {
		return s, nil
	}
	for _, item := range strings.Split(v, ",") {
		p, b, ok := strings.Cut(strings.TrimSpace(item), ":")
		pi, perr := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		bi, berr := strconv.ParseInt(strings.TrimSpace(b), 10, 32)
		if !ok || perr != nil || berr != nil || pi < 0 || bi < 0 {
			return Throttled{}, fmt.Errorf("%q is not partition:broker; the list is [PartitionId]:[BrokerId],... or *", strings.TrimSpace(item))
		}
		s.pairs[[2]int32{int32(pi), int32(bi)}] = true
	}
	return s, nil
}

// Has reports whether the list names the replica of partition on broker.
func (s Throttled) Has(partition, broker int32) bool {
	return s.all || s.pairs[[2]int32{partition, broker}]
}
