package engine

import (
	"errors"
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"
	"io"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
)

// loadLocked (re)builds the partition's state from Pebble and its segment
// files. Pebble covers the log below the recovery point; the batches
// after it (appended since the last sync round, or not durable at a
// crash) are read back from the files and checked: the first torn or
// corrupt one and everything after it are cut, so that the log is its
// acknowledged prefix again. cut, when set, is where the log must end (a
// failed sync rolls back to the last good one). The recovered metadata
// is synced before the partition serves.
func (p *Partition) loadLocked(cut *recoveryPoint) error {
	p.forgetLocked()
	point, hasPoint, summaries, compacting, err := p.readMetaLocked()
	if err != nil {
		return err
	}
	if cut != nil {
		point, hasPoint = *cut, true
		point.exact = true
	}
	if err := p.openSegmentsLocked(summaries); err != nil {
		return err
	}
	p.pending = p.e.db.NewBatch()
	for base := range compacting {
		if err := p.reindexLocked(base); err != nil {
			return err
		}
		p.pending.Delete(keys.Compact(p.id, p.part, base), nil)
	}
	from, pos, err := p.replayStartLocked(point, hasPoint)
	if err != nil {
		return err
	}
	replayed, err := p.replayLocked(from, pos)
	if err != nil {
		return err
	}
	p.leo = max(p.leo, p.logStart)
	p.hwm = p.leo
	p.countOpenTxnsLocked()
	if seg := p.active(); seg != nil {
		p.synced = recoveryPoint{seg: seg.base, pos: seg.size, next: p.leo}
	} else {
		p.synced = recoveryPoint{seg: p.leo, next: p.leo}
	}
	return p.saveRecoveredLocked(replayed)
}

// forgetLocked drops the partition's state in memory, for loadLocked to
// rebuild it.
func (p *Partition) forgetLocked() {
	for _, s := range p.segs {
		p.e.files.Retire(s.file)
	}
	if p.pending != nil {
		p.pending.Close()
	}
	p.segs, p.epochs, p.aborted, p.pending = nil, nil, nil, nil
	p.producers = make(map[int64]*producerEntry)
	clear(p.dirtyPIDs)
	p.lastIndexPos, p.failed = -1, nil
	p.gen++
}

// openSegmentsLocked lists the partition's segment files into p.segs,
// each with its summary from Pebble (summaries, by base) if it has one.
// Segments wholly below the log start are what a retention pass committed
// but did not delete before a crash: they go.
func (p *Partition) openSegmentsLocked(summaries map[int64][]byte) error {
	fs := p.e.fs
	bases, err := segfile.List(fs, p.dir)
	if err != nil {
		return err
	}
	for len(bases) > 1 && bases[1] <= p.logStart {
		if err := fs.Remove(fs.PathJoin(p.dir, segfile.Name(bases[0]))); err != nil {
			return fmt.Errorf("remove segment %d below the log start: %w", bases[0], err)
		}
		bases = bases[1:]
	}
	now := p.e.cfg.Now().UnixMilli()
	for _, base := range bases {
		path := fs.PathJoin(p.dir, segfile.Name(base))
		st, err := fs.Stat(path)
		if err != nil {
			return fmt.Errorf("segment %d: %w", base, err)
		}
		seg := &segment{base: base, next: base, size: st.Size(), created: now, file: &segfile.File{Path: path, RW: true}}
		if v, ok := summaries[base]; ok {
			if err := seg.decodeSummary(v); err != nil {
				return err
			}
		}
		p.segs = append(p.segs, seg)
	}
	return nil
}

