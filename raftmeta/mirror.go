package raftmeta

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Cluster mirroring metadata (KIP-1279): mirror definitions with their
// configs (the MIRROR config resource, type 64) and which topics each
// mirror manages. The records are:
//
//   - Mirror {mirror}: creates a mirror, or replaces its configs.
//   - RemoveMirror {name}: deletes a mirror; its topics stay as they are.
//   - MirrorTopic {mirrorTopic}: makes a topic a member of a mirror
//     (removing it from any other), or marks the membership stopped: a
//     stopped topic is writable and is kept only to find its last mirror
//     epoch on failback.
//   - MirrorSync {mirrorSync}: the metadata sync's memory of a mirror: the
//     source cluster ID it first saw and the ACLs it created here.
//
// Mirror topics themselves are ordinary Topic and Partition records,
// written in the same batch as their MirrorTopic records so that a topic
// never exists half-added. So is the topic's mirror.name config: set with
// the membership and cleared with its stop, so that no image shows a
// writable topic that names a mirror, or a mirrored one that does not
// (a failback checks it on the other cluster to tell a loop from a
// failed-over topic).

const (
	RecordMirror       RecordType = "Mirror"
	RecordRemoveMirror RecordType = "RemoveMirror"
	RecordMirrorTopic  RecordType = "MirrorTopic"
	RecordMirrorSync   RecordType = "MirrorSync"
)

// ConfigResourceMirror is the MIRROR config resource type of KIP-1279.
const ConfigResourceMirror ConfigResource = 64

// MirrorNameConfig is the KIP's topic config naming the mirror that
// actively mirrors the topic; only the mirror records here change it.
const MirrorNameConfig = "mirror.name"

// mirrorNameRecord sets (mirror != "") or clears topic's mirror.name.
func mirrorNameRecord(topic, mirror string) Record {
	var v *string
	if mirror != "" {
		v = &mirror
	}
	return Record{Type: RecordConfig, Config: &ConfigRecord{ResourceType: ConfigResourceTopic, ResourceName: topic, Key: MirrorNameConfig, Value: v}}
}

// Mirror is a cluster mirror in the image.
type Mirror struct {
	Name    string                 `json:"name"`
	Configs map[string]string      `json:"configs,omitempty"`
	Topics  map[string]MirrorTopic `json:"topics,omitempty"` // by topic name
	// SourceClusterID is the source cluster's ID as the metadata sync
	// first saw it ("" until then); a different one halts the sync.
	SourceClusterID string `json:"sourceClusterId,omitempty"`
	// ManagedACLs are the ACL bindings the metadata sync created here:
	// the only ones it may delete.
	ManagedACLs []ACL `json:"managedAcls,omitempty"`
}

// MirrorSyncRecord replaces a mirror's SourceClusterID and ManagedACLs.
type MirrorSyncRecord struct {
	Mirror          string `json:"mirror"`
	SourceClusterID string `json:"sourceClusterId,omitempty"`
	ManagedACLs     []ACL  `json:"managedAcls,omitempty"`
}

// MirrorTopic is a topic's membership of a mirror.
type MirrorTopic struct {
	ID      UUID `json:"id"`
	Stopped bool `json:"stopped,omitempty"`
}

// MirrorTopicRecord sets a topic's membership.
type MirrorTopicRecord struct {
	Mirror  string `json:"mirror"`
	Topic   string `json:"topic"`
	ID      UUID   `json:"id"`
	Stopped bool   `json:"stopped,omitempty"`
}

// mirrorRecords holds the record bodies of this file (embedded in Record).
type mirrorRecords struct {
	Mirror       *Mirror            `json:"mirror,omitempty"`
	RemoveMirror string             `json:"removeMirror,omitempty"`
	MirrorTopic  *MirrorTopicRecord `json:"mirrorTopic,omitempty"`
	MirrorSync   *MirrorSyncRecord  `json:"mirrorSync,omitempty"`
}

// mirrorImage is the mirror state of an Image (embedded in Image); the
// map and its values are replaced, never modified.
type mirrorImage struct {
	Mirrors map[string]*Mirror `json:"mirrors,omitempty"`
}

