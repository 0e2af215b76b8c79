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
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/wire"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/uuid"
)

// Divergence quarantine: whatever a truncation (LME, epoch divergence, a
// source that lost its tail) is about to remove from a mirror partition —
// the old primary's writes after a split, typically — is first copied,
// batch by batch and byte for byte from the batch attributes on, into the
// same partition of the regular topic <topic>.diverged (its own offsets
// and leader epoch in the batch header; the originals are in the
// manifest), and recorded in the mirror's divergence manifest in
// __mirror_state. Nothing a mirror removes is lost silently.

// copyChunk bounds the bytes of one append of copies: memory stays
// bounded whatever the size of the divergence.
const copyChunk = 1 << 20

// truncate cuts a mirror partition's log at offset, quarantining what
// that removes first. An error leaves the log as it was.
func (r *mirrorRun) truncate(pt *ledPartition, ep *engine.Partition, to int64, cause string) error {
	to = max(to, 0)
	if err := r.quarantine(pt, ep, to, cause); err != nil {
		return fmt.Errorf("not truncated to %d: copying what it removes to %s%s: %w", to, pt.topic, mirrorstate.DivergedSuffix, err)
	}
	return ep.Truncate(to)
}

// batchInfo is what the manifest needs of a stored batch's header.
type batchInfo struct {
	base, last int64
	epoch      int32
	records    int32 // 0 for a control batch
	firstTs    int64
	maxTs      int64
	crc        uint32
}

// infoOf reads the header of a batch that eachBatch passed on, which
// checked it.
func infoOf(b []byte) batchInfo {
	h, _ := engine.ParseBatchHeader(b)
	bi := batchInfo{base: h.BaseOffset, last: h.LastOffset(), epoch: h.PartitionLeaderEpoch,
		firstTs: h.BaseTimestamp, maxTs: h.MaxTimestamp, crc: h.CRC}
	if !h.Control() {
		bi.records = h.NumRecords
	}
	return bi
}

// eachBatch calls fn with the batches of ep from the one holding offset
// to the log end, at most about copyChunk bytes at a time, each with a
// valid header (infoOf reads it).
func eachBatch(ep *engine.Partition, offset int64, fn func([][]byte) error) error {
	for offset < ep.Offsets().LogEnd {
		res, err := ep.Fetch(offset, copyChunk, engine.ReadUncommitted)
		if err != nil {
			return err
		}
		var bs [][]byte
		for _, b := range res.Batches {
			h, err := engine.ParseBatchHeader(b)
			if err != nil {
				return fmt.Errorf("%s-%d at %d: %w", ep.Topic(), ep.Index(), offset, err)
			}
			if h.LastOffset() >= offset {
				bs = append(bs, b)
			}
		}
		if len(bs) == 0 {
			return nil
		}
		if err := fn(bs); err != nil {
			return err
		}
		offset = infoOf(bs[len(bs)-1]).last + 1
	}
	return nil
}

// quarantine copies what truncating ep to offset removes and records it;
// see the top of this file. It is idempotent: a broker that died in the
// middle of a copy resumes it after the batches already there (known by
// their CRCs), so nothing is copied twice.
func (r *mirrorRun) quarantine(pt *ledPartition, ep *engine.Partition, to int64, cause string) error {
	// What goes: whole batches, from the one holding offset on.
	var span *wire.DivergedRange
	err := eachBatch(ep, max(to, ep.Offsets().LogStart), func(bs [][]byte) error {
		for _, b := range bs {
			bi := infoOf(b)
			if span == nil {
				span = &wire.DivergedRange{Topic: pt.topic, Partition: pt.partition, FirstOffset: bi.base, FirstEpoch: bi.epoch, FirstTimestamp: bi.firstTs}
			}
			span.LastOffset, span.LastEpoch, span.LastTimestamp = bi.last, bi.epoch, max(span.LastTimestamp, bi.maxTs)
			span.Records += int64(bi.records)
		}
		return nil
	})
	if err != nil || span == nil {
		return err
	}
	dp, err := r.p.divergedPartition(r.ctx, pt.topic, pt.partition, ep)
	if err != nil {
		return err
	}
	k := mirrorstate.PartitionKey{Mirror: r.name, Topic: pt.topic, Partition: pt.partition}
	e, err := r.p.pendingEntry(r.ctx, k, pt.id)
	if err != nil {
		return err
	}
	next := span.FirstOffset
	if e != nil && e.FirstOffset == span.FirstOffset {
		// Resumed: skip what the interrupted copy appended.
		if next, err = copiedUpTo(dp, e.CopyStart, ep, next); err != nil {
			return err
		}
	} else {
		if e != nil { // an interrupted copy of another range: close it as it is
			e.CopyEnd, e.Done = dp.Offsets().LogEnd, true
			if err := r.p.writeEntry(r.ctx, k, pt.id, e); err != nil {
				return err
			}
		}
		e = &mirrorstate.ManifestEntry{DivergedRange: *span}
		e.CopyStart, e.CopyEnd, e.TruncatedAt, e.Cause = dp.Offsets().LogEnd, -1, time.Now().UnixMilli(), cause
		if err := r.p.writeEntry(r.ctx, k, pt.id, e); err != nil {
			return err
		}
	}
	err = eachBatch(ep, next, func(bs [][]byte) error {
		_, err := dp.Append(r.ctx, &engine.AppendRequest{Topic: dp.Topic(), TopicID: dp.TopicID(), Partition: dp.Index(),
			Origin: engine.OriginMirrorControl, Records: slices.Concat(bs...), Acks: -1})
		return err
	})
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	e.CopyEnd, e.Done = dp.Offsets().LogEnd, true
	if err := r.p.writeEntry(r.ctx, k, pt.id, e); err != nil {
		return err
	}
	r.log.Warn("mirror truncation: the records it removes were copied first", "topic", pt.topic, "partition", pt.partition,
		"cause", cause, "first_offset", e.FirstOffset, "last_offset", e.LastOffset, "records", e.Records,
		"copied_to", fmt.Sprintf("%s%s/%d@%d-%d", pt.topic, mirrorstate.DivergedSuffix, pt.partition, e.CopyStart, e.CopyEnd))
	return nil
}

