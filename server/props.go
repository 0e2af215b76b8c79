package server

import (
	"maps"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server/config"
)

// Props are the broker properties the server acts on, parsed from
// Config.Props (Kafka's server.properties keys). Dynamic cluster-wide
// overrides stored in the metadata image take precedence over them where
// Kafka allows it (see applyTopic and DescribeConfigs).
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
		if d := config.Brokers[k]; d != nil {
			if err := d.Check(m[k]); err != nil {
				return Props{}, err
			}
		}
	}
	l := config.Layers{Static: m}
	p := Props{
		AutoCreateTopics:         l.Bool("auto.create.topics.enable"),
		NumPartitions:            int32(l.Int("num.partitions")),
		DefaultReplicationFactor: int16(l.Int("default.replication.factor")),
		MessageMaxBytes:          int32(l.Int("message.max.bytes")),
		SocketRequestMaxBytes:    int32(l.Int("socket.request.max.bytes")),
		// Resolved as a topic's retention.ms: Kafka's precedence of the
		// ms, minutes and hours keys.
		LogRetentionMs:          config.Layers{Static: m, Topic: map[string]string{}}.Int("retention.ms"),
		LogRetentionBytes:       l.Int("log.retention.bytes"),
		RetentionCheckInterval:  time.Duration(l.Int("log.retention.check.interval.ms")) * time.Millisecond,
		LogCleanupPolicy:        config.List(l.Str("log.cleanup.policy")),
		LogMessageTimestampType: l.Str("log.message.timestamp.type"),
		DeleteTopicEnable:       l.Bool("delete.topic.enable"),
		SyncWrites:              l.Bool("tandem.log.sync"),
		MemoryBudget:            l.Int("tandem.memory.budget"),
		PartitionLimits: raftmeta.PartitionLimits{
			PerRequest: int(l.Int("tandem.max.partitions.per.request")),
			PerBroker:  int(l.Int("max.broker.partitions")),
		},
		QueuedMaxRequestBytes: l.Int("queued.max.request.bytes"),
		RequestReadTimeout:    time.Duration(l.Int("tandem.request.read.timeout.ms")) * time.Millisecond,
		FailedAuthDelay:       time.Duration(l.Int("connection.failed.authentication.delay.ms")) * time.Millisecond,
		static:                make(map[string]string, len(m)),
	}
	var err error
	if p.Cluster, err = parseClusterProps(l); err != nil {
		return Props{}, err
	}
	for k, v := range m {
		p.static[k] = v
		if config.Brokers[k] == nil {
			p.Unknown = append(p.Unknown, k)
		}
	}
	sort.Strings(p.Unknown)
	return p, nil
}

func cfgStr(s string) *string { return &s }

// securityProps are the keys of listeners, TLS and SASL (package
// network), of client quotas (package quota) and of the authorizer; they
// are not reported as unknown properties.
var securityProps = regexp.MustCompile(`^(listeners|advertised\.listeners|listener\.security\.protocol\.map|inter\.broker\.listener\.name|listener\.name\..*|ssl\..*|sasl\..*|connections\.max\.reauth\.ms|tandem\.sasl\..*|super\.users|allow\.everyone\.if\.no\.acl\.found|authorizer\.class\.name|quota\.window\..*)$`)
