// Package raftmeta is Tandem's metadata quorum: a replicated log of
// metadata records on hashicorp/raft, the controller that decides what to
// write (topics, leaders, epochs, configs, producer-id blocks), and the
// immutable metadata image that brokers serve from.
package raftmeta

import "encoding/hex"

// UUID is a Kafka UUID (topic IDs). It is the same shape as engine.TopicID.
type UUID [16]byte

func (u UUID) String() string { return hex.EncodeToString(u[:]) }

// IsZero reports whether u is the all-zero UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// Broker is a registered broker and the listener clients reach it on.
type Broker struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
	Rack string `json:"rack,omitempty"`
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
	// NextProducerID is the first producer id not yet handed out.
	NextProducerID int64 `json:"nextProducerId"`
}
