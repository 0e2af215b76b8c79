package server

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Props are the broker properties the server acts on, parsed from
// Config.Props (Kafka's server.properties keys). Dynamic cluster-wide
// overrides stored in the metadata image take precedence over them where
// Kafka allows it (see topicLogConfig and DescribeConfigs).
type Props struct {
	AutoCreateTopics         bool  // auto.create.topics.enable
	NumPartitions            int32 // num.partitions
	DefaultReplicationFactor int16 // default.replication.factor
	MessageMaxBytes          int32 // message.max.bytes
	SocketRequestMaxBytes    int32 // socket.request.max.bytes
	// LogRetentionMs follows Kafka's precedence: log.retention.ms, then
	// log.retention.minutes, then log.retention.hours; -1 is unlimited.
	LogRetentionMs          int64
	LogRetentionBytes       int64         // log.retention.bytes
	RetentionCheckInterval  time.Duration // log.retention.check.interval.ms
	LogCleanupPolicy        []string      // log.cleanup.policy
	LogMessageTimestampType string        // log.message.timestamp.type
	DeleteTopicEnable       bool          // delete.topic.enable
	SyncWrites              bool          // tandem.log.sync: fsync before acknowledging
	MemoryBudget            int64         // tandem.memory.budget
	// PartitionLimits are tandem.max.partitions.per.request and
	// max.broker.partitions, which the controller enforces.
	PartitionLimits raftmeta.PartitionLimits
	// QueuedMaxRequestBytes bounds the bytes of requests being read or
	// waiting for their handler (queued.max.request.bytes; <= 0:
	// unbounded, as Kafka's -1).
	QueuedMaxRequestBytes int64
	// RequestReadTimeout is how long a client may take to send one
	// frame once its size arrived (tandem.request.read.timeout.ms).
	RequestReadTimeout time.Duration
	// FailedAuthDelay delays the answer to a failed authentication and
	// scales the throttling of repeated failures
	// (connection.failed.authentication.delay.ms; 0 turns both off).
	FailedAuthDelay time.Duration
	// Cluster holds the keys of multi-broker clusters.
	Cluster ClusterProps
	// Unknown lists the keys of Config.Props that Tandem does not know;
	// Kafka accepts them with a warning, and so does the broker.
	Unknown []string

	static map[string]string // Config.Props as given, for DescribeConfigs
}

// ParseProps validates the known keys of m and returns the broker
// properties. An invalid value is an error naming the key and the value.
func ParseProps(m map[string]string) (Props, error) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if d := brokerConfigs[k]; d != nil {
			if err := d.check(m[k]); err != nil {
				return Props{}, err
			}
		}
	}
	l := configLayers{static: m}
	p := Props{
		AutoCreateTopics:         l.bool("auto.create.topics.enable"),
		NumPartitions:            int32(l.int("num.partitions")),
		DefaultReplicationFactor: int16(l.int("default.replication.factor")),
		MessageMaxBytes:          int32(l.int("message.max.bytes")),
		SocketRequestMaxBytes:    int32(l.int("socket.request.max.bytes")),
		// Resolved as a topic's retention.ms: Kafka's precedence of the
		// ms, minutes and hours keys.
		LogRetentionMs:          configLayers{static: m, topic: map[string]string{}}.int("retention.ms"),
		LogRetentionBytes:       l.int("log.retention.bytes"),
		RetentionCheckInterval:  time.Duration(l.int("log.retention.check.interval.ms")) * time.Millisecond,
		LogCleanupPolicy:        configList(l.str("log.cleanup.policy")),
		LogMessageTimestampType: l.str("log.message.timestamp.type"),
		DeleteTopicEnable:       l.bool("delete.topic.enable"),
		SyncWrites:              l.bool("tandem.log.sync"),
		MemoryBudget:            l.int("tandem.memory.budget"),
		PartitionLimits: raftmeta.PartitionLimits{
			PerRequest: int(l.int("tandem.max.partitions.per.request")),
			PerBroker:  int(l.int("max.broker.partitions")),
		},
		QueuedMaxRequestBytes: l.int("queued.max.request.bytes"),
		RequestReadTimeout:    time.Duration(l.int("tandem.request.read.timeout.ms")) * time.Millisecond,
		FailedAuthDelay:       time.Duration(l.int("connection.failed.authentication.delay.ms")) * time.Millisecond,
		static:                make(map[string]string, len(m)),
	}
	var err error
	if p.Cluster, err = parseClusterProps(l); err != nil {
		return Props{}, err
	}
	for k, v := range m {
		p.static[k] = v
		if brokerConfigs[k] == nil {
			p.Unknown = append(p.Unknown, k)
		}
	}
	sort.Strings(p.Unknown)
	return p, nil
}

