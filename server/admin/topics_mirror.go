package admin

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/config"
)

// CreateTopicsRequest is CreateTopics from version 8 (KIP-1279): each
// topic may carry MirrorInfo, a nullable struct holding the source
// cluster's topic ID, after its configs. franz-go's kmsg stops at
// version 7, so version 8 is decoded here into the version 7 message
// plus the IDs; the response is version 7's.
type CreateTopicsRequest struct {
	kmsg.CreateTopicsRequest
	// MirrorIDs holds each topic's MirrorInfo.TopicId, zero where
	// MirrorInfo is null.
	MirrorIDs []uuid.UUID
}

// CreateTopicsMirrorVersion is the first CreateTopics version with
// MirrorInfo.
const CreateTopicsMirrorVersion = 8

// ReadFrom decodes a version 8 body (flexible: compact strings and
// arrays, tagged fields after every struct).
func (r *CreateTopicsRequest) ReadFrom(src []byte) error {
	b := kbin.Reader{Src: src}
	skipTags := func() {
		for n := b.Uvarint(); n > 0 && b.Ok(); n-- {
			b.Uvarint()
			b.Span(int(b.Uvarint()))
		}
	}
	// arrayLen reads a compact array length, refusing one longer than
	// the bytes left (each element takes at least one byte).
	arrayLen := func() int {
		n := int(b.Uvarint()) - 1
		if n > len(b.Src) {
			b.Src = nil // a length no body could hold: the reader fails
			b.Int8()
			return 0
		}
		return n
	}
	r.Topics = nil
	r.MirrorIDs = nil
	for range max(0, arrayLen()) {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic = b.CompactString()
		t.NumPartitions = b.Int32()
		t.ReplicationFactor = b.Int16()
		for range max(0, arrayLen()) {
			a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			a.Partition = b.Int32()
			for range max(0, arrayLen()) {
				a.Replicas = append(a.Replicas, b.Int32())
			}
			skipTags()
			t.ReplicaAssignment = append(t.ReplicaAssignment, a)
		}
		for range max(0, arrayLen()) {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name = b.CompactString()
			c.Value = b.CompactNullableString()
			skipTags()
			t.Configs = append(t.Configs, c)
		}
		var id uuid.UUID
		if b.Int8() >= 0 { // MirrorInfo present
			id = b.Uuid()
			skipTags()
		}
		skipTags()
		r.Topics = append(r.Topics, t)
		r.MirrorIDs = append(r.MirrorIDs, id)
		if !b.Ok() {
			break
		}
	}
	r.TimeoutMillis = b.Int32()
	r.ValidateOnly = b.Bool()
	skipTags()
	if err := b.Complete(); err != nil {
		return fmt.Errorf("CreateTopics v%d: %w", r.Version, err)
	}
	return nil
}

// ResponseKind is version 7's response at the request's version.
func (r *CreateTopicsRequest) ResponseKind() kmsg.Response {
	return &kmsg.CreateTopicsResponse{Version: r.Version}
}

// mirrorTopicSpec gives a topic its MirrorInfo topic ID, with the KIP's
// validations: the ID names no other topic here, and every replica of a
// manual assignment is on an active broker (registered, not fenced, not
// shutting down), so that a stale offline log dir of a deleted topic
// with the same ID is never taken for the new one (KAFKA-16234). An
// automatic assignment places replicas on active brokers only.
func mirrorTopicSpec(img *metadata.Image, spec *metadata.TopicSpec, id uuid.UUID) error {
	if t := img.TopicsByID[id]; t != nil {
		return config.Errorf(kerr.InvalidRequest, "Topic ID %s of MirrorInfo is already used by topic '%s'.", id.Base64(), t.Name)
	}
	for _, replicas := range spec.Assignments {
		for _, r := range replicas {
			if br, ok := img.Brokers[r]; !ok || !br.Live() {
				return config.Errorf(kerr.InvalidReplicaAssignment, "Broker %d of the manual assignment is not active: a mirror topic's replicas must all be on active brokers.", r)
			}
		}
	}
	spec.ID = id
	return nil
}
