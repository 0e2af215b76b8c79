// Package diverged is the mirror's divergence quarantine, as it acts on
// logs: whatever a truncation (LME, epoch divergence, a source that lost
// its tail, a consistent cut) is about to remove from a mirror partition
// — the old primary's writes after a split, typically — is first copied,
// batch by batch and byte for byte from the batch attributes on, into
// the same partition of the regular topic <topic>.diverged (its own
// offsets and leader epoch in the batch header; the originals are in the
// manifest), and recorded in the mirror's divergence manifest in
// __mirror_state. Nothing a mirror removes is lost silently.
//
// It knows engine partitions and manifest entries only. Creating the
// <topic>.diverged partition and reading and writing the manifest on the
// partition's __mirror_state coordinator are the mirror plugin's
// (plugins/mirror, quarantine.go), passed in as Manifest and a function
// that opens the diverged partition; the plugin truncates the log once
// Quarantine returns.
package diverged

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// copyChunk bounds the bytes of one append of copies: memory stays
// bounded whatever the size of the divergence.
const copyChunk = 1 << 20

// Manifest is one mirror partition's divergence manifest, as the
// quarantine uses it. Entries are keyed by their CopyStart: writing an
// entry with the CopyStart of one already there replaces it.
type Manifest interface {
	// Pending returns the partition's entry whose copy is not done, nil
	// if none: a copy a broker died in the middle of.
	Pending(ctx context.Context) (*mirrorstate.ManifestEntry, error)
	// Write persists an entry.
	Write(ctx context.Context, e *mirrorstate.ManifestEntry) error
}

// Quarantine copies what truncating ep to offset to removes into the
// diverged partition that open returns, and records it in m. It returns
// the entry it finished, nil when the truncation removes nothing (then it
// neither opens the diverged partition nor writes to m).
//
// The entry is written before the copy and marked done after it, so a
// broker that dies in the middle finds it pending. Quarantine is
// idempotent: it resumes a pending copy of the same range after the
// batches already there (known by their CRCs), so nothing is copied
// twice; a pending copy of another range is closed as it is first.
func Quarantine(ctx context.Context, ep plugin.Log, to int64, cause string, m Manifest, open func() (plugin.Log, error)) (*mirrorstate.ManifestEntry, error) {
	span, err := removed(ep, to)
	if err != nil || span == nil {
		return nil, err
	}
	dp, err := open()
	if err != nil {
		return nil, err
	}
	e, err := m.Pending(ctx)
	if err != nil {
		return nil, err
	}
	next := span.FirstOffset
	if e != nil && e.FirstOffset == span.FirstOffset {
		// Resumed: skip what the interrupted copy appended.
		if next, err = copiedUpTo(dp, e.CopyStart, ep, next); err != nil {
			return nil, err
		}
	} else {
		if e != nil { // an interrupted copy of another range: close it as it is
			e.CopyEnd, e.Done = dp.Offsets().LogEnd, true
			if err := m.Write(ctx, e); err != nil {
				return nil, err
			}
		}
		e = &mirrorstate.ManifestEntry{DivergedRange: *span}
		e.CopyStart, e.CopyEnd, e.TruncatedAt, e.Cause = dp.Offsets().LogEnd, -1, time.Now().UnixMilli(), cause
		if err := m.Write(ctx, e); err != nil {
			return nil, err
		}
	}
	err = eachBatch(ep, next, func(bs [][]byte) error {
		_, err := dp.Append(ctx, &engine.AppendRequest{Topic: dp.Topic(), TopicID: dp.TopicID(), Partition: dp.Index(),
			Origin: engine.OriginPluginControl, Records: slices.Concat(bs...), Acks: -1})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("copy: %w", err)
	}
	e.CopyEnd, e.Done = dp.Offsets().LogEnd, true
	if err := m.Write(ctx, e); err != nil {
		return nil, err
	}
	return e, nil
}

// removed returns what truncating ep to offset to removes, nil if
// nothing: whole batches, from the one holding to (or the log start, if
// later) on. The copy range is left for Quarantine to fill in.
func removed(ep plugin.Log, to int64) (*mirrorproto.DivergedRange, error) {
	var span *mirrorproto.DivergedRange
	err := eachBatch(ep, max(to, ep.Offsets().LogStart), func(bs [][]byte) error {
		for _, b := range bs {
			bi := infoOf(b)
			if span == nil {
				span = &mirrorproto.DivergedRange{Topic: ep.Topic(), Partition: ep.Index(), FirstOffset: bi.base, FirstEpoch: bi.epoch, FirstTimestamp: bi.firstTs}
			}
			span.LastOffset, span.LastEpoch, span.LastTimestamp = bi.last, bi.epoch, max(span.LastTimestamp, bi.maxTs)
			span.Records += int64(bi.records)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return span, nil
}

// copiedUpTo returns the offset of ep to copy from: past the batches of
// ep from offset on that dp already holds from copyStart on (an
// interrupted copy), matched by CRC, which covers everything a copy keeps.
func copiedUpTo(dp plugin.Log, copyStart int64, ep plugin.Log, offset int64) (int64, error) {
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
func eachBatch(ep plugin.Log, offset int64, fn func([][]byte) error) error {
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

// Merge merges manifest entries gathered from several brokers (a shard
// that moved may be answered twice), oldest first.
func Merge(a, b []mirrorproto.DivergedRange) []mirrorproto.DivergedRange {
	type key struct {
		topic     string
		partition int32
		copyStart int64
	}
	seen := map[key]bool{}
	var out []mirrorproto.DivergedRange
	for _, d := range slices.Concat(a, b) {
		if k := (key{d.Topic, d.Partition, d.CopyStart}); !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b mirrorproto.DivergedRange) int {
		return cmp.Or(cmp.Compare(a.TruncatedAt, b.TruncatedAt), strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}