// copiedUpTo returns the offset of ep to copy from: past the batches of
// ep from offset on that dp already holds from copyStart on (an
// interrupted copy), matched by CRC, which covers everything a copy keeps.
func copiedUpTo(dp *engine.Partition, copyStart int64, ep *engine.Partition, offset int64) (int64, error) {
	var copies []uint32
	if err := eachBatch(dp, copyStart, func(bs [][]byte) error {
		for _, b := range bs {
			copies = append(copies, infoOf(b).crc)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	next := offset
	errDone := errors.New("done")
	err := eachBatch(ep, offset, func(bs [][]byte) error {
		for _, b := range bs {
			bi := infoOf(b)
			if len(copies) == 0 || copies[0] != bi.crc {
				return errDone
			}
			copies, next = copies[1:], bi.last+1
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return 0, err
	}
	return next, nil
}

// divergedPartition returns partition p of <topic>.diverged, creating the
// topic (as many partitions as topic, retention off, batches as large as
// the mirror topic's) or its missing partitions on first use.
func (p *Plugin) divergedPartition(ctx context.Context, topic string, partition int32, ep *engine.Partition) (*engine.Partition, error) {
	name := topic + mirrorstate.DivergedSuffix
	meta := p.Host().Metadata()
	img := meta.Image()
	if img.MirrorOf(name) != "" {
		return nil, fmt.Errorf("%s is a mirror topic: %w", name, wire.ErrReadOnlyTopic)
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
	var entries []wire.DivergedEntry
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
func (p *Plugin) entriesLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) ([]wire.DivergedEntry, error) {
	var out []wire.DivergedEntry
	err := p.shardOf(ctx, k, id, func(_ *coord.Shard, s *mirrorstate.Shard) error {
		for dk, e := range s.Diverged {
			if dk.PartitionKey == k {
				out = append(out, wire.DivergedEntry{DivergedRange: e.DivergedRange, Done: e.Done})
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b wire.DivergedEntry) int { return cmp.Compare(a.CopyStart, b.CopyStart) })
	return out, err
}

// writeEntry persists a manifest entry on the partition's coordinator.
func (p *Plugin) writeEntry(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, e *mirrorstate.ManifestEntry) error {
	entry := wire.DivergedEntry{DivergedRange: e.DivergedRange, Done: e.Done}
	return p.coordinated(ctx, coordKey(k.Mirror, id, k.Partition), func() error {
		return p.writeEntriesLocal(ctx, k, id, []wire.DivergedEntry{entry})
	}, func(node int32) error {
		return p.writeRemote(ctx, node, k, wire.StatePartition{PartitionIndex: k.Partition, TopicID: id, Diverged: []wire.DivergedEntry{entry}})
	})
}

// writeEntriesLocal persists manifest entries on the local shard.
func (p *Plugin) writeEntriesLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, entries []wire.DivergedEntry) error {
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
func (p *Plugin) manifest(ctx context.Context, mirror string) []wire.DivergedRange {
	var out []wire.DivergedRange
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
	slices.SortFunc(out, func(a, b wire.DivergedRange) int {
		return cmp.Or(cmp.Compare(a.TruncatedAt, b.TruncatedAt), strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// mergeManifests merges manifest entries gathered from several brokers
// (a shard that moved may be answered twice), oldest first.
func mergeManifests(a, b []wire.DivergedRange) []wire.DivergedRange {
	type key struct {
		topic     string
		partition int32
		copyStart int64
	}
	seen := map[key]bool{}
	var out []wire.DivergedRange
	for _, d := range slices.Concat(a, b) {
		if k := (key{d.Topic, d.Partition, d.CopyStart}); !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b wire.DivergedRange) int {
		return cmp.Or(cmp.Compare(a.TruncatedAt, b.TruncatedAt), strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}
