package metadata

import (
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
//
// These records live in the core, not in the mirror plugin, because
// KIP-1279 needs the core to know mirror topics: the controller creates a
// mirror topic in the same batch as its membership, so that no client
// ever writes to it as an ordinary topic; the followers of a mirror
// topic's partitions carry its MirrorLeaderEpoch and take the mirror
// replication throttle (server/replication); and a mirror keeps the ACL
// bindings its metadata sync created, which are the core's ACL records
// (security.go).

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
	// Source is the topic's name on the source cluster when it is not
	// the topic's name here (a mirror with mirror.topic.prefix, or a
	// failback of such a topic); "" means the same name.
	Source string `json:"source,omitempty"`
}

// SourceName is the name on the source cluster of the member topic
// named dest here.
func (mt MirrorTopic) SourceName(dest string) string {
	if mt.Source != "" {
		return mt.Source
	}
	return dest
}

// MirrorTopicRecord sets a topic's membership.
type MirrorTopicRecord struct {
	Mirror  string `json:"mirror"`
	Topic   string `json:"topic"`
	ID      UUID   `json:"id"`
	Stopped bool   `json:"stopped,omitempty"`
	Source  string `json:"source,omitempty"` // MirrorTopic.Source
}

// MirrorRecords holds the record bodies of this file (embedded in Record;
// exported so that the controller can build them).
type MirrorRecords struct {
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

// BySource maps the source names of the mirror's topics to their names
// here.
func (m *Mirror) BySource() map[string]string {
	out := make(map[string]string, len(m.Topics))
	for name, mt := range m.Topics {
		out[mt.SourceName(name)] = name
	}
	return out
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
		m.Topics[mt.Topic] = MirrorTopic{ID: mt.ID, Stopped: mt.Stopped, Source: mt.Source}
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
