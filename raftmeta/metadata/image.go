// Package metadata is Tandem's cluster metadata: the metadata records and
// their encoding (records.go), the immutable image that brokers serve from
// (Image: brokers, topics and partitions, configs, producer ids, ACLs, SCRAM
// credentials, client quotas, cluster mirrors, group configs), the
// deterministic apply of a record batch to an image (Apply), what
// changed between two images (Diff), and the arguments of the
// controller's decisions (decisions.go: TopicSpec, ConfigChange,
// ScramChange).
//
// It is pure: no raft, no I/O, no goroutines. Applying a batch looks at
// nothing but the image and the records, so every node that applies the
// same log builds the same image. The controller, package raftmeta,
// decides which records to write and replicates them on raft.
package metadata

import (
	"maps"
	"slices"

	"github.com/tandem-kafka/tandem/internal/uuid"
)

// UUID is a Kafka UUID (topic IDs), the same type as engine.TopicID.
type UUID = uuid.UUID

// Broker is a registered broker and the listener clients reach it on.
type Broker struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
	Rack string `json:"rack,omitempty"`
	// Endpoints lists every advertised listener, "NAME://host:port,...";
	// Host and Port are the inter-broker listener's.
	Endpoints string `json:"endpoints,omitempty"`
	// Epoch is the broker epoch: the raft index of the registration
	// record, as in Kafka. A replica fetch must carry it (KIP-903).
	Epoch int64 `json:"epoch,omitempty"`
	// Incarnation is chosen by each start of the broker process, so that
	// a second process with the same node ID is told apart.
	Incarnation UUID `json:"incarnation,omitzero"`
	// Fenced brokers lead nothing and are not in any ISR: registered
	// brokers start fenced until they have caught up with the metadata,
	// and are fenced again when their session expires.
	Fenced bool `json:"fenced,omitempty"`
	// ShuttingDown: a controlled shutdown is in progress; leaderships
	// move away and the broker joins no ISR.
	ShuttingDown bool `json:"shuttingDown,omitempty"`
	// DiskFull: the broker's heartbeats say its data directory is full
	// (it refuses client and replica writes): it leads nothing and joins
	// no ISR until it has space again, as a Kafka broker whose log
	// directory went offline, but it stays registered and serves reads.
	DiskFull bool `json:"diskFull,omitempty"`
	// MetadataAddr is where a broker that is not a voter receives the
	// metadata log (a raft non-voter's address).
	MetadataAddr string `json:"metadataAddr,omitempty"`
}

// Live reports whether the broker may lead and be in an ISR.
func (b Broker) Live() bool { return !b.Fenced && !b.ShuttingDown && !b.DiskFull }

// Partition is one partition's assignment and leadership.
type Partition struct {
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	Leader      int32   `json:"leader"` // -1 when offline
	LeaderEpoch int32   `json:"leaderEpoch"`
	// PartitionEpoch goes up with every change of the partition; an
	// AlterPartition must name the current one (Kafka's partition epoch).
	PartitionEpoch int32 `json:"partitionEpoch,omitempty"`
	// AddingReplicas and RemovingReplicas describe a reassignment in
	// progress: Replicas holds both the old and the new replicas until
	// every added replica is in the ISR.
	AddingReplicas   []int32 `json:"addingReplicas,omitempty"`
	RemovingReplicas []int32 `json:"removingReplicas,omitempty"`
}

// Target is the assignment a reassignment of p goes to: its replicas but
// the removing ones (all of them when no reassignment is in progress).
func (p Partition) Target() []int32 {
	return slices.DeleteFunc(slices.Clone(p.Replicas), func(r int32) bool { return slices.Contains(p.RemovingReplicas, r) })
}

// Topic is a topic in the image.
type Topic struct {
	Name       string            `json:"name"`
	ID         UUID              `json:"id"`
	Partitions []Partition       `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"` // only keys set on the topic
	Internal   bool              `json:"internal,omitempty"`
}

// Image is an immutable snapshot of the cluster metadata. A new Image is
// built for every applied record batch; readers may keep and share one
// without locks. Nothing in an Image may be modified after it is published.
type Image struct {
	// Index is the raft log index the image reflects.
	Index     uint64 `json:"index"`
	ClusterID string `json:"clusterId"`
	// ControllerID is the node ID of the current raft leader.
	ControllerID int32             `json:"controllerId"`
	Brokers      map[int32]Broker  `json:"brokers"`
	Topics       map[string]*Topic `json:"topics"` // by name
	TopicsByID   map[UUID]*Topic   `json:"-"`
	// BrokerConfigs holds dynamic cluster-wide broker configs (the
	// default broker resource, name "").
	BrokerConfigs map[string]string `json:"brokerConfigs,omitempty"`
	// NodeConfigs holds dynamic per-broker configs (broker resource
	// named by the broker's ID), by broker ID.
	NodeConfigs map[int32]map[string]string `json:"nodeConfigs,omitempty"`
	// NextProducerID is the first producer id not yet handed out.
	NextProducerID int64 `json:"nextProducerId"`
	// ACLs, SCRAM credentials and client quotas (security.go).
	securityImage
	// Cluster mirrors (mirror.go).
	mirrorImage
	// Group configs (groups.go).
	groupImage
}

// Topic returns the topic with the given ID, or nil.
func (img *Image) Topic(id UUID) *Topic { return img.TopicsByID[id] }

// EnsureMaps makes every map of the image non-nil, so that readers never
// meet a nil map and restored images compare equal to applied ones.
func (img *Image) EnsureMaps() {
	if img.Brokers == nil {
		img.Brokers = map[int32]Broker{}
	}
	if img.Topics == nil {
		img.Topics = map[string]*Topic{}
	}
	if img.BrokerConfigs == nil {
		img.BrokerConfigs = map[string]string{}
	}
	if img.NodeConfigs == nil {
		img.NodeConfigs = map[int32]map[string]string{}
	}
	if img.TopicsByID == nil {
		img.TopicsByID = map[UUID]*Topic{}
	}
}

// Restored finishes an image decoded from JSON (a snapshot): TopicsByID
// is not serialized, so it is rebuilt from Topics.
func (img *Image) Restored() {
	img.EnsureMaps()
	img.TopicsByID = make(map[UUID]*Topic, len(img.Topics))
	for _, t := range img.Topics {
		img.TopicsByID[t.ID] = t
	}
}

func (t *Topic) clone() *Topic {
	c := *t
	c.Partitions = make([]Partition, len(t.Partitions))
	for i, p := range t.Partitions {
		p.Replicas = slices.Clone(p.Replicas)
		p.ISR = slices.Clone(p.ISR)
		p.AddingReplicas = slices.Clone(p.AddingReplicas)
		p.RemovingReplicas = slices.Clone(p.RemovingReplicas)
		c.Partitions[i] = p
	}
	c.Configs = maps.Clone(t.Configs)
	return &c
}
