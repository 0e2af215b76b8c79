package raftmeta

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// The controller's decisions on cluster mirrors (KIP-1279): defining them
// and their topics' membership (their records and image:
// metadata/mirror.go).

// mirrorNameRecord sets (mirror != "") or clears topic's mirror.name.
func mirrorNameRecord(topic, mirror string) metadata.Record {
	var v *string
	if mirror != "" {
		v = &mirror
	}
	return metadata.Record{Type: metadata.RecordConfig, Config: &metadata.ConfigRecord{ResourceType: metadata.ConfigResourceTopic, ResourceName: topic, Key: metadata.MirrorNameConfig, Value: v}}
}

// CreateMirror defines a mirror. It fails with INVALID_REQUEST if the name
// is taken or invalid.
func (c *Controller) CreateMirror(ctx context.Context, name string, configs map[string]string) error {
	_, err := createMirror.do(c, ctx, mirrorArgs{Name: name, Configs: configs})
	return err
}

var createMirror = decision[mirrorArgs, none]{"CreateMirror", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		if err := ValidTopicName(a.Name); err != nil {
			return nil, fmt.Errorf("create mirror: mirror names follow topic name rules: %w", err)
		}
		if img.Mirrors[a.Name] != nil {
			return nil, fmt.Errorf("create mirror: mirror %q already exists: %w", a.Name, kerr.InvalidRequest)
		}
		return []metadata.Record{{Type: metadata.RecordMirror, MirrorRecords: metadata.MirrorRecords{Mirror: &metadata.Mirror{Name: a.Name, Configs: a.Configs}}}}, nil
	})
}}

// AlterMirrorConfigs replaces a mirror's configs.
func (c *Controller) AlterMirrorConfigs(ctx context.Context, name string, configs map[string]string) error {
	_, err := alterMirrorConfigs.do(c, ctx, mirrorArgs{Name: name, Configs: configs})
	return err
}

var alterMirrorConfigs = decision[mirrorArgs, none]{"AlterMirrorConfigs", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		if img.Mirrors[a.Name] == nil {
			return nil, fmt.Errorf("alter mirror configs: no mirror %q: %w", a.Name, kerr.InvalidRequest)
		}
		return []metadata.Record{{Type: metadata.RecordMirror, MirrorRecords: metadata.MirrorRecords{Mirror: &metadata.Mirror{Name: a.Name, Configs: a.Configs}}}}, nil
	})
}}

// DeleteMirror removes a mirror definition.
func (c *Controller) DeleteMirror(ctx context.Context, name string) error {
	_, err := deleteMirror.do(c, ctx, mirrorArgs{Name: name})
	return err
}

var deleteMirror = decision[mirrorArgs, none]{"DeleteMirror", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		if img.Mirrors[a.Name] == nil {
			return nil, fmt.Errorf("delete mirror: no mirror %q: %w", a.Name, kerr.InvalidRequest)
		}
		return []metadata.Record{{Type: metadata.RecordRemoveMirror, MirrorRecords: metadata.MirrorRecords{RemoveMirror: a.Name}}}, nil
	})
}}

// AddMirrorTopics makes topics members of mirror, all or none, in one
// batch. A spec whose topic does not exist here is created with the
// spec's ID (the source's); one that exists must have that same ID and
// partition count (failback: the old source becomes a destination). A
// topic actively mirrored by another mirror is refused.
func (c *Controller) AddMirrorTopics(ctx context.Context, mirror string, specs []metadata.TopicSpec) error {
	_, err := addMirrorTopics.do(c, ctx, mirrorArgs{Name: mirror, Specs: specs})
	return err
}

var addMirrorTopics = decision[mirrorArgs, none]{"AddMirrorTopics", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "add mirror topics", func(img *metadata.Image) ([]metadata.Record, error) {
		return addMirrorTopicRecords(img, a.Name, a.Specs)
	})
}}

