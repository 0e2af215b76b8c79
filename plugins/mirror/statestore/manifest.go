package statestore

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// shardOf runs fn on the __mirror_state shard of a mirror partition.
func (store *Store) shardOf(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, fn func(*coord.Shard, *mirrorstate.Shard) error) error {
	return store.do(ctx, Key(k.Mirror, id, k.Partition), func(sh *coord.Shard) error {
		return fn(sh, sh.State().(*mirrorstate.Shard))
	})
}

// PendingEntry returns the partition's manifest entry whose copy is not
// done, nil if none, from the partition's coordinator.
func (store *Store) PendingEntry(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (*mirrorstate.ManifestEntry, error) {
	var entries []mirrorproto.DivergedEntry
	err := store.coordinated(ctx, Key(k.Mirror, id, k.Partition), func() error {
		var err error
		entries, err = store.entriesLocal(ctx, k, id)
		return err
	}, func(node int32) error {
		sp, err := store.readPartitionRemote(ctx, node, k, id)
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
func (store *Store) entriesLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) ([]mirrorproto.DivergedEntry, error) {
	var out []mirrorproto.DivergedEntry
	err := store.shardOf(ctx, k, id, func(_ *coord.Shard, s *mirrorstate.Shard) error {
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

// WriteEntry persists a manifest entry on the partition's coordinator.
func (store *Store) WriteEntry(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, e *mirrorstate.ManifestEntry) error {
	entry := mirrorproto.DivergedEntry{DivergedRange: e.DivergedRange, Done: e.Done}
	return store.coordinated(ctx, Key(k.Mirror, id, k.Partition), func() error {
		return store.writeEntriesLocal(ctx, k, id, []mirrorproto.DivergedEntry{entry})
	}, func(node int32) error {
		return store.writeRemote(ctx, node, k, mirrorproto.StatePartition{PartitionIndex: k.Partition, TopicID: id, Diverged: []mirrorproto.DivergedEntry{entry}})
	})
}

// writeEntriesLocal persists manifest entries on the local shard.
func (store *Store) writeEntriesLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, entries []mirrorproto.DivergedEntry) error {
	return store.shardOf(ctx, k, id, func(sh *coord.Shard, s *mirrorstate.Shard) error {
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

// Manifest returns a mirror's divergence manifest: the finished entries
// on the shards this broker leads, oldest first.
func (store *Store) Manifest(ctx context.Context, mirror string) []mirrorproto.DivergedRange {
	var out []mirrorproto.DivergedRange
	for _, sh := range store.c.Runtime().Shards() {
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