// replayStartLocked is where replay starts (segment from at position
// pos): the recovery point, if Pebble and the files agree on it; else
// from the first segment, with the metadata rebuilt. An exact point (a
// truncation committed but perhaps not done to the files) is cut to
// first.
func (p *Partition) replayStartLocked(point recoveryPoint, hasPoint bool) (from int, pos int64, err error) {
	if hasPoint && point.exact {
		if i := p.segIndex(point.seg); i >= 0 {
			err = p.cutLocked(i, point.pos)
		} else {
			err = p.dropSegmentsLocked(0)
		}
		if err != nil {
			return 0, 0, err
		}
		// The cut is done: what is appended after it must be replayed
		// at the next start, not cut, whether or not a later recovery
		// point is durable by then (settleTruncationLocked). Open syncs
		// this with the rest of the recovered metadata.
		plain := point
		plain.exact = false
		p.pending.Set(keys.Recovery(p.id, p.part), plain.encode(), nil)
	}
	p.leo = p.logStart
	if len(p.segs) > 0 {
		p.leo = p.segs[0].base
	}
	switch i := p.segIndex(point.seg); {
	case !hasPoint:
		for _, s := range p.segs {
			s.size = 0
		}
	case i >= 0 && point.pos <= p.segs[i].size:
		from, pos, p.leo = i, point.pos, point.next
		// The segment's summary and index cover the point.
		p.segs[i].size = point.pos
		p.lastIndexPos = pos
	case len(p.segs) == 0:
		p.leo = max(point.next, p.logStart) // nothing written since a truncation
	default:
		p.rebuildLocked(point)
	}
	return from, pos, nil
}

// saveRecoveredLocked makes what was replayed durable and writes its
// metadata, unsynced: the caller syncs Pebble once for every partition it
// loads.
func (p *Partition) saveRecoveredLocked(replayed bool) error {
	if !replayed && p.pending.Empty() {
		p.pending.Close()
		p.pending = nil
		return nil
	}
	w, ok := p.takePendingLocked()
	if !ok {
		err := p.e.db.Apply(p.pending, pebble.NoSync)
		p.pending.Close()
		p.pending = nil
		return err
	}
	defer w.batch.Close()
	if replayed {
		if err := w.sync(p.e); err != nil {
			return fmt.Errorf("sync recovered segment: %w", err)
		}
	} else {
		p.e.files.Release(w.file)
	}
	if err := p.e.db.Apply(w.batch, pebble.NoSync); err != nil {
		return fmt.Errorf("write recovered metadata: %w", err)
	}
	return nil
}

// reloadLocked rolls the log back to its last durable point and reloads
// its state (after a failed sync).
func (p *Partition) reloadLocked() error {
	cut := p.synced
	err := p.loadLocked(&cut)
	if err == nil {
		err = p.e.db.LogData(nil, pebble.Sync)
	}
	p.notifyLocked()
	return err
}

// readMetaLocked loads the epoch cache, aborted transactions and producer
// state, and returns the recovery point, the segment summaries and the
// segments whose compaction was being installed.
func (p *Partition) readMetaLocked() (point recoveryPoint, hasPoint bool, summaries map[int64][]byte, compacting map[int64]bool, err error) {
	pre := keys.Data(p.id, p.part)
	it, err := p.e.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: keys.PrefixEnd(pre)})
	if err != nil {
		return point, false, nil, nil, err
	}
	defer it.Close()
	summaries = map[int64][]byte{}
	compacting = map[int64]bool{}
	for it.First(); it.Valid(); {
		k := it.Key()
		switch k[len(pre)] {
		case keys.SubIndex:
			// The index is read when needed, never loaded.
			it.SeekGE(keys.Sub(p.id, p.part, keys.SubIndex+1))
			continue
		case keys.SubSegment:
			summaries[keys.Suffix64(k)] = append([]byte(nil), it.Value()...)
		case keys.SubRecovery:
			if point, err = decodeRecoveryPoint(it.Value()); err != nil {
				return point, false, nil, nil, err
			}
			hasPoint = true
		case keys.SubCompact:
			compacting[keys.Suffix64(k)] = true
		case keys.SubEpoch:
			p.epochs = append(p.epochs, epochEntry{keys.Suffix32(k), be64(it.Value())})
		case keys.SubAborted:
			v := it.Value()
			if len(v) != 16 {
				return point, false, nil, nil, fmt.Errorf("aborted transaction entry of %d bytes", len(v))
			}
			p.aborted = append(p.aborted, abortedTxn{be64(v), be64(v[8:]), keys.Suffix64(k[:len(k)-8])})
		case keys.SubProduce:
			pe, err := decodeProducer(it.Value())
			if err != nil {
				return point, false, nil, nil, err
			}
			p.producers[keys.Suffix64(k)] = pe
		}
		it.Next()
	}
	return point, hasPoint, summaries, compacting, it.Error()
}

