package metadata

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Every raft log command is one JSON-encoded batch of records:
//
//	{"records":[{"type":"Topic","topic":{...}}, {"type":"Partition","partition":{...}}]}
//
// A batch applies atomically: if any record does not fit the current image
// (which can only happen when two decisions raced, since the controller
// validates before proposing), the whole batch is rejected, the image is
// left as it was, and the proposer gets the error. Applying never looks at
// clocks, randomness or local state: every ID is chosen by the controller
// and carried in the record, so that every voter builds the same image.
//
// The record types follow Apache Kafka's KRaft records:
//
//   - Cluster {clusterId}: the cluster ID, written once by the first leader
//     of a new cluster (Kafka keeps it in meta.properties; here it is
//     replicated so that every voter agrees).
//   - RegisterBroker {broker}: adds or replaces a broker registration
//     (Kafka's RegisterBrokerRecord). The broker's epoch becomes the raft
//     index of the record.
//   - BrokerChange {id, epoch, fenced?, shuttingDown?}: fences, unfences
//     or marks a controlled shutdown of the registration with that epoch
//     (Fence-, UnfenceBroker- and BrokerRegistrationChangeRecord).
//   - Topic {name, id, configs, internal}: creates a topic without
//     partitions (TopicRecord; the initial configs ride along instead of
//     separate ConfigRecords). The name and the ID must both be unused.
//   - Partition {topicId, partition, replicas, isr, leader, leaderEpoch}:
//     adds the next partition of a topic (PartitionRecord); partition must
//     equal the topic's current partition count.
//   - PartitionChange {topicId, partition, leader?, leaderEpoch?, isr?,
//     replicas?, reassignment?}: changes leadership, ISR or assignment of
//     an existing partition (PartitionChangeRecord). Unlike Kafka, the new
//     leader epoch is explicit; it may never go down. The partition epoch
//     goes up by one.
//   - Config {resourceType, resourceName, key, value}: sets (value non-nil)
//     or deletes (value null) one dynamic config (ConfigRecord). Resource
//     type 2 is a topic (by name), 4 a broker: name "" is the cluster-wide
//     default, a decimal broker ID is that broker.
//   - RemoveTopic {topicId}: deletes a topic (RemoveTopicRecord).
//   - ProducerIds {first, next}: hands out producer ids [first, next)
//     (ProducerIdsRecord); first must equal the image's NextProducerID.

// RecordType tags a record.
type RecordType string

const (
	RecordCluster         RecordType = "Cluster"
	RecordRegisterBroker  RecordType = "RegisterBroker"
	RecordBrokerChange    RecordType = "BrokerChange"
	RecordTopic           RecordType = "Topic"
	RecordPartition       RecordType = "Partition"
	RecordPartitionChange RecordType = "PartitionChange"
	RecordConfig          RecordType = "Config"
	RecordRemoveTopic     RecordType = "RemoveTopic"
	RecordProducerIDs     RecordType = "ProducerIds"
)

// Record is one metadata record; exactly the field named by Type is set.
type Record struct {
	Type            RecordType             `json:"type"`
	ClusterID       string                 `json:"clusterId,omitempty"`
	Broker          *Broker                `json:"broker,omitempty"`
	BrokerChange    *BrokerChangeRecord    `json:"brokerChange,omitempty"`
	Topic           *TopicRecord           `json:"topic,omitempty"`
	Partition       *PartitionRecord       `json:"partition,omitempty"`
	PartitionChange *PartitionChangeRecord `json:"partitionChange,omitempty"`
	Config          *ConfigRecord          `json:"config,omitempty"`
	RemoveTopic     *UUID                  `json:"removeTopic,omitempty"`
	ProducerIDs     *ProducerIDsRecord     `json:"producerIds,omitempty"`
	SecurityRecords                        // ACL, Scram, ClientQuota (security.go)
	MirrorRecords                          // Mirror, RemoveMirror, MirrorTopic (mirror.go)
}

// TopicRecord creates a topic.
type TopicRecord struct {
	Name     string            `json:"name"`
	ID       UUID              `json:"id"`
	Configs  map[string]string `json:"configs,omitempty"`
	Internal bool              `json:"internal,omitempty"`
}