// MirrorOf returns the mirror that actively mirrors topic (not stopped),
// or "".
func (img *Image) MirrorOf(topic string) string {
	for _, m := range img.Mirrors {
		if mt, ok := m.Topics[topic]; ok && !mt.Stopped {
			return m.Name
		}
	}
	return ""
}

// LastMirrorOf returns the mirror that holds topic, stopped or not.
func (img *Image) LastMirrorOf(topic string) (string, MirrorTopic, bool) {
	for _, m := range img.Mirrors {
		if mt, ok := m.Topics[topic]; ok {
			return m.Name, mt, true
		}
	}
	return "", MirrorTopic{}, false
}

func (m *Mirror) clone() *Mirror {
	c := *m
	c.Configs = maps.Clone(m.Configs)
	c.Topics = maps.Clone(m.Topics)
	return &c
}

// applyMirror applies a record of this file; ok is false for other types.
func (b *builder) applyMirror(r *Record) (ok bool, err error) {
	img := b.img
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s record: %s: %w", r.Type, fmt.Sprintf(format, args...), kerr.InvalidRequest)
	}
	switch r.Type {
	case RecordMirror:
		if r.Mirror == nil || r.Mirror.Name == "" {
			return true, bad("missing mirror")
		}
		img.Mirrors = cloneMap(img.Mirrors)
		m := &Mirror{Name: r.Mirror.Name, Configs: maps.Clone(r.Mirror.Configs)}
		if old := img.Mirrors[m.Name]; old != nil {
			m.Topics = maps.Clone(old.Topics)
			m.SourceClusterID, m.ManagedACLs = old.SourceClusterID, old.ManagedACLs
		}
		img.Mirrors[m.Name] = m
	case RecordRemoveMirror:
		if img.Mirrors[r.RemoveMirror] == nil {
			return true, bad("no mirror %q", r.RemoveMirror)
		}
		img.Mirrors = cloneMap(img.Mirrors)
		delete(img.Mirrors, r.RemoveMirror)
	case RecordMirrorTopic:
		mt := r.MirrorTopic
		if mt == nil || img.Mirrors[mt.Mirror] == nil {
			return true, bad("missing mirror topic or unknown mirror")
		}
		if t := img.Topics[mt.Topic]; t == nil || t.ID != mt.ID {
			return true, fmt.Errorf("mirror topic %q: %w", mt.Topic, kerr.UnknownTopicOrPartition)
		}
		img.Mirrors = cloneMap(img.Mirrors)
		for name, m := range img.Mirrors {
			if _, ok := m.Topics[mt.Topic]; ok && name != mt.Mirror {
				m = m.clone()
				delete(m.Topics, mt.Topic)
				img.Mirrors[name] = m
			}
		}
		m := img.Mirrors[mt.Mirror].clone()
		if m.Topics == nil {
			m.Topics = map[string]MirrorTopic{}
		}
		m.Topics[mt.Topic] = MirrorTopic{ID: mt.ID, Stopped: mt.Stopped}
		img.Mirrors[mt.Mirror] = m
	case RecordMirrorSync:
		ms := r.MirrorSync
		if ms == nil || img.Mirrors[ms.Mirror] == nil {
			return true, bad("missing mirror sync or unknown mirror")
		}
		img.Mirrors = cloneMap(img.Mirrors)
		m := img.Mirrors[ms.Mirror].clone()
		m.SourceClusterID, m.ManagedACLs = ms.SourceClusterID, slices.Clone(ms.ManagedACLs)
		img.Mirrors[ms.Mirror] = m
	default:
		return false, nil
	}
	if len(img.Mirrors) == 0 {
		img.Mirrors = nil
	}
	return true, nil
}

// CreateMirror defines a mirror. It fails with INVALID_REQUEST if the name
// is taken or invalid.
func (c *Controller) CreateMirror(ctx context.Context, name string, configs map[string]string) error {
	_, err := createMirror.do(c, ctx, mirrorArgs{Name: name, Configs: configs})
	return err
}

var createMirror = decision[mirrorArgs, none]{"CreateMirror", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *Image) ([]Record, error) {
		if err := ValidTopicName(a.Name); err != nil {
			return nil, fmt.Errorf("create mirror: mirror names follow topic name rules: %w", err)
		}
		if img.Mirrors[a.Name] != nil {
			return nil, fmt.Errorf("create mirror: mirror %q already exists: %w", a.Name, kerr.InvalidRequest)
		}
		return []Record{{Type: RecordMirror, mirrorRecords: mirrorRecords{Mirror: &Mirror{Name: a.Name, Configs: a.Configs}}}}, nil
	})
}}