func (p *Partition) segIndex(base int64) int {
	for i, s := range p.segs {
		if s.base == base {
			return i
		}
	}
	return -1
}

// rebuildLocked drops the metadata derived from the log, to rebuild it
// by replaying every segment: Pebble's recovery point lies beyond the
// files (the metadata of a write the disk then lost), so nothing derived
// from the log can be trusted.
func (p *Partition) rebuildLocked(point recoveryPoint) {
	p.e.log.Warn("log metadata ahead of the segment files; rebuilding it from the segments",
		"topic", p.topic, "partition", p.part, "recovery_segment", point.seg, "recovery_position", point.pos)
	for _, sub := range []byte{keys.SubIndex, keys.SubSegment, keys.SubEpoch, keys.SubProduce, keys.SubAborted} {
		pre := keys.Sub(p.id, p.part, sub)
		p.pending.DeleteRange(pre, keys.PrefixEnd(pre), nil)
	}
	p.epochs, p.aborted = nil, nil
	p.producers = make(map[int64]*producerEntry)
	clear(p.dirtyPIDs)
	for _, s := range p.segs {
		s.size, s.next = 0, s.base
	}
	p.leo = p.segs[0].base
}

// replayLocked reads the batches of segments from, from position pos on,
// and applies each to the partition's state; the first torn, corrupt or
// out-of-order batch and everything after it are cut.
func (p *Partition) replayLocked(from int, pos int64) (changed bool, err error) {
	var buf []byte
	for i := from; i < len(p.segs); i++ {
		seg := p.segs[i]
		if i > from {
			pos = 0
			p.lastIndexPos = -1
			seg.size, seg.next = 0, seg.base
			if seg.base < p.leo {
				// Rolled at the log end, so it cannot start below it.
				return true, p.dropSegmentsLocked(i)
			}
		}
		f, err := p.e.files.Acquire(seg.file)
		if err != nil {
			return changed, err
		}
		st, err := f.Stat()
		if err != nil {
			p.e.files.Release(seg.file)
			return changed, err
		}
		hr := segfile.HeaderReader{F: f, End: st.Size()}
		var bad error
		for {
			h, err := hr.Header(pos)
			if err == io.EOF {
				break
			}
			var b recordbatch.Batch
			if err == nil {
				b, err = segfile.ReadBatch(f, pos, h, buf)
				buf = b
			}
			if err == nil && h.Base < p.leo {
				err = fmt.Errorf("batch at offset %d below the log end %d: %w", h.Base, p.leo, segfile.ErrTorn)
			}
			if err != nil {
				bad = err
				break
			}
			m := batchMeta{Base: h.Base, LastDelta: b.LastOffsetDelta(), Size: int32(h.Size), MaxTs: h.MaxTs,
				MaxTsDelta: maxTimestampDelta(b), Epoch: h.Epoch}
			p.applyLocked(seg, pos, b, m)
			pos += h.Size
			changed = true
		}
		p.e.files.Release(seg.file)
		if bad != nil || pos < st.Size() {
			if !errors.Is(bad, segfile.ErrTorn) && bad != nil {
				return changed, fmt.Errorf("recover segment %d at %d: %w", seg.base, pos, bad)
			}
			p.e.log.Warn("recovery: cutting a torn log tail", "topic", p.topic, "partition", p.part,
				"segment", seg.base, "position", pos, "file_size", st.Size(), "next_offset", p.leo)
			return true, p.cutLocked(i, pos)
		}
	}
	return changed, nil
}

