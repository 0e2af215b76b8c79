package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"
	"io"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
)

const defaultDeleteRetention = 24 * time.Hour

// cleanSeg is a sealed segment as compaction sees it.
type cleanSeg struct {
	seg  *segment
	sf   *segfile.File // seg.file when read: compaction replaces it
	f    vfs.File
	size int64
	next int64 // the next segment's base: the end of this one's offsets
}

// compact keeps the latest record of every key, as Kafka's log cleaner
// does: it rewrites the sealed segments wholly below the high watermark,
// each into a new file renamed over it, with only their live records at
// their offsets, and drops tombstones older than delete.retention.
// Segments with records younger than min.compaction.lag are left for a
// later pass, as is the active segment. Control and transactional batches
// are kept as they are.
func (p *Partition) compact(now time.Time, cfg *LogConfig) error {
	p.e.closeMu.RLock()
	defer p.e.closeMu.RUnlock()
	if p.e.closed {
		return nil
	}
	nowMs := now.UnixMilli()
	segs, firstDirty, gen, err := p.compactable(nowMs, cfg)
	if err != nil || segs == nil {
		return err
	}
	defer func(all []cleanSeg) {
		for _, s := range all {
			p.e.files.Release(s.sf)
		}
	}(segs)

	deleteRetention := cfg.DeleteRetention
	if deleteRetention == 0 {
		deleteRetention = defaultDeleteRetention
	}
	c := &compaction{
		p: p, segs: segs, latest: make(map[string]int64),
		deleteRetention: deleteRetention,
		lagCutoff:       nowMs - cfg.MinCompactionLag.Milliseconds(),
		tombCutoff:      nowMs - deleteRetention.Milliseconds(),
		tombstoneDue:    int64(math.MaxInt64),
	}
	if err := c.mapKeys(firstDirty); err != nil {
		return err
	}
	cleanedUpTo, gen, stopped, err := c.rewrite(gen)
	if err != nil || stopped {
		return err
	}
	p.mu.Lock()
	if p.gen == gen {
		p.cleanedUpTo, p.tombstoneDue = cleanedUpTo, c.tombstoneDue
	}
	p.mu.Unlock()
	return nil
}

// compactable is what a compaction pass at nowMs would clean: the sealed
// segments wholly below the high watermark, their files acquired (the
// caller releases them), the first of them written since the last pass,
// and the partition's generation. No segments (nil) means no pass is due.
func (p *Partition) compactable(nowMs int64, cfg *LogConfig) (segs []cleanSeg, firstDirty int, gen uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Sealed segments wholly below the high watermark can be cleaned.
	var total, dirty int64
	firstDirty = -1
	for i := 0; i+1 < len(p.segs) && p.segs[i+1].base <= p.hwm; i++ {
		s := p.segs[i]
		segs = append(segs, cleanSeg{seg: s, sf: s.file, size: s.size, next: p.segs[i+1].base})
		total += s.size
		if s.base >= p.cleanedUpTo {
			dirty += s.size
			if firstDirty < 0 {
				firstDirty = i
			}
		}
	}
	if firstDirty < 0 {
		firstDirty = 0 // all clean: a pass for expired tombstones maps everything
	}
	// Like Kafka's min.cleanable.dirty.ratio: clean when enough of the
	// log was written since the last pass, or a kept tombstone expired.
	if total == 0 || float64(dirty) < cfg.dirtyRatio()*float64(total) && nowMs < p.tombstoneDue {
		return nil, 0, 0, nil
	}
	for i := range segs {
		f, err := p.e.files.Acquire(segs[i].sf)
		if err != nil {
			for _, s := range segs[:i] {
				p.e.files.Release(s.sf)
			}
			return nil, 0, 0, err
		}
		segs[i].f = f
	}
	return segs, firstDirty, p.gen, nil
}

// compaction is one compaction pass over segs (Partition.compact).
type compaction struct {
	p    *Partition
	segs []cleanSeg
	// latest is the latest offset of every key mapped (mapKeys).
	latest          map[string]int64
	buf             []byte // decompressed records, reused
	deleteRetention time.Duration
	// lagCutoff: segments with a record younger than this wait
	// (min.compaction.lag); tombCutoff: tombstones older than this go.
	lagCutoff, tombCutoff int64
	// tombstoneDue is when the first tombstone kept expires.
	tombstoneDue int64
}