// AlterMirrorConfigs replaces a mirror's configs.
func (c *Controller) AlterMirrorConfigs(ctx context.Context, name string, configs map[string]string) error {
	_, err := alterMirrorConfigs.do(c, ctx, mirrorArgs{Name: name, Configs: configs})
	return err
}

var alterMirrorConfigs = decision[mirrorArgs, none]{"AlterMirrorConfigs", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *Image) ([]Record, error) {
		if img.Mirrors[a.Name] == nil {
			return nil, fmt.Errorf("alter mirror configs: no mirror %q: %w", a.Name, kerr.InvalidRequest)
		}
		return []Record{{Type: RecordMirror, mirrorRecords: mirrorRecords{Mirror: &Mirror{Name: a.Name, Configs: a.Configs}}}}, nil
	})
}}

// DeleteMirror removes a mirror definition.
func (c *Controller) DeleteMirror(ctx context.Context, name string) error {
	_, err := deleteMirror.do(c, ctx, mirrorArgs{Name: name})
	return err
}

var deleteMirror = decision[mirrorArgs, none]{"DeleteMirror", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *Image) ([]Record, error) {
		if img.Mirrors[a.Name] == nil {
			return nil, fmt.Errorf("delete mirror: no mirror %q: %w", a.Name, kerr.InvalidRequest)
		}
		return []Record{{Type: RecordRemoveMirror, mirrorRecords: mirrorRecords{RemoveMirror: a.Name}}}, nil
	})
}}

// AddMirrorTopics makes topics members of mirror, all or none, in one
// batch. A spec whose topic does not exist here is created with the
// spec's ID (the source's); one that exists must have that same ID and
// partition count (failback: the old source becomes a destination). A
// topic actively mirrored by another mirror is refused.
func (c *Controller) AddMirrorTopics(ctx context.Context, mirror string, specs []TopicSpec) error {
	_, err := addMirrorTopics.do(c, ctx, mirrorArgs{Name: mirror, Specs: specs})
	return err
}

var addMirrorTopics = decision[mirrorArgs, none]{"AddMirrorTopics", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "add mirror topics", func(img *Image) ([]Record, error) { return addMirrorTopicRecords(img, a.Name, a.Specs) })
}}

// addMirrorTopicRecords are the records that make specs members of
// mirror, creating those not here, or why that is refused.
func addMirrorTopicRecords(img *Image, mirror string, specs []TopicSpec) ([]Record, error) {
	if img.Mirrors[mirror] == nil {
		return nil, fmt.Errorf("add mirror topics: no mirror %q: %w", mirror, kerr.InvalidRequest)
	}
	brokers := placeable(img)
	var recs []Record
	seen := map[string]bool{}
	for i, s := range specs {
		if seen[s.Name] {
			return nil, fmt.Errorf("topic %q appears twice: %w", s.Name, kerr.InvalidRequest)
		}
		seen[s.Name] = true
		if s.ID.IsZero() {
			return nil, fmt.Errorf("topic %q: a mirror topic needs its source topic ID: %w", s.Name, kerr.InvalidRequest)
		}
		if other := img.MirrorOf(s.Name); other != "" {
			return nil, fmt.Errorf("topic %q is already mirrored by mirror %q: %w", s.Name, other, kerr.InvalidRequest)
		}
		if t := img.Topics[s.Name]; t != nil {
			if t.ID != s.ID || int32(len(t.Partitions)) != s.Partitions {
				return nil, fmt.Errorf("topic %q exists here with ID %s and %d partitions, the source's has ID %s and %d: %w",
					s.Name, t.ID.Base64(), len(t.Partitions), s.ID.Base64(), s.Partitions, kerr.TopicAlreadyExists)
			}
		} else {
			if err := ValidTopicName(s.Name); err != nil {
				return nil, err
			}
			if img.TopicsByID[s.ID] != nil {
				return nil, fmt.Errorf("topic %q: topic ID %s is used by topic %q: %w", s.Name, s.ID.Base64(), img.TopicsByID[s.ID].Name, kerr.InvalidRequest)
			}
			if other := collision(img, s.Name); other != "" {
				return nil, fmt.Errorf("topic %q collides with topic %q: %w", s.Name, other, kerr.InvalidTopicException)
			}
			if s.Partitions <= 0 {
				return nil, fmt.Errorf("topic %q: %d partitions: %w", s.Name, s.Partitions, kerr.InvalidPartitions)
			}
			// The destination's replication factor, as CreateTopics
			// checks it: more replicas than live brokers is refused,
			// not silently cut to a copy fewer than asked.
			rf := int(s.ReplicationFactor)
			if rf <= 0 || rf > len(brokers) {
				return nil, fmt.Errorf("topic %q: replication factor %d, must be 1..%d (live brokers): %w", s.Name, rf, len(brokers), kerr.InvalidReplicationFactor)
			}
			recs = append(recs, Record{Type: RecordTopic, Topic: &TopicRecord{Name: s.Name, ID: s.ID, Configs: s.Configs}})
			recs = append(recs, partitionRecords(s.ID, 0, assign(brokers, len(img.Topics)+i, 0, int(s.Partitions), rf))...)
		}
		recs = append(recs, mirrorNameRecord(s.Name, mirror),
			Record{Type: RecordMirrorTopic, mirrorRecords: mirrorRecords{MirrorTopic: &MirrorTopicRecord{Mirror: mirror, Topic: s.Name, ID: s.ID}}})
	}
	return recs, nil
}