// maxTimestampDelta is the offset delta of the batch's record with the
// largest timestamp (the first of them), as appends record it.
func maxTimestampDelta(b recordbatch.Batch) int32 {
	if b.LogAppendTime() {
		return 0
	}
	delta, maxTs := b.LastOffsetDelta(), int64(math.MinInt64)
	recordbatch.Walk(b, compactDecompressLimit, func(r *recordbatch.Record) error {
		if ts := b.BaseTimestamp() + r.TimestampDelta; ts > maxTs {
			maxTs, delta = ts, r.OffsetDelta
		}
		return nil
	})
	return delta
}

// cutLocked ends the log at position pos of segment i: the file is cut
// there and the segments after it deleted, with their metadata.
func (p *Partition) cutLocked(i int, pos int64) error {
	seg := p.segs[i]
	if err := p.truncateSegmentLocked(seg, pos); err != nil {
		return err
	}
	seg.size = min(seg.size, pos)
	return p.dropSegmentsLocked(i + 1)
}

// dropSegmentsLocked deletes the segments from i on, files and metadata.
func (p *Partition) dropSegmentsLocked(i int) error {
	if i >= len(p.segs) {
		return nil
	}
	fs := p.e.fs
	for _, s := range p.segs[i:] {
		p.e.files.Retire(s.file)
		if err := fs.Remove(s.file.Path); err != nil {
			return fmt.Errorf("remove segment %d: %w", s.base, err)
		}
		if p.pending == nil {
			p.pending = p.e.db.NewBatch()
		}
		p.pending.Delete(keys.Segment(p.id, p.part, s.base), nil)
	}
	p.pending.DeleteRange(keys.Index(p.id, p.part, p.segs[i].base), keys.PrefixEnd(keys.Sub(p.id, p.part, keys.SubIndex)), nil)
	p.segs = p.segs[:i:i]
	return segfile.SyncDir(fs, p.dir)
}

// reindexLocked rebuilds the index entries and the summary of the
// segment at base from its file (a compaction was installing it when the
// broker stopped, so its index may describe the file it replaced).
func (p *Partition) reindexLocked(base int64) error {
	i := p.segIndex(base)
	if i < 0 {
		return nil
	}
	seg := p.segs[i]
	end := []byte(keys.PrefixEnd(keys.Sub(p.id, p.part, keys.SubIndex)))
	if i+1 < len(p.segs) {
		end = keys.Index(p.id, p.part, p.segs[i+1].base)
	}
	p.pending.DeleteRange(keys.Index(p.id, p.part, base), end, nil)
	f, err := p.e.files.Acquire(seg.file)
	if err != nil {
		return err
	}
	defer p.e.files.Release(seg.file)
	hr := segfile.HeaderReader{F: f, End: seg.size}
	seg.next = seg.base
	pos, last, maxTs := int64(0), int64(-indexInterval), int64(math.MinInt64)
	for {
		h, err := hr.Header(pos)
		if err != nil {
			break // the file was synced before its rename: only its end stops the walk
		}
		if pos-last >= indexInterval {
			p.pending.Set(keys.Index(p.id, p.part, h.Base), indexEntry(pos, maxTs), nil)
			last = pos
		}
		if h.MaxTs > maxTs || pos == 0 {
			maxTs, seg.maxTs, seg.maxTsOff, seg.maxTsEpoch = h.MaxTs, h.MaxTs, h.Last, h.Epoch
		}
		seg.next = h.Last + 1
		pos += h.Size
	}
	p.pending.Set(keys.Segment(p.id, p.part, base), seg.summary(), nil)
	return nil
}
