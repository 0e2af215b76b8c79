package plugin

import "context"

// The broker's web console (package console) shows what plugins know
// through the two capabilities below. Both are read-only snapshots, safe
// to call from any goroutine once the plugin has started; they may block
// until ctx ends while a coordinator answers.

// GroupDescriber is offered by the consumer-groups plugin: the groups
// coordinated on this broker, with their members and committed offsets.
type GroupDescriber interface {
	DescribeGroups(ctx context.Context) []GroupView
}

// GroupView is one consumer group as the console shows it. State is
// Kafka's name ("Stable", "Empty", ...).
type GroupView struct {
	Name         string                             `json:"name"`
	State        string                             `json:"state"`
	ProtocolType string                             `json:"protocolType"`
	Protocol     string                             `json:"protocol"`
	Generation   int32                              `json:"generation"`
	Members      []GroupMemberView                  `json:"members"`
	Offsets      map[TopicPartition]CommittedOffset `json:"-"`
}

// GroupMemberView is one member of a group.
type GroupMemberView struct {
	MemberID   string `json:"memberId"`
	InstanceID string `json:"instanceId"` // "" without static membership
	ClientID   string `json:"clientId"`
	ClientHost string `json:"clientHost"`
}

// HealthReporter is offered by plugins that have degraded states of their
// own for /healthz (the mirror plugin: a source it cannot reach). Health
// is called for every /healthz request: no I/O, one line per problem,
// none when all is well. The broker answers "ok" followed by a
// "warning:" line for each.
type HealthReporter interface {
	Health() []string
}

// MirrorDescriber is offered by the mirror plugin: every mirror, as
// DescribeMirrors answers an operator allowed everything.
type MirrorDescriber interface {
	DescribeMirrors(ctx context.Context) []MirrorView
}

// MirrorView is one mirror. State is the mirror's own (MIRRORING,
// PAUSED, STOPPED once every partition failed over, or FAILED), Error
// why it fails.
type MirrorView struct {
	Name       string                `json:"name"`
	Source     string                `json:"source"` // the source cluster's bootstrap servers
	State      string                `json:"state"`
	Error      string                `json:"error"`
	ACLSync    string                `json:"aclSync"` // "" when it works or is off, else what is wrong
	Partitions []MirrorPartitionView `json:"partitions"`
	Diverged   []DivergedView        `json:"diverged"`
}

// MirrorPartitionView is one mirrored partition. Lag and LagMs are -1
// while unknown (the source's end offset never learned): unknown is never
// shown as 0.
type MirrorPartitionView struct {
	Topic string `json:"topic"`
	// SourceTopic is the topic's name on the source when it is not
	// Topic (a mirror with mirror.topic.prefix).
	SourceTopic       string `json:"sourceTopic,omitempty"`
	Partition         int32  `json:"partition"`
	State             string `json:"state"` // UNKNOWN, PREPARING, MIRRORING, ..., as the KIP names them
	Reason            string `json:"reason"`
	SourceOffset      int64  `json:"sourceOffset"`     // the source's end offset as last learned, -1 unknown
	SourceOffsetTime  int64  `json:"sourceOffsetTime"` // when it was learned, Unix ms (0 unknown)
	DestinationOffset int64  `json:"destinationOffset"`
	Lag               int64  `json:"lag"`
	LagMs             int64  `json:"lagMs"`
	// SourceStale: SourceOffset may not be the source's end now (not
	// learned lately, or the source cannot be asked): Lag and LagMs are
	// lower bounds of what a failover would give up.
	SourceStale bool `json:"sourceStale"`
	// DestinationIssue is why the partition here does not hold its copy
	// safely (no leader, an ISR below min.insync.replicas); "" if none.
	DestinationIssue string `json:"destinationIssue"`
}

// DivergedView is an entry of a mirror's divergence manifest: records a
// truncation removed from a mirror partition, first copied to partition
// Partition of Topic + ".diverged" at [CopyStart, CopyEnd).
type DivergedView struct {
	Topic          string `json:"topic"`
	SourceTopic    string `json:"sourceTopic,omitempty"` // as MirrorPartitionView's
	Partition      int32  `json:"partition"`
	FirstOffset    int64  `json:"firstOffset"`
	LastOffset     int64  `json:"lastOffset"`
	FirstTimestamp int64  `json:"firstTimestamp"`
	LastTimestamp  int64  `json:"lastTimestamp"` // Unix ms of the first and last records removed
	Records        int64  `json:"records"`
	TruncatedAt    int64  `json:"truncatedAt"` // Unix ms
	Cause          string `json:"cause"`
	CopyStart      int64  `json:"copyStart"`
	CopyEnd        int64  `json:"copyEnd"`
}