// mapKeys is pass 1: the latest offset of every key of the dirty
// segments (those written since the last pass, from firstDirty), over as
// many as the map may take of the memory budget (Kafka's dedupe buffer);
// the segments after those wait for the next pass. Every segment up to
// them is then cleaned against the map.
func (c *compaction) mapKeys(firstDirty int) error {
	segs := c.segs
	mapBytes, mapLimit, scanned := int64(0), c.p.e.cfg.MemoryBudget/8, len(segs)
	err := eachBatch(segs[firstDirty:], func(s *cleanSeg, _ int64, b recordbatch.Batch) error {
		if mapBytes > mapLimit {
			scanned = indexOfSeg(segs, s)
			return errMapFull
		}
		if b.IsControl() || b.IsTransactional() {
			return nil
		}
		var err error
		if c.buf, err = recordbatch.DecompressAll(c.buf, b, compactDecompressLimit); err != nil {
			return nil // unreadable: kept as is, and it supersedes nothing
		}
		_ = recordbatch.WalkRecords(&recordbatch.SliceSource{B: c.buf}, b.RecordCount(), func(r *recordbatch.Record) error {
			if !r.KeyNull {
				if _, ok := c.latest[string(r.Key)]; !ok {
					mapBytes += int64(len(r.Key)) + 64 // the key and a map entry's overhead
				}
				c.latest[string(r.Key)] = b.BaseOffset() + int64(r.OffsetDelta)
			}
			return nil
		})
		return nil
	})
	if err != nil && err != errMapFull {
		return err
	}
	// A segment only partly in the map is not cleaned: its later records
	// might supersede nothing that was seen.
	c.segs = segs[:scanned]
	return nil
}

// rewrite is pass 2: it rewrites, segment by segment, those with dead
// records, from generation gen. cleanedUpTo is the end of the segments
// cleaned; stopped says the partition was truncated or trimmed meanwhile,
// so the pass leaves its result for the next one to redo.
func (c *compaction) rewrite(gen uint64) (cleanedUpTo int64, _ uint64, stopped bool, _ error) {
	for i := range c.segs {
		s := &c.segs[i]
		if s.seg.maxTs > c.lagCutoff {
			break // too recent: this and later segments wait
		}
		cleanedUpTo = s.next
		w, err := c.p.rewriteSegment(s, c.keep)
		if err != nil {
			return 0, gen, false, err
		}
		if w == nil {
			continue // nothing to remove
		}
		if gen, err = c.p.installSegment(s, w, gen); err != nil {
			return 0, gen, false, err
		}
		if gen == 0 {
			return 0, gen, true, nil // truncated or trimmed meanwhile: the next pass redoes it
		}
	}
	return cleanedUpTo, gen, false, nil
}

// keep is batch b as compaction leaves it: whole, without its dead
// records (rebuilt), or gone (nil).
func (c *compaction) keep(b recordbatch.Batch) (recordbatch.Batch, error) {
	if b.IsControl() || b.IsTransactional() {
		return b, nil
	}
	var err error
	if c.buf, err = recordbatch.DecompressAll(c.buf, b, compactDecompressLimit); err != nil {
		return b, nil
	}
	var kept []byte
	n := int32(0)
	err = recordbatch.WalkRecords(&recordbatch.SliceSource{B: c.buf}, b.RecordCount(), func(r *recordbatch.Record) error {
		// A key not in the map has no later record: the map covers
		// every record after the segments cleaned before.
		if off, ok := c.latest[string(r.Key)]; r.KeyNull || ok && off != b.BaseOffset()+int64(r.OffsetDelta) {
			return nil
		}
		if r.ValueNull {
			if b.MaxTimestamp() < c.tombCutoff {
				return nil
			}
			c.tombstoneDue = min(c.tombstoneDue, b.MaxTimestamp()+c.deleteRetention.Milliseconds())
		}
		kept = append(kept, r.Raw...)
		n++
		return nil
	})
	switch {
	case err != nil || n == b.RecordCount():
		return b, nil
	case n == 0:
		return nil, nil
	default:
		return rebuildBatch(b, kept, n)
	}
}

var errMapFull = errors.New("compaction map full")

func indexOfSeg(segs []cleanSeg, s *cleanSeg) int {
	for i := range segs {
		if &segs[i] == s {
			return i
		}
	}
	return len(segs)
}

// eachBatch calls fn with every batch of the segments, read whole.
func eachBatch(segs []cleanSeg, fn func(s *cleanSeg, pos int64, b recordbatch.Batch) error) error {
	var buf []byte
	for i := range segs {
		s := &segs[i]
		hr := segfile.HeaderReader{F: s.f, End: s.size}
		for pos := int64(0); ; {
			h, err := hr.Header(pos)
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("compaction read of segment %d at %d: %w", s.seg.base, pos, err)
			}
			b, err := segfile.ReadBatch(s.f, pos, h, buf)
			if err != nil {
				return fmt.Errorf("compaction read of segment %d at %d: %w", s.seg.base, pos, err)
			}
			buf = b
			if err := fn(s, pos, b); err != nil {
				return err
			}
			pos += h.Size
		}
	}
	return nil
}

// cleaned is a compacted copy of a segment, written and synced.
type cleaned struct {
	path  string
	size  int64
	index []cleanedIndex
	sum   segment
}

type cleanedIndex struct{ offset, pos, before int64 }