// PartitionRecord adds a partition.
type PartitionRecord struct {
	TopicID     UUID    `json:"topicId"`
	Partition   int32   `json:"partition"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leaderEpoch"`
}

// PartitionChangeRecord changes an existing partition; nil fields stay.
type PartitionChangeRecord struct {
	TopicID     UUID    `json:"topicId"`
	Partition   int32   `json:"partition"`
	Leader      *int32  `json:"leader,omitempty"`
	LeaderEpoch *int32  `json:"leaderEpoch,omitempty"`
	ISR         []int32 `json:"isr,omitempty"`
	Replicas    []int32 `json:"replicas,omitempty"`
	// Reassignment, when set, replaces the adding and removing replicas
	// (both empty: no reassignment in progress).
	Reassignment *Reassignment `json:"reassignment,omitempty"`
}

// Reassignment is the part of a partition a reassignment changes.
type Reassignment struct {
	Adding   []int32 `json:"adding,omitempty"`
	Removing []int32 `json:"removing,omitempty"`
}

// BrokerChangeRecord changes a broker registration's state; nil fields
// stay. It applies only to the registration of that epoch.
type BrokerChangeRecord struct {
	ID           int32 `json:"id"`
	Epoch        int64 `json:"epoch"`
	Fenced       *bool `json:"fenced,omitempty"`
	ShuttingDown *bool `json:"shuttingDown,omitempty"`
	DiskFull     *bool `json:"diskFull,omitempty"`
}

// ConfigResource is the kind of resource a config belongs to; the values
// are Kafka's resource type codes (kmsg.ConfigResourceType).
type ConfigResource int8

const (
	ConfigResourceTopic  ConfigResource = 2
	ConfigResourceBroker ConfigResource = 4
)

// ConfigRecord sets or deletes one config.
type ConfigRecord struct {
	ResourceType ConfigResource `json:"resourceType"`
	ResourceName string         `json:"resourceName"`
	Key          string         `json:"key"`
	Value        *string        `json:"value"`
}

// ProducerIDsRecord hands out the producer ids [First, Next).
type ProducerIDsRecord struct {
	First int64 `json:"first"`
	Next  int64 `json:"next"`
}

type recordBatch struct {
	Records []Record `json:"records"`
}

// EncodeBatch encodes recs as one raft log command.
func EncodeBatch(recs []Record) ([]byte, error) {
	return json.Marshal(recordBatch{Records: recs})
}

// DecodeBatch decodes a raft log command into its records.
func DecodeBatch(data []byte) ([]Record, error) {
	var b recordBatch
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, err
	}
	return b.Records, nil
}

// builder applies records to a copy of an image. Maps are copied once per
// batch and a topic is cloned the first time the batch touches it, so the
// published image and its topics are never modified.
type builder struct {
	img   *Image
	owned map[*Topic]bool
	index uint64 // the raft index of the batch
}

