package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/diverged"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Divergence quarantine: what a truncation removes from a mirror
// partition is copied into <topic>.diverged and recorded in the mirror's
// divergence manifest first (package diverged, plugins/mirror/diverged,
// does that to the logs). What it needs of the plugin is here: the
// <topic>.diverged partition, created on first use, and the manifest
// entries on the mirror partition's __mirror_state coordinator.

// truncate cuts a mirror partition's log at offset, quarantining what
// that removes first. An error leaves the log as it was.
func (r *mirrorRun) truncate(pt *ledPartition, ep plugin.Log, to int64, cause string) error {
	to = max(to, 0)
	if err := r.quarantine(pt, ep, to, cause); err != nil {
		return fmt.Errorf("not truncated to %d: copying what it removes to %s%s: %w", to, pt.Topic, mirrorstate.DivergedSuffix, err)
	}
	defer r.changed() // the fetcher's position moved
	return ep.Truncate(to)
}

// quarantine copies what truncating ep to offset removes into
// <topic>.diverged and records it (diverged.Quarantine).
func (r *mirrorRun) quarantine(pt *ledPartition, ep plugin.Log, to int64, cause string) error {
	m := partitionManifest{p: r.p, k: mirrorstate.PartitionKey{Mirror: r.name, Topic: pt.Topic, Partition: pt.Partition}, id: pt.id}
	e, err := diverged.Quarantine(r.ctx, ep, to, cause, m, func() (plugin.Log, error) {
		return r.p.divergedPartition(r.ctx, pt.Topic, pt.Partition, ep)
	})
	if err != nil || e == nil {
		return err
	}
	r.log.Warn("mirror truncation: the records it removes were copied first", "topic", pt.Topic, "partition", pt.Partition,
		"cause", cause, "first_offset", e.FirstOffset, "last_offset", e.LastOffset, "records", e.Records,
		"copied_to", fmt.Sprintf("%s%s/%d@%d-%d", pt.Topic, mirrorstate.DivergedSuffix, pt.Partition, e.CopyStart, e.CopyEnd))
	return nil
}

// partitionManifest is a mirror partition's divergence manifest on its
// __mirror_state coordinator.
type partitionManifest struct {
	p  *Plugin
	k  mirrorstate.PartitionKey
	id uuid.UUID
}

func (m partitionManifest) Pending(ctx context.Context) (*mirrorstate.ManifestEntry, error) {
	return m.p.store.PendingEntry(ctx, m.k, m.id)
}

func (m partitionManifest) Write(ctx context.Context, e *mirrorstate.ManifestEntry) error {
	return m.p.store.WriteEntry(ctx, m.k, m.id, e)
}

// divergedPartition returns partition p of <topic>.diverged, creating the
// topic (as many partitions as topic, retention off, batches as large as
// the mirror topic's) or its missing partitions on first use.
func (p *Plugin) divergedPartition(ctx context.Context, topic string, partition int32, ep plugin.Log) (plugin.Log, error) {
	name := topic + mirrorstate.DivergedSuffix
	meta := p.Host().Metadata()
	img := meta.Image()
	if img.MirrorOf(name) != "" {
		return nil, fmt.Errorf("%s is a mirror topic: %w", name, mirrorproto.ErrReadOnlyTopic)
	}
	src := img.Topics[topic]
	if src == nil {
		return nil, fmt.Errorf("%s: %w", topic, kerr.UnknownTopicOrPartition)
	}
	n, rf := int32(len(src.Partitions)), int16(max(1, len(src.Partitions[0].Replicas)))
	switch t := img.Topics[name]; {
	case t == nil:
		// Each partition's replicas are the mirror topic partition's,
		// its current leader first (the preferred leader): the broker
		// that truncates a partition is the one that leads it and copies
		// to the same partition of <topic>.diverged.
		var assign [][]int32
		for _, sp := range src.Partitions {
			r := slices.Clone(sp.Replicas)
			if i := slices.Index(r, sp.Leader); i > 0 {
				r[0], r[i] = r[i], r[0]
			}
			assign = append(assign, r)
		}
		errs := meta.CreateTopics(ctx, []metadata.TopicSpec{{Name: name, Partitions: n, ReplicationFactor: rf, Assignments: assign,
			Configs: map[string]string{"retention.ms": "-1", "max.message.bytes": strconv.Itoa(int(ep.Config().MaxMessageBytes))}}}, false)
		if err := errs[0]; err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
	case int32(len(t.Partitions)) < n:
		if err := meta.CreatePartitions(ctx, name, n, false); err != nil {
			return nil, fmt.Errorf("grow %s to %d partitions: %w", name, n, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		img := meta.Image()
		if t := img.Topics[name]; t != nil && int(partition) < len(t.Partitions) && t.Partitions[partition].Leader == p.Host().NodeID() {
			if dp := p.Host().Partition(t.ID, partition); dp != nil {
				return dp, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s-%d is not led here: %w", name, partition, kerr.NotLeaderForPartition)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