// configDef describes one Kafka config: its type, default and validation.
type configDef struct {
	name string
	typ  kmsg.ConfigType
	def  *string // nil: Kafka's default is null
	// valid checks a value that parsed as typ; it returns the reason a
	// value is invalid in Kafka's words.
	valid func(v string) string
	// synonyms are, for a topic config, the broker keys it defaults from,
	// in Kafka's order of precedence; scale converts their unit to the
	// topic config's (hours to ms).
	synonyms []synonym
	// dynamic: a broker config that can be altered cluster-wide at run
	// time (Kafka's DynamicBrokerConfig set, restricted to what Tandem
	// uses or reports).
	dynamic   bool
	sensitive bool
	doc       string
}

type synonym struct {
	name  string
	scale int64
}

func (d *configDef) check(v string) error {
	reason := d.parseReason(v)
	if reason == "" && d.valid != nil {
		reason = d.valid(v)
	}
	if reason != "" {
		return adminErrorf(kerr.InvalidConfig, "Invalid value %s for configuration %s: %s", v, d.name, reason)
	}
	return nil
}

// parseReason checks that v parses as the config's type.
func (d *configDef) parseReason(v string) string {
	v = strings.TrimSpace(v)
	var err error
	switch d.typ {
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
		return "Not a number of type " + strings.ToUpper(d.typ.String())
	}
	return ""
}

func cfgStr(s string) *string { return &s }

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
	if _, err := parseThrottledReplicas(v); err != nil {
		return err.Error()
	}
	return ""
}