// addMirrorTopicRecords are the records that make specs members of
// mirror, creating those not here, or why that is refused.
func addMirrorTopicRecords(img *metadata.Image, mirror string, specs []metadata.TopicSpec) ([]metadata.Record, error) {
	if img.Mirrors[mirror] == nil {
		return nil, fmt.Errorf("add mirror topics: no mirror %q: %w", mirror, kerr.InvalidRequest)
	}
	brokers := placeable(img)
	var recs []metadata.Record
	seen := map[string]bool{}
	for i, s := range specs {
		if seen[s.Name] {
			return nil, fmt.Errorf("topic %q appears twice: %w", s.Name, kerr.InvalidRequest)
		}
		seen[s.Name] = true
		if s.Source == s.Name {
			s.Source = "" // the same name: nothing to remember
		}
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
			recs = append(recs, metadata.Record{Type: metadata.RecordTopic, Topic: &metadata.TopicRecord{Name: s.Name, ID: s.ID, Configs: s.Configs}})
			recs = append(recs, partitionRecords(s.ID, 0, assign(brokers, len(img.Topics)+i, 0, int(s.Partitions), rf))...)
		}
		recs = append(recs, mirrorNameRecord(s.Name, mirror),
			metadata.Record{Type: metadata.RecordMirrorTopic, MirrorRecords: metadata.MirrorRecords{MirrorTopic: &metadata.MirrorTopicRecord{Mirror: mirror, Topic: s.Name, ID: s.ID, Source: s.Source}}})
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
	return none{}, c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		m := img.Mirrors[a.Name]
		if m == nil {
			return nil, fmt.Errorf("stop mirror topic: no mirror %q: %w", a.Name, kerr.InvalidRequest)
		}
		mt, ok := m.Topics[a.Topic]
		if !ok {
			return nil, fmt.Errorf("stop mirror topic: topic %q is not in mirror %q: %w", a.Topic, a.Name, kerr.InvalidRequest)
		}
		var recs []metadata.Record
		if t := img.Topics[a.Topic]; t != nil && t.Configs[metadata.MirrorNameConfig] != "" {
			recs = append(recs, mirrorNameRecord(a.Topic, "")) // also after a stop of older versions, which cleared it apart
		}
		if !mt.Stopped {
			recs = append(recs, metadata.Record{Type: metadata.RecordMirrorTopic, MirrorRecords: metadata.MirrorRecords{MirrorTopic: &metadata.MirrorTopicRecord{Mirror: a.Name, Topic: a.Topic, ID: mt.ID, Stopped: true, Source: mt.Source}}})
		}
		return recs, nil
	})
}}

// SetMirrorSync records what the metadata sync of a mirror remembers: the
// source cluster ID and the ACLs it created.
func (c *Controller) SetMirrorSync(ctx context.Context, mirror, sourceClusterID string, managed []metadata.ACL) error {
	_, err := setMirrorSync.do(c, ctx, mirrorArgs{Name: mirror, SourceClusterID: sourceClusterID, ACLs: managed})
	return err
}

var setMirrorSync = decision[mirrorArgs, none]{"SetMirrorSync", func(c *Controller, ctx context.Context, a mirrorArgs) (none, error) {
	return none{}, c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		m := img.Mirrors[a.Name]
		if m == nil {
			return nil, fmt.Errorf("set mirror sync: no mirror %q: %w", a.Name, kerr.InvalidRequest)
		}
		if m.SourceClusterID == a.SourceClusterID && slices.Equal(m.ManagedACLs, a.ACLs) {
			return nil, nil
		}
		return []metadata.Record{{Type: metadata.RecordMirrorSync, MirrorRecords: metadata.MirrorRecords{MirrorSync: &metadata.MirrorSyncRecord{
			Mirror: a.Name, SourceClusterID: a.SourceClusterID, ManagedACLs: a.ACLs}}}}, nil
	})
}}