func newBuilder(old *Image) *builder {
	img := *old
	img.Brokers = cloneMap(old.Brokers)
	img.Topics = cloneMap(old.Topics)
	img.TopicsByID = cloneMap(old.TopicsByID)
	img.BrokerConfigs = cloneMap(old.BrokerConfigs)
	img.NodeConfigs = cloneMap(old.NodeConfigs)
	return &builder{img: &img, owned: map[*Topic]bool{}}
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// topic returns a mutable copy of the topic, installed in the new image.
func (b *builder) topic(id UUID) (*Topic, error) {
	t := b.img.TopicsByID[id]
	if t == nil {
		return nil, fmt.Errorf("topic %s: %w", id, kerr.UnknownTopicID)
	}
	if !b.owned[t] {
		t = t.clone()
		b.owned[t] = true
		b.img.Topics[t.Name] = t
		b.img.TopicsByID[id] = t
	}
	return t, nil
}

func (b *builder) apply(r *Record) error {
	switch r.Type {
	case RecordCluster, RecordRegisterBroker, RecordBrokerChange:
		return b.applyBroker(r)
	case RecordTopic, RecordRemoveTopic:
		return b.applyTopic(r)
	case RecordPartition:
		return b.applyPartition(r)
	case RecordPartitionChange:
		return b.applyPartitionChange(r)
	case RecordConfig:
		return b.applyConfig(r)
	case RecordProducerIDs:
		pr := r.ProducerIDs
		if pr == nil || pr.First != b.img.NextProducerID || pr.Next <= pr.First {
			return badRecord(r, "producer ids %+v, next is %d", pr, b.img.NextProducerID)
		}
		b.img.NextProducerID = pr.Next
	default:
		if ok, err := b.applySecurity(r); ok {
			return err
		}
		if ok, err := b.applyMirror(r); ok {
			return err
		}
		return badRecord(r, "unknown record type")
	}
	return nil
}

// badRecord is the error of a record that cannot apply: INVALID_REQUEST,
// saying what is wrong with it.
func badRecord(r *Record, format string, args ...any) error {
	return fmt.Errorf("%s record: %s: %w", r.Type, fmt.Sprintf(format, args...), kerr.InvalidRequest)
}

// applyBroker applies the cluster's ID, a broker's registration or a
// change of a registered broker.
func (b *builder) applyBroker(r *Record) error {
	img := b.img
	switch r.Type {
	case RecordCluster:
		if r.ClusterID == "" || img.ClusterID != "" && img.ClusterID != r.ClusterID {
			return badRecord(r, "cluster ID %q after %q", r.ClusterID, img.ClusterID)
		}
		img.ClusterID = r.ClusterID

	case RecordRegisterBroker:
		if r.Broker == nil || r.Broker.ID < 0 {
			return badRecord(r, "missing or negative broker")
		}
		br := *r.Broker
		br.Epoch = int64(b.index)
		img.Brokers[br.ID] = br

	case RecordBrokerChange:
		bc := r.BrokerChange
		if bc == nil {
			return badRecord(r, "missing change")
		}
		br, ok := img.Brokers[bc.ID]
		if !ok || br.Epoch != bc.Epoch {
			return fmt.Errorf("broker %d epoch %d is not registered (current epoch %d): %w", bc.ID, bc.Epoch, br.Epoch, kerr.StaleBrokerEpoch)
		}
		if bc.Fenced != nil {
			br.Fenced = *bc.Fenced
		}
		if bc.ShuttingDown != nil {
			br.ShuttingDown = *bc.ShuttingDown
		}
		if bc.DiskFull != nil {
			br.DiskFull = *bc.DiskFull
		}
		img.Brokers[br.ID] = br
	}
	return nil
}

// applyTopic applies a topic's creation (without partitions) or removal.
func (b *builder) applyTopic(r *Record) error {
	img := b.img
	if r.Type == RecordRemoveTopic {
		if r.RemoveTopic == nil {
			return badRecord(r, "missing topic ID")
		}
		t := img.TopicsByID[*r.RemoveTopic]
		if t == nil {
			return fmt.Errorf("topic %s: %w", *r.RemoveTopic, kerr.UnknownTopicID)
		}
		delete(img.TopicsByID, t.ID)
		delete(img.Topics, t.Name)
		return nil
	}
	tr := r.Topic
	switch {
	case tr == nil || tr.ID.IsZero():
		return badRecord(r, "missing topic or ID")
	case img.Topics[tr.Name] != nil:
		return fmt.Errorf("topic %q: %w", tr.Name, kerr.TopicAlreadyExists)
	case img.TopicsByID[tr.ID] != nil:
		return badRecord(r, "topic ID %s already in use", tr.ID)
	}
	t := &Topic{Name: tr.Name, ID: tr.ID, Partitions: []Partition{}, Internal: tr.Internal}
	if len(tr.Configs) > 0 {
		t.Configs = cloneMap(tr.Configs)
	}
	b.owned[t] = true
	img.Topics[t.Name] = t
	img.TopicsByID[t.ID] = t
	return nil
}

// applyPartition applies a new partition, the next of its topic.
func (b *builder) applyPartition(r *Record) error {
	pr := r.Partition
	if pr == nil {
		return badRecord(r, "missing partition")
	}
	t, err := b.topic(pr.TopicID)
	if err != nil {
		return err
	}
	if int(pr.Partition) != len(t.Partitions) || len(pr.Replicas) == 0 {
		return badRecord(r, "partition %d of %q with %d replicas, topic has %d partitions", pr.Partition, t.Name, len(pr.Replicas), len(t.Partitions))
	}
	t.Partitions = append(t.Partitions, Partition{
		Replicas:    slices.Clone(pr.Replicas),
		ISR:         slices.Clone(pr.ISR),
		Leader:      pr.Leader,
		LeaderEpoch: pr.LeaderEpoch,
	})
	return nil
}

// applyPartitionChange applies a change of a partition's leader, epoch,
// ISR, replicas or reassignment, which bumps its partition epoch.
func (b *builder) applyPartitionChange(r *Record) error {
	pc := r.PartitionChange
	if pc == nil {
		return badRecord(r, "missing change")
	}
	t, err := b.topic(pc.TopicID)
	if err != nil {
		return err
	}
	if pc.Partition < 0 || int(pc.Partition) >= len(t.Partitions) {
		return fmt.Errorf("partition %d of %q: %w", pc.Partition, t.Name, kerr.UnknownTopicOrPartition)
	}
	p := &t.Partitions[pc.Partition]
	if pc.LeaderEpoch != nil {
		if *pc.LeaderEpoch < p.LeaderEpoch {
			return badRecord(r, "leader epoch %d below current %d", *pc.LeaderEpoch, p.LeaderEpoch)
		}
		p.LeaderEpoch = *pc.LeaderEpoch
	}
	if pc.Leader != nil {
		p.Leader = *pc.Leader
	}
	if pc.ISR != nil {
		p.ISR = slices.Clone(pc.ISR)
	}
	if pc.Replicas != nil {
		p.Replicas = slices.Clone(pc.Replicas)
	}
	if ra := pc.Reassignment; ra != nil {
		p.AddingReplicas, p.RemovingReplicas = slices.Clone(ra.Adding), slices.Clone(ra.Removing)
	}
	p.PartitionEpoch++
	return nil
}

// applyConfig applies a config set or deleted on a topic, a broker (all
// brokers for an empty name) or a group.
func (b *builder) applyConfig(r *Record) error {
	img := b.img
	cr := r.Config
	if cr == nil {
		return badRecord(r, "missing config")
	}
	switch cr.ResourceType {
	case ConfigResourceTopic:
		t0 := img.Topics[cr.ResourceName]
		if t0 == nil {
			return fmt.Errorf("topic %q: %w", cr.ResourceName, kerr.UnknownTopicOrPartition)
		}
		t, _ := b.topic(t0.ID)
		t.Configs = setConfig(t.Configs, cr.Key, cr.Value)
	case ConfigResourceBroker:
		if cr.ResourceName == "" {
			img.BrokerConfigs = setConfig(img.BrokerConfigs, cr.Key, cr.Value)
			break
		}
		id, err := strconv.ParseInt(cr.ResourceName, 10, 32)
		if err != nil || id < 0 {
			return badRecord(r, "broker resource name %q", cr.ResourceName)
		}
		if m := setConfig(img.NodeConfigs[int32(id)], cr.Key, cr.Value); m != nil {
			img.NodeConfigs[int32(id)] = m
		} else {
			delete(img.NodeConfigs, int32(id))
		}
	case ConfigResourceGroup:
		if cr.ResourceName == "" {
			return badRecord(r, "empty group name")
		}
		b.setGroupConfig(cr)
	default:
		return badRecord(r, "resource type %d", cr.ResourceType)
	}
	return nil
}

// setConfig returns a copy of m with key set to *value, or deleted if value
// is nil. An empty result is nil: unset configs are absent, not empty, so
// that an image restored from JSON compares equal to the one it came from.
func setConfig(m map[string]string, key string, value *string) map[string]string {
	m = cloneMap(m)
	if value != nil {
		m[key] = *value
	} else {
		delete(m, key)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// Apply returns the image that results from applying recs, the batch at
// raft index index, to old, or an error and no image if any record does
// not apply. old is not modified.
func Apply(old *Image, recs []Record, index uint64) (*Image, error) {
	b := newBuilder(old)
	b.index = index
	for i := range recs {
		if err := b.apply(&recs[i]); err != nil {
			return nil, err
		}
	}
	b.img.EnsureMaps()
	return b.img, nil
}
