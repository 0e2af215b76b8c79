package mirror

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/diverged"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta"
)

// Divergence quarantine: what a truncation removes from a mirror
// partition is copied into <topic>.diverged and recorded in the mirror's
// divergence manifest first (package diverged, plugins/mirror/diverged,
// does that to the logs). What it needs of the plugin is here: the
// <topic>.diverged partition, created on first use, and the manifest
// entries on the mirror partition's __mirror_state coordinator.

// truncate cuts a mirror partition's log at offset, quarantining what
// that removes first. An error leaves the log as it was.
func (r *mirrorRun) truncate(pt *ledPartition, ep *engine.Partition, to int64, cause string) error {
	to = max(to, 0)
	if err := r.quarantine(pt, ep, to, cause); err != nil {
		return fmt.Errorf("not truncated to %d: copying what it removes to %s%s: %w", to, pt.Topic, mirrorstate.DivergedSuffix, err)
	}
	defer r.changed() // the fetcher's position moved
	return ep.Truncate(to)
}

// quarantine copies what truncating ep to offset removes into
// <topic>.diverged and records it (diverged.Quarantine).
func (r *mirrorRun) quarantine(pt *ledPartition, ep *engine.Partition, to int64, cause string) error {
	m := partitionManifest{p: r.p, k: mirrorstate.PartitionKey{Mirror: r.name, Topic: pt.Topic, Partition: pt.Partition}, id: pt.id}
	e, err := diverged.Quarantine(r.ctx, ep, to, cause, m, func() (*engine.Partition, error) {
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
	return m.p.pendingEntry(ctx, m.k, m.id)
}

func (m partitionManifest) Write(ctx context.Context, e *mirrorstate.ManifestEntry) error {
	return m.p.writeEntry(ctx, m.k, m.id, e)
}

// divergedPartition returns partition p of <topic>.diverged, creating the
// topic (as many partitions as topic, retention off, batches as large as
// the mirror topic's) or its missing partitions on first use.
func (p *Plugin) divergedPartition(ctx context.Context, topic string, partition int32, ep *engine.Partition) (*engine.Partition, error) {
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
		errs := meta.CreateTopics(ctx, []raftmeta.TopicSpec{{Name: name, Partitions: n, ReplicationFactor: rf, Assignments: assign,
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

// shardOf runs fn on the __mirror_state shard of a mirror partition.
func (p *Plugin) shardOf(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, fn func(*coord.Shard, *mirrorstate.Shard) error) error {
	return p.Do(ctx, coordKey(k.Mirror, id, k.Partition), func(sh *coord.Shard) error {
		return fn(sh, sh.State().(*mirrorstate.Shard))
	})
}

// pendingEntry returns the partition's manifest entry whose copy is not
// done, nil if none, from the partition's coordinator.
func (p *Plugin) pendingEntry(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (*mirrorstate.ManifestEntry, error) {
	var entries []mirrorproto.DivergedEntry
	err := p.coordinated(ctx, coordKey(k.Mirror, id, k.Partition), func() error {
		var err error
		entries, err = p.entriesLocal(ctx, k, id)
		return err
	}, func(node int32) error {
		sp, err := p.readPartitionRemote(ctx, node, k, id)
		entries = sp.Diverged
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.Done {
			return &mirrorstate.ManifestEntry{DivergedRange: e.DivergedRange}, nil
		}
	}
	return nil, nil
}

// entriesLocal returns the partition's manifest entries from the local
// shard.
func (p *Plugin) entriesLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) ([]mirrorproto.DivergedEntry, error) {
	var out []mirrorproto.DivergedEntry
	err := p.shardOf(ctx, k, id, func(_ *coord.Shard, s *mirrorstate.Shard) error {
		for dk, e := range s.Diverged {
			if dk.PartitionKey == k {
				out = append(out, mirrorproto.DivergedEntry{DivergedRange: e.DivergedRange, Done: e.Done})
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b mirrorproto.DivergedEntry) int { return cmp.Compare(a.CopyStart, b.CopyStart) })
	return out, err
}

// writeEntry persists a manifest entry on the partition's coordinator.
func (p *Plugin) writeEntry(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, e *mirrorstate.ManifestEntry) error {
	entry := mirrorproto.DivergedEntry{DivergedRange: e.DivergedRange, Done: e.Done}
	return p.coordinated(ctx, coordKey(k.Mirror, id, k.Partition), func() error {
		return p.writeEntriesLocal(ctx, k, id, []mirrorproto.DivergedEntry{entry})
	}, func(node int32) error {
		return p.writeRemote(ctx, node, k, mirrorproto.StatePartition{PartitionIndex: k.Partition, TopicID: id, Diverged: []mirrorproto.DivergedEntry{entry}})
	})
}

// writeEntriesLocal persists manifest entries on the local shard.
func (p *Plugin) writeEntriesLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, entries []mirrorproto.DivergedEntry) error {
	return p.shardOf(ctx, k, id, func(sh *coord.Shard, s *mirrorstate.Shard) error {
		var recs []coord.Record
		for _, e := range entries {
			me := &mirrorstate.ManifestEntry{DivergedRange: e.DivergedRange, Done: e.Done}
			me.Topic, me.Partition = k.Topic, k.Partition
			recs = append(recs, mirrorstate.EntryRecord(mirrorstate.ManifestKey{PartitionKey: k, CopyStart: e.CopyStart}, me))
		}
		if err := sh.Write(ctx, recs...); err != nil {
			return err
		}
		for _, e := range entries {
			me := &mirrorstate.ManifestEntry{DivergedRange: e.DivergedRange, Done: e.Done}
			me.Topic, me.Partition = k.Topic, k.Partition
			s.Diverged[mirrorstate.ManifestKey{PartitionKey: k, CopyStart: e.CopyStart}] = me
		}
		return nil
	})
}

// manifest returns a mirror's divergence manifest: the finished entries
// on the shards this broker leads, oldest first.
func (p *Plugin) manifest(ctx context.Context, mirror string) []mirrorproto.DivergedRange {
	var out []mirrorproto.DivergedRange
	for _, sh := range p.Runtime().Shards() {
		sh.Do(ctx, func(sh *coord.Shard) error { //nolint:errcheck // a shard that is going away has nothing to add
			for dk, e := range sh.State().(*mirrorstate.Shard).Diverged {
				if dk.Mirror == mirror && e.Done {
					out = append(out, e.DivergedRange)
				}
			}
			return nil
		})
	}
	slices.SortFunc(out, func(a, b mirrorproto.DivergedRange) int {
		return cmp.Or(cmp.Compare(a.TruncatedAt, b.TruncatedAt), strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}