// listOf accepts a non-empty comma-separated list of the given values.
func listOf(values ...string) func(string) string {
	return func(v string) string {
		items := configList(v)
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

// configList splits a Kafka LIST value: comma-separated, blanks trimmed.
func configList(v string) []string {
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

// topicConfigList is every topic config Tandem knows, with Kafka's names,
// types, defaults and validation (Kafka 4.0's LogConfig).
var topicConfigList = []*configDef{
	{name: "cleanup.policy", typ: kmsg.ConfigTypeList, def: cfgStr("delete"), valid: listOf("compact", "delete"), synonyms: syn("log.cleanup.policy"),
		doc: "A comma separated list of valid policies: delete (discard old segments) and/or compact (keep the latest value per key)."},
	{name: "compression.type", typ: kmsg.ConfigTypeString, def: cfgStr("producer"), valid: oneOf(compressionTypes...), synonyms: syn("compression.type"),
		doc: "The final compression type for the topic. Tandem stores batches as the producer sent them."},
	{name: "compression.gzip.level", typ: kmsg.ConfigTypeInt, def: cfgStr("-1"), valid: gzipLevel, synonyms: syn("compression.gzip.level"), doc: "The compression level for gzip."},
	{name: "compression.lz4.level", typ: kmsg.ConfigTypeInt, def: cfgStr("9"), valid: between(1, 17), synonyms: syn("compression.lz4.level"), doc: "The compression level for lz4."},
	{name: "compression.zstd.level", typ: kmsg.ConfigTypeInt, def: cfgStr("3"), valid: between(-131072, 22), synonyms: syn("compression.zstd.level"), doc: "The compression level for zstd."},
	{name: "delete.retention.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("86400000"), valid: atLeast(0), synonyms: syn("log.cleaner.delete.retention.ms"),
		doc: "How long delete tombstones are retained on compacted topics."},
	{name: "file.delete.delay.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("60000"), valid: atLeast(0), synonyms: syn("log.segment.delete.delay.ms"), doc: "The time to wait before deleting a file."},
	{name: "flush.messages", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(1), synonyms: syn("log.flush.interval.messages"), doc: "Force an fsync every this many messages."},
	{name: "flush.ms", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(0), synonyms: syn("log.flush.interval.ms"), doc: "Force an fsync after this much time."},
	{name: "index.interval.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("4096"), valid: atLeast(0), synonyms: syn("log.index.interval.bytes"), doc: "How frequently an index entry is added."},
	{name: "local.retention.bytes", typ: kmsg.ConfigTypeLong, def: cfgStr("-2"), valid: atLeast(-2), synonyms: syn("log.local.retention.bytes"), doc: "Bytes kept locally with tiered storage (-2: retention.bytes)."},
	{name: "local.retention.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("-2"), valid: atLeast(-2), synonyms: syn("log.local.retention.ms"), doc: "Time kept locally with tiered storage (-2: retention.ms)."},
	{name: "max.compaction.lag.ms", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(1), synonyms: syn("log.cleaner.max.compaction.lag.ms"), doc: "The longest a message remains ineligible for compaction."},
	{name: "max.message.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("1048588"), valid: atLeast(0), synonyms: syn("message.max.bytes"),
		doc: "The largest record batch size allowed."},
	{name: "message.timestamp.after.max.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("3600000"), valid: atLeast(0), synonyms: syn("log.message.timestamp.after.max.ms"),
		doc: "How far in the future a CreateTime timestamp may be."},
	{name: "message.timestamp.before.max.ms", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(0), synonyms: syn("log.message.timestamp.before.max.ms"),
		doc: "How far in the past a CreateTime timestamp may be."},
	{name: "message.timestamp.type", typ: kmsg.ConfigTypeString, def: cfgStr("CreateTime"), valid: oneOf("CreateTime", "LogAppendTime"), synonyms: syn("log.message.timestamp.type"),
		doc: "Whether the timestamp in the message is message create time or log append time."},
	{name: "min.cleanable.dirty.ratio", typ: kmsg.ConfigTypeDouble, def: cfgStr("0.5"), valid: between(0, 1), synonyms: syn("log.cleaner.min.cleanable.ratio"), doc: "How dirty a log must be before it is compacted."},
	{name: "min.compaction.lag.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("0"), valid: atLeast(0), synonyms: syn("log.cleaner.min.compaction.lag.ms"),
		doc: "The minimum time a message remains uncompacted."},
	{name: "min.insync.replicas", typ: kmsg.ConfigTypeInt, def: cfgStr("1"), valid: atLeast(1), synonyms: syn("min.insync.replicas"),
		doc: "The minimum number of in-sync replicas for acks=all."},
	{name: "mirror.name", typ: kmsg.ConfigTypeString, def: cfgStr(""),
		doc: "The cluster mirror that manages this topic (KIP-1279). A topic with it set is read-only; only the mirror APIs set and clear it."},
	{name: "leader.replication.throttled.replicas", typ: kmsg.ConfigTypeList, def: cfgStr(""), valid: throttledReplicas,
		doc: "The followers to which the leader of this topic's partitions, while they are out of the ISR, sends no more than its broker's leader.replication.throttled.rate: partition:broker,... or *."},
	{name: "follower.replication.throttled.replicas", typ: kmsg.ConfigTypeList, def: cfgStr(""), valid: throttledReplicas,
		doc: "The followers whose replication of this topic, while out of the ISR, is throttled to their broker's follower.replication.throttled.rate: partition:broker,... or *."},
	{name: "mirror.replication.throttled.replicas", typ: kmsg.ConfigTypeList, def: cfgStr(""), valid: throttledReplicas,
		doc: "The followers whose replication of this mirror topic is throttled to their broker's mirror.replication.throttled.rate: partition:broker,... or * (KIP-1279)."},
	{name: "preallocate", typ: kmsg.ConfigTypeBoolean, def: cfgStr("false"), synonyms: syn("log.preallocate"), doc: "Preallocate files on disk (no effect in Tandem)."},
	{name: "remote.storage.enable", typ: kmsg.ConfigTypeBoolean, def: cfgStr("false"), valid: noTieredStorage, doc: "Tiered storage (not supported by Tandem)."},
	{name: "retention.bytes", typ: kmsg.ConfigTypeLong, def: cfgStr("-1"), synonyms: syn("log.retention.bytes"),
		doc: "The maximum size of a partition before old data is discarded (-1: no limit)."},
	{name: "retention.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("604800000"), valid: atLeast(-1),
		synonyms: []synonym{{"log.retention.ms", 1}, {"log.retention.minutes", 60 * 1000}, {"log.retention.hours", 3600 * 1000}},
		doc:      "The maximum time a log is retained before old data is discarded (-1: no limit)."},
	// Tandem has no segment files; Kafka 3.x's minimum (14) is kept rather
	// than 4.0's 1 MiB so that tools and tests that set small values work.
	{name: "segment.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("1073741824"), valid: atLeast(14), synonyms: syn("log.segment.bytes"), doc: "The segment file size for the log."},
	{name: "segment.index.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("10485760"), valid: atLeast(4), synonyms: syn("log.index.size.max.bytes"), doc: "The size of the offset index."},
	{name: "segment.jitter.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("0"), valid: atLeast(0),
		synonyms: []synonym{{"log.roll.jitter.ms", 1}, {"log.roll.jitter.hours", 3600 * 1000}}, doc: "Maximum random jitter subtracted from segment.ms."},
	{name: "segment.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("604800000"), valid: atLeast(1),
		synonyms: []synonym{{"log.roll.ms", 1}, {"log.roll.hours", 3600 * 1000}}, doc: "The time after which the log rolls a segment."},
	{name: "unclean.leader.election.enable", typ: kmsg.ConfigTypeBoolean, def: cfgStr("false"), synonyms: syn("unclean.leader.election.enable"),
		doc: "Whether replicas not in the ISR may be elected leader as a last resort."},
}

func syn(name string) []synonym { return []synonym{{name, 1}} }

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

// brokerConfigList is every broker config Tandem knows or reports.
var brokerConfigList = []*configDef{
	{name: "auto.create.topics.enable", typ: kmsg.ConfigTypeBoolean, def: cfgStr("true"), doc: "Enable auto creation of topics on the server."},
	{name: "auto.leader.rebalance.enable", typ: kmsg.ConfigTypeBoolean, def: cfgStr("true"), doc: "Move leadership back to preferred replicas when brokers lead too few of theirs."},
	{name: "broker.heartbeat.interval.ms", typ: kmsg.ConfigTypeInt, def: cfgStr("2000"), valid: atLeast(1), doc: "How often a broker heartbeats to the active controller."},
	{name: "broker.rack", typ: kmsg.ConfigTypeString, doc: "The rack of the broker, for rack-aware replica placement."},
	{name: "broker.session.timeout.ms", typ: kmsg.ConfigTypeInt, def: cfgStr("9000"), valid: atLeast(1), doc: "A broker that has not heartbeated for this long is fenced and its leaderships move."},
	{name: "controller.listener.names", typ: kmsg.ConfigTypeString, doc: "The listener (in listeners) the controller port binds to; by default a voter binds its controller.quorum.voters entry."},
	{name: "controller.quorum.election.timeout.ms", typ: kmsg.ConfigTypeInt, def: cfgStr("1000"), valid: atLeast(1), doc: "How long a candidate waits for votes."},
	{name: "controller.quorum.fetch.timeout.ms", typ: kmsg.ConfigTypeInt, def: cfgStr("2000"), valid: atLeast(1), doc: "The longest a voter waits for the leader before it starts an election (it starts one after a random time between half of this and all of it)."},
	{name: "controller.quorum.voters", typ: kmsg.ConfigTypeList, def: cfgStr(""), valid: validVoters, doc: "The metadata quorum, id@host:port,...; unset: a standalone broker."},
	{name: "controlled.shutdown.enable", typ: kmsg.ConfigTypeBoolean, def: cfgStr("true"), doc: "On shutdown, move leaderships away before stopping."},
	{name: "compression.type", typ: kmsg.ConfigTypeString, def: cfgStr("producer"), valid: oneOf(compressionTypes...), dynamic: true, doc: "The default compression type for topics."},
	{name: "compression.gzip.level", typ: kmsg.ConfigTypeInt, def: cfgStr("-1"), valid: gzipLevel, dynamic: true, doc: "The compression level for gzip."},
	{name: "compression.lz4.level", typ: kmsg.ConfigTypeInt, def: cfgStr("9"), valid: between(1, 17), dynamic: true, doc: "The compression level for lz4."},
	{name: "compression.zstd.level", typ: kmsg.ConfigTypeInt, def: cfgStr("3"), valid: between(-131072, 22), dynamic: true, doc: "The compression level for zstd."},
	{name: "connection.failed.authentication.delay.ms", typ: kmsg.ConfigTypeInt, def: cfgStr("100"), valid: atLeast(0),
		doc: "How long the answer to a failed authentication is delayed; repeated failures of one user or address are spaced out in proportion (0: neither)."},
	{name: "default.replication.factor", typ: kmsg.ConfigTypeInt, def: cfgStr("1"), valid: atLeast(1), doc: "The replication factor for automatically created topics."},
	{name: "delete.topic.enable", typ: kmsg.ConfigTypeBoolean, def: cfgStr("true"), doc: "Enables topic deletion."},
	{name: "leader.imbalance.check.interval.seconds", typ: kmsg.ConfigTypeLong, def: cfgStr("300"), valid: atLeast(1), doc: "How often the controller checks for leader imbalance."},
	{name: "log.cleaner.delete.retention.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("86400000"), valid: atLeast(0), dynamic: true, doc: "How long delete tombstones are retained."},
	{name: "log.cleaner.max.compaction.lag.ms", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(1), dynamic: true, doc: "The maximum time a message remains ineligible for compaction."},
	{name: "log.cleaner.min.cleanable.ratio", typ: kmsg.ConfigTypeDouble, def: cfgStr("0.5"), valid: between(0, 1), dynamic: true, doc: "The minimum ratio of dirty log to total log for a log to be compacted."},
	{name: "log.cleaner.min.compaction.lag.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("0"), valid: atLeast(0), dynamic: true, doc: "The minimum time a message remains uncompacted."},
	{name: "log.cleanup.policy", typ: kmsg.ConfigTypeList, def: cfgStr("delete"), valid: listOf("compact", "delete"), dynamic: true, doc: "The default cleanup policy for topics."},
	{name: "log.flush.interval.messages", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(1), dynamic: true, doc: "Messages accumulated before an fsync."},
	{name: "log.flush.interval.ms", typ: kmsg.ConfigTypeLong, valid: atLeast(0), dynamic: true, doc: "Maximum time a message is kept in memory before an fsync."},
	{name: "log.index.interval.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("4096"), valid: atLeast(0), dynamic: true, doc: "The interval with which an offset index entry is added."},
	{name: "log.index.size.max.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("10485760"), valid: atLeast(4), dynamic: true, doc: "The maximum size of the offset index."},
	{name: "log.local.retention.bytes", typ: kmsg.ConfigTypeLong, def: cfgStr("-2"), valid: atLeast(-2), dynamic: true, doc: "Bytes kept locally with tiered storage."},
	{name: "log.local.retention.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("-2"), valid: atLeast(-2), dynamic: true, doc: "Time kept locally with tiered storage."},
	{name: "log.message.timestamp.after.max.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("3600000"), valid: atLeast(0), dynamic: true, doc: "How far in the future a CreateTime timestamp may be."},
	{name: "log.message.timestamp.before.max.ms", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(0), dynamic: true, doc: "How far in the past a CreateTime timestamp may be."},
	{name: "log.message.timestamp.type", typ: kmsg.ConfigTypeString, def: cfgStr("CreateTime"), valid: oneOf("CreateTime", "LogAppendTime"), dynamic: true, doc: "The default timestamp type of topics."},
	{name: "log.preallocate", typ: kmsg.ConfigTypeBoolean, def: cfgStr("false"), dynamic: true, doc: "Preallocate files (no effect in Tandem)."},
	{name: "log.retention.bytes", typ: kmsg.ConfigTypeLong, def: cfgStr("-1"), dynamic: true, doc: "The maximum size of a partition's log before deleting it."},
	{name: "log.retention.check.interval.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("300000"), valid: atLeast(1), doc: "How often retention and compaction run."},
	{name: "log.retention.hours", typ: kmsg.ConfigTypeInt, def: cfgStr("168"), dynamic: true, doc: "Hours to keep a log (after log.retention.ms and log.retention.minutes)."},
	{name: "log.retention.minutes", typ: kmsg.ConfigTypeInt, dynamic: true, doc: "Minutes to keep a log (after log.retention.ms)."},
	{name: "log.retention.ms", typ: kmsg.ConfigTypeLong, valid: atLeast(-1), dynamic: true, doc: "Milliseconds to keep a log; -1 means no limit."},
	{name: "log.roll.hours", typ: kmsg.ConfigTypeInt, def: cfgStr("168"), valid: atLeast(1), dynamic: true, doc: "The maximum time before a new segment is rolled out (in hours)."},
	{name: "log.roll.jitter.hours", typ: kmsg.ConfigTypeInt, def: cfgStr("0"), valid: atLeast(0), dynamic: true, doc: "Maximum jitter subtracted from the roll time (in hours)."},
	{name: "log.roll.jitter.ms", typ: kmsg.ConfigTypeLong, dynamic: true, doc: "Maximum jitter subtracted from the roll time (in ms)."},
	{name: "log.roll.ms", typ: kmsg.ConfigTypeLong, dynamic: true, doc: "The maximum time before a new segment is rolled out (in ms)."},
	{name: "log.segment.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("1073741824"), valid: atLeast(14), dynamic: true, doc: "The maximum size of a single log file."},
	{name: "log.segment.delete.delay.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("60000"), valid: atLeast(0), dynamic: true, doc: "The time to wait before deleting a file."},
	{name: "max.broker.partitions", typ: kmsg.ConfigTypeInt, def: cfgStr(strconv.Itoa(raftmeta.DefaultMaxBrokerPartitions)), valid: atLeast(1),
		doc: "The most partition replicas one broker may host (KIP-578); creations beyond it fail with POLICY_VIOLATION."},
	{name: "message.max.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("1048588"), valid: atLeast(0), dynamic: true, doc: "The largest record batch size allowed."},
	{name: "min.insync.replicas", typ: kmsg.ConfigTypeInt, def: cfgStr("1"), valid: atLeast(1), dynamic: true, doc: "The minimum number of in-sync replicas for acks=all."},
	{name: "leader.replication.throttled.rate", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(1), dynamic: true,
		doc: "Bytes per second this broker sends, as a leader, to followers out of the ISR named in their topic's leader.replication.throttled.replicas; the default is unlimited."},
	{name: "follower.replication.throttled.rate", typ: kmsg.ConfigTypeLong, def: cfgStr(maxLong), valid: atLeast(1), dynamic: true,
		doc: "Bytes per second this broker replicates, as a follower out of the ISR, of the partitions named in their topic's follower.replication.throttled.replicas; the default is unlimited."},
	{name: "mirror.replication.throttled.rate", typ: kmsg.ConfigTypeLong, def: cfgStr("0"), valid: atLeast(0), dynamic: true,
		doc: "Bytes per second this broker replicates, as a follower, of the mirror partitions named in their topic's mirror.replication.throttled.replicas; 0: unlimited (KIP-1279)."},
	{name: "num.partitions", typ: kmsg.ConfigTypeInt, def: cfgStr("1"), valid: atLeast(1), doc: "The default number of partitions per topic."},
	{name: "queued.max.request.bytes", typ: kmsg.ConfigTypeLong, def: cfgStr("134217728"), valid: atLeast(-1),
		doc: "The bytes of requests being read or waiting for their handler before no more are read (-1: no limit)."},
	{name: "replica.fetch.max.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("1048576"), valid: atLeast(0), doc: "The bytes a follower fetches per partition."},
	{name: "replica.fetch.response.max.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("10485760"), valid: atLeast(0), doc: "The bytes of one replica fetch response."},
	{name: "replica.fetch.wait.max.ms", typ: kmsg.ConfigTypeInt, def: cfgStr("500"), valid: atLeast(0), doc: "How long a follower's fetch waits for data."},
	{name: "replica.lag.time.max.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("30000"), valid: atLeast(1), doc: "A follower that has not caught up for this long leaves the ISR."},
	{name: "socket.request.max.bytes", typ: kmsg.ConfigTypeInt, def: cfgStr("104857600"), valid: atLeast(1), doc: "The maximum number of bytes in a socket request."},
	{name: "tandem.request.read.timeout.ms", typ: kmsg.ConfigTypeLong, def: cfgStr("60000"), valid: atLeast(1),
		doc: "How long a client may take to send one request once its size arrived; slower connections are closed."},
	{name: "tandem.max.partitions.per.request", typ: kmsg.ConfigTypeInt, def: cfgStr(strconv.Itoa(raftmeta.DefaultMaxPartitionsPerRequest)), valid: atLeast(1),
		doc: "The most partitions one CreateTopics or CreatePartitions request may add."},
	{name: "tandem.log.sync", typ: kmsg.ConfigTypeBoolean, def: cfgStr("true"), doc: "Fsync appended batches before acknowledging them (acks != 0)."},
	{name: "tandem.memory.budget", typ: kmsg.ConfigTypeLong, def: cfgStr("268435456"), valid: atLeast(32 << 20),
		doc: "Memory the broker sizes its caches to; tandem serve makes it the Go runtime's soft memory limit (unless GOMEMLIMIT is set)."},
	{name: "unclean.leader.election.enable", typ: kmsg.ConfigTypeBoolean, def: cfgStr("false"), dynamic: true, doc: "Whether replicas not in the ISR may be elected leader as a last resort."},
}

var (
	topicConfigs  = indexConfigs(topicConfigList)
	brokerConfigs = indexConfigs(brokerConfigList)
)

func indexConfigs(list []*configDef) map[string]*configDef {
	m := make(map[string]*configDef, len(list))
	for _, d := range list {
		m[d.name] = d
	}
	return m
}

// validateTopicConfigs checks topic config names and values the way
// Kafka's LogConfig.validate does: an unknown name or a bad value is
// INVALID_CONFIG with a message.
func validateTopicConfigs(configs map[string]string) error {
	names := make([]string, 0, len(configs))
	for k := range configs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		d := topicConfigs[k]
		if d == nil {
			return adminErrorf(kerr.InvalidConfig, "Unknown topic config name: %s", k)
		}
		if err := d.check(configs[k]); err != nil {
			return err
		}
	}
	return nil
}

// configLayers are the places a config value comes from, in Kafka's order
// of precedence: topic override, dynamic config of this broker, dynamic
// cluster-wide default, static broker property, Kafka's default.
type configLayers struct {
	topic   map[string]string
	node    map[string]string
	dynamic map[string]string
	static  map[string]string
}

// brokerLayers are the broker-level layers of l, highest precedence first.
func (l configLayers) brokerLayers() [3]struct {
	m   map[string]string
	src kmsg.ConfigSource
} {
	return [3]struct {
		m   map[string]string
		src kmsg.ConfigSource
	}{
		{l.node, kmsg.ConfigSourceDynamicBrokerConfig},
		{l.dynamic, kmsg.ConfigSourceDynamicDefaultBrokerConfig},
		{l.static, kmsg.ConfigSourceStaticBrokerConfig},
	}
}

// configValue is a resolved config, where it came from, and the synonyms
// (every layer that sets it, highest precedence first, then the default).
type configValue struct {
	value    *string
	source   kmsg.ConfigSource
	synonyms []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
}

func (cv *configValue) add(name string, v *string, src kmsg.ConfigSource) {
	s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
	s.Name, s.Value, s.Source = name, v, src
	cv.synonyms = append(cv.synonyms, s)
}

// broker resolves a broker config.
func (l configLayers) broker(d *configDef) configValue {
	var cv configValue
	for _, layer := range l.brokerLayers() {
		if v, ok := layer.m[d.name]; ok {
			if cv.source == 0 {
				cv.value, cv.source = cfgStr(v), layer.src
			}
			cv.add(d.name, cfgStr(v), layer.src)
		}
	}
	if cv.source == 0 {
		cv.value, cv.source = d.def, kmsg.ConfigSourceDefaultConfig
	}
	cv.add(d.name, d.def, kmsg.ConfigSourceDefaultConfig)
	return cv
}

// topicCfg resolves a topic config: the topic's own value, then the first
// broker synonym set at some broker layer, then Kafka's default.
func (l configLayers) topicCfg(d *configDef) configValue {
	var cv configValue
	if v, ok := l.topic[d.name]; ok {
		cv.value, cv.source = cfgStr(v), kmsg.ConfigSourceDynamicTopicConfig
		cv.add(d.name, cfgStr(v), cv.source)
	}
	for _, s := range d.synonyms {
		for _, layer := range l.brokerLayers() {
			v, ok := layer.m[s.name]
			if !ok {
				continue
			}
			// The synonym lists the broker value as set; the topic's
			// value is converted to the topic config's unit.
			if cv.source == 0 {
				cv.value, cv.source = cfgStr(scaleValue(v, s.scale)), layer.src
			}
			cv.add(s.name, cfgStr(v), layer.src)
		}
	}
	if cv.source == 0 {
		cv.value, cv.source = d.def, kmsg.ConfigSourceDefaultConfig
	}
	// Kafka reports the default under the broker key that holds it.
	name, def := d.name, d.def
	if len(d.synonyms) > 0 {
		name = d.synonyms[len(d.synonyms)-1].name
		if bd := brokerConfigs[name]; bd != nil {
			def = bd.def
		}
	}
	cv.add(name, def, kmsg.ConfigSourceDefaultConfig)
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

// str returns the effective value of a config (a topic config when the
// name is one, else a broker config); "" if null.
func (l configLayers) str(name string) string {
	var cv configValue
	if d := topicConfigs[name]; d != nil && l.topic != nil {
		cv = l.topicCfg(d)
	} else if d := brokerConfigs[name]; d != nil {
		cv = l.broker(d)
	}
	if cv.value == nil {
		return ""
	}
	return strings.TrimSpace(*cv.value)
}

// int returns the effective value of a numeric config (0 if null).
func (l configLayers) int(name string) int64 {
	v, _ := strconv.ParseInt(l.str(name), 10, 64)
	return v
}

func (l configLayers) bool(name string) bool { return strings.EqualFold(l.str(name), "true") }

func (l configLayers) float(name string) float64 {
	f, _ := strconv.ParseFloat(l.str(name), 64) // validated as a double when set
	return f
}

// layers returns the config layers of topic t (nil for broker configs)
// in the latest metadata image.
func (b *Broker) layers(t *raftmeta.Topic) configLayers { return b.layersOf(b.meta.Image(), t) }

// topicLogConfig turns a topic's configs over the broker defaults into the
// engine's LogConfig.
func (b *Broker) topicLogConfig(t *raftmeta.Topic) engine.LogConfig {
	return logConfigFrom(b.layers(t))
}

func logConfigFrom(l configLayers) engine.LogConfig {
	if l.topic == nil {
		l.topic = map[string]string{}
	}
	policy := configList(l.str("cleanup.policy"))
	return engine.LogConfig{
		RetentionMs:            l.int("retention.ms"),
		RetentionBytes:         l.int("retention.bytes"),
		MaxMessageBytes:        int32(l.int("max.message.bytes")),
		Compact:                slices.Contains(policy, engine.CleanupCompact),
		Delete:                 slices.Contains(policy, engine.CleanupDelete),
		LogAppendTime:          l.str("message.timestamp.type") == "LogAppendTime",
		MinCompactionLag:       time.Duration(l.int("min.compaction.lag.ms")) * time.Millisecond,
		DeleteRetention:        time.Duration(l.int("delete.retention.ms")) * time.Millisecond,
		SegmentBytes:           l.int("segment.bytes"),
		SegmentMs:              l.int("segment.ms"),
		MinCleanableDirtyRatio: l.float("min.cleanable.dirty.ratio"),
	}
}

// adminErr is a Kafka error with the message for the response's
// ErrorMessage; errors.As finds its *kerr.Error.
type adminErr struct {
	code *kerr.Error
	msg  string
}

func (e *adminErr) Error() string { return e.msg }
func (e *adminErr) Unwrap() error { return e.code }

func adminErrorf(code *kerr.Error, format string, args ...any) error {
	return &adminErr{code, fmt.Sprintf(format, args...)}
}

// adminErrCode returns the Kafka error code of err and a message for
// ErrorMessage fields (plugin.ErrorCode, plugin.ErrorMessage).
func adminErrCode(err error) (int16, *string) {
	return plugin.ErrorCode(err), plugin.ErrorMessage(err)
}