// rewriteSegment writes the segment's batches, as keep returns them (nil:
// dropped), to a new file next to it. It returns nil when keep changed
// nothing (and removes the copy).
func (p *Partition) rewriteSegment(s *cleanSeg, keep func(recordbatch.Batch) (recordbatch.Batch, error)) (*cleaned, error) {
	fs := p.e.fs
	out := &cleaned{path: s.sf.Path + segfile.CleanedSuffix}
	out.sum = segment{base: s.seg.base, next: s.seg.base, created: s.seg.created}
	f, err := fs.Create(out.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("compaction of segment %d: %w", s.seg.base, err)
	}
	var (
		changed bool
		lastIdx = int64(-indexInterval)
		w       []byte // write buffer
	)
	err = eachBatch([]cleanSeg{*s}, func(_ *cleanSeg, _ int64, b recordbatch.Batch) error {
		nb, err := keep(b)
		if err != nil {
			return err
		}
		if nb == nil || len(nb) != len(b) {
			changed = true
		}
		if nb == nil {
			return nil
		}
		pos := out.sum.size
		if pos-lastIdx >= indexInterval {
			before := int64(math.MinInt64)
			if pos > 0 {
				before = out.sum.maxTs
			}
			out.index = append(out.index, cleanedIndex{nb.BaseOffset(), pos, before})
			lastIdx = pos
		}
		out.sum.noteBatch(batchMeta{Base: nb.BaseOffset(), LastDelta: nb.LastOffsetDelta(), Size: int32(len(nb)),
			MaxTs: nb.MaxTimestamp(), MaxTsDelta: maxTimestampDelta(nb), Epoch: nb.LeaderEpoch()})
		if w = append(w, nb...); len(w) >= 1<<20 {
			_, err = f.Write(w)
			w = w[:0]
		}
		return err
	})
	if err == nil && changed {
		if _, err = f.Write(w); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || !changed {
		fs.Remove(out.path)
		if err != nil {
			return nil, fmt.Errorf("compaction of segment %d: %w", s.seg.base, err)
		}
		return nil, nil
	}
	out.size = out.sum.size
	return out, nil
}

// installSegment renames the compacted copy over the segment and replaces
// its index entries and summary. A marker in Pebble spans the rename: a
// crash between it and the new index makes the next Open rebuild the
// segment's index from the file. It returns the partition's new
// generation, or 0 when the partition changed since gen (the copy is
// then dropped).
func (p *Partition) installSegment(s *cleanSeg, c *cleaned, gen uint64) (uint64, error) {
	fs := p.e.fs
	unlock, err := p.lock()
	if err != nil {
		fs.Remove(c.path)
		return 0, nil
	}
	defer unlock()
	if p.gen != gen {
		fs.Remove(c.path)
		return 0, nil
	}
	// Entries still pending may describe the segment's batches (rolled
	// since the last sync round): applied first, never over the new ones.
	if err := p.flushLocked(); err != nil {
		fs.Remove(c.path)
		return 0, fmt.Errorf("compaction: %w", err)
	}
	marker := keys.Compact(p.id, p.part, s.seg.base)
	if err := p.e.db.Set(marker, nil, pebble.Sync); err != nil {
		fs.Remove(c.path)
		return 0, fmt.Errorf("compaction marker: %w", err)
	}
	p.e.hook("compact:marked")
	if err := fs.Rename(c.path, s.sf.Path); err != nil {
		return 0, fmt.Errorf("compaction rename: %w", err)
	}
	if err := segfile.SyncDir(fs, p.dir); err != nil {
		return 0, err
	}
	p.e.hook("compact:renamed")
	b := p.e.db.NewBatch()
	defer b.Close()
	b.DeleteRange(keys.Index(p.id, p.part, s.seg.base), keys.Index(p.id, p.part, s.next), nil)
	for _, x := range c.index {
		b.Set(keys.Index(p.id, p.part, x.offset), indexEntry(x.pos, x.before), nil)
	}
	b.Set(keys.Segment(p.id, p.part, s.seg.base), c.sum.summary(), nil)
	b.Delete(marker, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("compaction index: %w", err)
	}
	seg := s.seg
	old := seg.file
	seg.file = &segfile.File{Path: old.Path}
	p.e.files.Retire(old)
	seg.size, seg.next = c.size, c.sum.next
	seg.maxTs, seg.maxTsOff, seg.maxTsEpoch = c.sum.maxTs, c.sum.maxTsOff, c.sum.maxTsEpoch
	if seg.next == seg.base {
		seg.next = s.next // emptied: its offsets end where the next segment starts
	}
	p.gen++
	p.e.space.Freed()
	return p.gen, nil
}

// rebuildBatch makes a batch with the header of b and the given records
// (re-compressed with b's codec), keeping base offset and last offset
// delta so that the offsets of the kept records do not change.
func rebuildBatch(b recordbatch.Batch, records []byte, count int32) (recordbatch.Batch, error) {
	payload, err := recordbatch.Compress(b.Codec(), records)
	if err != nil {
		return nil, fmt.Errorf("compaction: compress: %w", err)
	}
	nb := make(recordbatch.Batch, recordbatch.HeaderLen, recordbatch.HeaderLen+len(payload))
	copy(nb, b[:recordbatch.HeaderLen])
	nb = append(nb, payload...)
	binary.BigEndian.PutUint32(nb[recordbatch.OffBatchLength:], uint32(len(nb)-12))
	binary.BigEndian.PutUint32(nb[recordbatch.OffRecordCount:], uint32(count))
	nb.FixCRC()
	return nb, nil
}