// StopMirrorTopic marks a topic's membership of mirror stopped and clears
// its mirror.name, in one batch: the topic becomes writable.
func (c *Controller) StopMirrorTopic(ctx context.Context, mirror, topic string) error {
	_, err := stopMirrorTopic.do(c, ctx, mirrorArgs{Name: mirror, Topic: topic})
	return err
}

var stopMirrorTopic = decision[mirrorArgs, none]{"StopMirrorTopic", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *Image) ([]Record, error) {
		m := img.Mirrors[a.Name]
		if m == nil {
			return nil, fmt.Errorf("stop mirror topic: no mirror %q: %w", a.Name, kerr.InvalidRequest)
		}
		mt, ok := m.Topics[a.Topic]
		if !ok {
			return nil, fmt.Errorf("stop mirror topic: topic %q is not in mirror %q: %w", a.Topic, a.Name, kerr.InvalidRequest)
		}
		var recs []Record
		if t := img.Topics[a.Topic]; t != nil && t.Configs[MirrorNameConfig] != "" {
			recs = append(recs, mirrorNameRecord(a.Topic, "")) // also after a stop of older versions, which cleared it apart
		}
		if !mt.Stopped {
			recs = append(recs, Record{Type: RecordMirrorTopic, mirrorRecords: mirrorRecords{MirrorTopic: &MirrorTopicRecord{Mirror: a.Name, Topic: a.Topic, ID: mt.ID, Stopped: true}}})
		}
		return recs, nil
	})
}}

// SetMirrorSync records what the metadata sync of a mirror remembers: the
// source cluster ID and the ACLs it created.
func (c *Controller) SetMirrorSync(ctx context.Context, mirror, sourceClusterID string, managed []ACL) error {
	_, err := setMirrorSync.do(c, ctx, mirrorArgs{Name: mirror, SourceClusterID: sourceClusterID, ACLs: managed})
	return err
}

var setMirrorSync = decision[mirrorArgs, none]{"SetMirrorSync", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *Image) ([]Record, error) {
		m := img.Mirrors[a.Name]
		if m == nil {
			return nil, fmt.Errorf("set mirror sync: no mirror %q: %w", a.Name, kerr.InvalidRequest)
		}
		if m.SourceClusterID == a.SourceClusterID && slices.Equal(m.ManagedACLs, a.ACLs) {
			return nil, nil
		}
		return []Record{{Type: RecordMirrorSync, mirrorRecords: mirrorRecords{MirrorSync: &MirrorSyncRecord{
			Mirror: a.Name, SourceClusterID: a.SourceClusterID, ManagedACLs: a.ACLs}}}}, nil
	})
}}
