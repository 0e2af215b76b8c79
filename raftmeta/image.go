// Package raftmeta is Tandem's metadata quorum: a replicated log of
// metadata records on hashicorp/raft, the controller that decides what to
// write (topics, leaders, epochs, configs, producer-id blocks), and the
// immutable metadata image that brokers serve from.
package raftmeta

import (
	"maps"
	"slices"

	"github.com/tandem-kafka/tandem/uuid"
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
}

// Partition is one partition's assignment and leadership.
type Partition struct {
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	Leader      int32   `json:"leader"` // -1 when offline
	LeaderEpoch int32   `json:"leaderEpoch"`
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

// ensureMaps makes every map of the image non-nil, so that readers never
// meet a nil map and restored images compare equal to applied ones.
func (img *Image) ensureMaps() {
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

// restored finishes an image decoded from JSON: TopicsByID is not
// serialized, so it is rebuilt from Topics.
func (img *Image) restored() {
	img.ensureMaps()
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
		c.Partitions[i] = p
	}
	c.Configs = maps.Clone(t.Configs)
	return &c
}
