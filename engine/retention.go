package engine

import (
	"encoding/binary"
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"
	"io"
	"math"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
	"github.com/twmb/franz-go/pkg/kerr"
)

// producerExpiration is Kafka's producer.id.expiration.ms default: the
// state of a producer idle this long (and with no open transaction) goes.
const producerExpiration = 24 * time.Hour

// compactDecompressLimit bounds what compaction inflates per batch;
// larger batches (possible only from mirrors) are kept as they are.
const compactDecompressLimit = 64 << 20

// lock takes the locks for a change that rewrites the log or its
// metadata, in their order: engine close lock, metaMu, p.mu.
func (p *Partition) lock() (unlock func(), err error) {
	p.e.closeMu.RLock()
	if p.e.closed {
		p.e.closeMu.RUnlock()
		return nil, errClosed
	}
	p.metaMu.Lock()
	p.mu.Lock()
	if p.deleted {
		p.mu.Unlock()
		p.metaMu.Unlock()
		p.e.closeMu.RUnlock()
		return nil, fmt.Errorf("%s-%d: partition deleted: %w", p.topic, p.part, kerr.UnknownTopicOrPartition)
	}
	return func() { p.mu.Unlock(); p.metaMu.Unlock(); p.e.closeMu.RUnlock() }, nil
}

// DeleteRecords moves the log start offset to before (-1: the high
// watermark) and deletes the segments wholly below it.
func (p *Partition) DeleteRecords(before int64) (int64, error) {
	unlock, err := p.lock()
	if err != nil {
		return -1, err
	}
	defer unlock()
	if before == -1 {
		before = p.hwm
	}
	if before < 0 || before > p.hwm {
		return -1, fmt.Errorf("%s-%d: delete records before %d, high watermark %d: %w", p.topic, p.part, before, p.hwm, kerr.OffsetOutOfRange)
	}
	if before <= p.logStart {
		return p.logStart, nil
	}
	n := 0
	for n+1 < len(p.segs) && p.segs[n+1].base <= before {
		n++
	}
	if err := p.removeBelowLocked(n, before); err != nil {
		return -1, err
	}
	return p.logStart, nil
}

// removeBelowLocked deletes the first n segments and sets the log start
// offset to logStart. The metadata goes first: a crash before the files
// are deleted leaves segments below the log start, which the next Open
// deletes.
func (p *Partition) removeBelowLocked(n int, logStart int64) error {
	if n > 0 {
		if err := p.flushLocked(); err != nil {
			return fmt.Errorf("%s-%d: delete below %d: %w", p.topic, p.part, logStart, err)
		}
	}
	b := p.e.db.NewBatch()
	defer b.Close()
	if n > 0 {
		end := p.segs[n].base
		b.DeleteRange(keys.Index(p.id, p.part, 0), keys.Index(p.id, p.part, end), nil)
		b.DeleteRange(keys.Segment(p.id, p.part, 0), keys.Segment(p.id, p.part, end), nil)
	}
	// Epoch cache: entries wholly below the new start go, the one in
	// force at it now starts there (Kafka's truncateFromStart).
	epochs := p.epochs
	k := sort.Search(len(epochs), func(i int) bool { return epochs[i].Start > logStart })
	if k > 0 {
		for _, en := range epochs[:k-1] {
			b.Delete(keys.Epoch(p.id, p.part, en.Epoch), nil)
		}
		epochs = append([]epochEntry{{epochs[k-1].Epoch, logStart}}, epochs[k:]...)
		b.Set(keys.Epoch(p.id, p.part, epochs[0].Epoch), epochValue(logStart), nil)
	}
	a := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].Last >= logStart })
	b.DeleteRange(keys.Aborted(p.id, p.part, 0), keys.Aborted(p.id, p.part, logStart), nil)
	old := p.logStart
	p.logStart = logStart
	b.Set(keys.State(p.id, p.part), p.encodeState(), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		p.logStart = old
		return fmt.Errorf("%s-%d: delete below %d: %w", p.topic, p.part, logStart, err)
	}
	p.e.hook("retention:committed")
	p.epochs = epochs
	p.aborted = p.aborted[a:]
	for _, s := range p.segs[:n] {
		p.e.files.Retire(s.file)
		if err := p.e.fs.Remove(s.file.Path); err != nil {
			p.e.log.Warn("deleting a segment below the log start", "path", s.file.Path, "err", err)
		}
	}
	p.segs = append([]*segment(nil), p.segs[n:]...)
	p.gen++
	p.e.space.Freed()
	return nil
}

// Truncate removes everything at or above offset. A batch that straddles
// offset goes whole (the log end offset becomes its base); truncating
// below the log start empties the log and restarts it at offset.
//
// The metadata is committed first with an exact recovery point: a crash
// before the files are cut makes the next Open cut them, instead of
// recovering the batches as if they had been appended.
func (p *Partition) Truncate(offset int64) error { return p.truncate(offset, false) }

// StartOver empties the log and starts it again at offset, which may be
// above its end: a follower whose log ends below its leader's log start
// (it was away while retention or DeleteRecords moved the start) fetches
// from there, as Kafka's truncateFullyAndStartAt does. The epoch cache,
// producer state and aborted transactions go with the records.
func (p *Partition) StartOver(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("%s-%d: start over at %d: %w", p.topic, p.part, offset, kerr.OffsetOutOfRange)
	}
	return p.truncate(offset, true)
}

func (p *Partition) truncate(offset int64, full bool) error {
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if offset >= p.leo && !full {
		return nil
	}
	if err := p.flushLocked(); err != nil {
		return fmt.Errorf("%s-%d: truncate to %d: %w", p.topic, p.part, offset, err)
	}
	t, err := p.truncationLocked(offset, full)
	if err != nil {
		return fmt.Errorf("%s-%d: truncate to %d: %w", p.topic, p.part, offset, err)
	}
	b := p.e.db.NewBatch()
	defer b.Close()
	if err := p.writeTruncationLocked(b, t); err != nil {
		return fmt.Errorf("%s-%d: truncate to %d: %w", p.topic, p.part, offset, err)
	}
	oldStart := p.logStart
	p.logStart = t.logStart
	b.Set(keys.State(p.id, p.part), p.encodeState(), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		p.logStart = oldStart
		return fmt.Errorf("%s-%d: truncate to %d: %w", p.topic, p.part, offset, err)
	}
	p.e.hook("truncate:committed")
	if t.i >= 0 {
		err = p.cutLocked(t.i, t.pos)
		if err == nil {
			seg := p.segs[t.i]
			seg.maxTs, seg.maxTsOff, seg.maxTsEpoch, seg.next = t.sum.maxTs, t.sum.maxTsOff, t.sum.maxTsEpoch, t.sum.next
		}
	} else {
		err = p.dropSegmentsLocked(0)
	}
	if err == nil {
		err = p.settleTruncationLocked(t.point)
	}
	if err != nil {
		// The exact recovery point finishes the cut at the next start.
		p.failed = err
		return fmt.Errorf("%s-%d: truncate to %d: %w", p.topic, p.part, offset, storageError("%v", err))
	}
	p.truncatedLocked(t)
	return nil
}

// settleTruncationLocked replaces the exact recovery point of a
// truncation whose files are cut with a plain one at the same place,
// synced before anything is appended after the cut.
//
// The exact point tells recovery to cut the log there; once the files
// are cut, what follows in them is appended later and must be replayed.
// The sync rounds' recovery points are written unsynced (Pebble keeps
// them in its process until a sync: a kill -9 loses them as a power
// loss does), so the exact point would stay the last durable one while
// durable, acknowledged appends follow it, and the next start would cut
// them: a follower that truncated to its new leader, fetched on (the
// leader counting it for acks=all) and crashed came back at the
// truncation point (TestTruncateThenCrashKeepsLaterAppends).
func (p *Partition) settleTruncationLocked(point recoveryPoint) error {
	point.exact = false
	if err := p.e.db.Set(keys.Recovery(p.id, p.part), point.encode(), pebble.Sync); err != nil {
		return fmt.Errorf("recovery point after the cut: %w", err)
	}
	return nil
}

// truncation is a truncation of a partition's log (Partition.truncate):
// where the log is cut and what goes with it.
type truncation struct {
	full bool // StartOver: everything goes, the producer state too
	// The cut: segment i (-1: every segment goes) at position pos, where
	// the batch at from starts; sum is the summary of what stays of it.
	i         int
	pos, from int64
	sum       segment
	// leo and logStart are the log's end and start after it.
	leo, logStart int64
	point         recoveryPoint // exact, at the cut
	// a and k are how many aborted transactions and epochs stay.
	a, k int
	// changed is the producers whose state lost batches or a marker.
	changed map[int64]*producerEntry
}

// truncationLocked finds where a truncation to offset cuts the log: leo
// becomes the base of the batch holding offset (or offset, in a gap).
func (p *Partition) truncationLocked(offset int64, full bool) (*truncation, error) {
	t := &truncation{full: full, i: -1, from: offset, leo: offset, logStart: p.logStart}
	if full || offset < p.logStart {
		t.leo, t.logStart = offset, offset
	} else if len(p.segs) > 0 {
		t.i = max(sort.Search(len(p.segs), func(i int) bool { return p.segs[i].base > offset })-1, 0)
		var err error
		if t.pos, t.from, t.sum, err = p.scanToLocked(p.segs[t.i], offset); err != nil {
			return nil, err
		}
		t.leo = min(t.leo, t.from)
		if t.leo < t.logStart {
			t.leo = t.logStart // the batch holding the log start went: the log is empty
		}
	}
	return t, nil
}

// writeTruncationLocked writes into b what truncation t changes in the
// metadata (but the partition's state): the cut segment's summary and the
// segments after it, an exact recovery point, the index, aborted
// transactions, epochs and producer state past the cut.
func (p *Partition) writeTruncationLocked(b *pebble.Batch, t *truncation) error {
	leo, full := t.leo, t.full
	t.point = recoveryPoint{seg: leo, next: leo, exact: true}
	from := t.from
	if t.i >= 0 {
		t.point.seg, t.point.pos = p.segs[t.i].base, t.pos
		t.sum.base, t.sum.created, t.sum.size = p.segs[t.i].base, p.segs[t.i].created, t.pos
		b.Set(keys.Segment(p.id, p.part, t.sum.base), t.sum.summary(), nil)
		for _, s := range p.segs[t.i+1:] {
			b.Delete(keys.Segment(p.id, p.part, s.base), nil)
		}
	} else {
		b.DeleteRange(keys.Segment(p.id, p.part, 0), keys.PrefixEnd(keys.Sub(p.id, p.part, keys.SubSegment)), nil)
		from = 0
	}
	b.Set(keys.Recovery(p.id, p.part), t.point.encode(), nil)
	b.DeleteRange(keys.Index(p.id, p.part, min(from, leo)), keys.PrefixEnd(keys.Sub(p.id, p.part, keys.SubIndex)), nil)
	abortedFrom := leo
	if full {
		abortedFrom = 0
	}
	b.DeleteRange(keys.Aborted(p.id, p.part, abortedFrom), keys.PrefixEnd(keys.Sub(p.id, p.part, keys.SubAborted)), nil)
	t.a = sort.Search(len(p.aborted), func(j int) bool { return p.aborted[j].Last >= abortedFrom })
	t.k = sort.Search(len(p.epochs), func(j int) bool { return p.epochs[j].Start >= leo })
	if full {
		t.k = 0
	}
	for _, en := range p.epochs[t.k:] {
		b.Delete(keys.Epoch(p.id, p.part, en.Epoch), nil)
	}
	return p.writeTruncatedProducersLocked(b, t)
}

// writeTruncatedProducersLocked writes into b the producer state after
// truncation t, noting what changed in t.changed: producer state forgets
// the batches that are gone, and a transaction whose marker is gone is
// open again.
func (p *Partition) writeTruncatedProducersLocked(b *pebble.Batch, t *truncation) error {
	var open map[int64]int64
	if t.i >= 0 {
		var err error
		if open, err = p.openTxnsLocked(t.i, t.pos); err != nil {
			return err
		}
	}
	t.changed = map[int64]*producerEntry{}
	if t.full {
		b.DeleteRange(keys.Sub(p.id, p.part, keys.SubProduce), keys.PrefixEnd(keys.Sub(p.id, p.part, keys.SubProduce)), nil)
		return nil
	}
	leo := t.leo
	for pid, pe := range p.producers {
		j := sort.Search(len(pe.Batches), func(j int) bool { return pe.Batches[j].LastOffset >= leo })
		start, ok := open[pid]
		switch {
		case !ok && pe.TxnStart >= leo:
			start = -1
		case !ok:
			start = pe.TxnStart
		}
		if j < len(pe.Batches) || pe.TxnStart != start {
			c := pe.clone()
			c.Batches = c.Batches[:j]
			c.TxnStart = start
			t.changed[pid] = c
			b.Set(keys.Producer(p.id, p.part, pid), c.encode(), nil)
		}
	}
	return nil
}

// truncatedLocked brings the partition's state in memory to truncation t,
// once its metadata is committed and its files are cut.
func (p *Partition) truncatedLocked(t *truncation) {
	leo, full := t.leo, t.full
	p.epochs = p.epochs[:t.k:t.k]
	for pid, pe := range t.changed {
		p.producers[pid] = pe
	}
	if full {
		p.producers = make(map[int64]*producerEntry)
	}
	p.countOpenTxnsLocked()
	p.aborted = p.aborted[:t.a:t.a]
	p.leo = leo
	p.hwm = min(p.hwm, leo)
	if full {
		p.hwm = leo // the log is empty at its start
		p.repl.durable, p.repl.target = leo, leo
	}
	// What replication had allowed went with the records: the next
	// advance must not bring a high watermark above the new end back.
	p.repl.durable = min(p.repl.durable, leo)
	p.repl.target = min(p.repl.target, leo)
	p.cleanedUpTo = min(p.cleanedUpTo, leo)
	p.lastIndexPos = -1
	p.synced = recoveryPoint{seg: t.point.seg, pos: t.point.pos, next: leo}
	p.gen++
	p.notifyLocked()
}

// scanToLocked walks seg from its start to the first batch whose last
// offset is at or above offset: its position and base offset (the
// segment's end and offset when there is none), and the summary of the
// segment before it.
func (p *Partition) scanToLocked(seg *segment, offset int64) (pos, base int64, sum segment, err error) {
	f, err := p.e.files.Acquire(seg.file)
	if err != nil {
		return 0, 0, sum, err
	}
	defer p.e.files.Release(seg.file)
	hr := segfile.HeaderReader{F: f, End: seg.size}
	sum.next = seg.base
	var top segfile.Header
	topPos := int64(-1)
	for {
		h, err := hr.Header(pos)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, sum, err
		}
		if h.Last >= offset {
			base = h.Base
			break
		}
		if topPos < 0 || h.MaxTs > top.MaxTs {
			top, topPos = h, pos
		}
		sum.next = h.Last + 1
		pos += h.Size
	}
	if pos == seg.size {
		base = offset
	}
	if topPos >= 0 {
		// The record with the largest timestamp, as appends record it.
		b, err := segfile.ReadBatch(f, topPos, top, nil)
		if err != nil {
			return 0, 0, sum, err
		}
		sum.maxTs, sum.maxTsOff, sum.maxTsEpoch = top.MaxTs, top.Base+int64(maxTimestampDelta(b)), top.Epoch
	}
	return pos, base, sum, nil
}

// openTxnsLocked returns the transactions a truncation at position pos
// of segment i opens again, their markers being cut: producer ID to the
// first offset of its transaction. The producers are those with a marker
// beyond pos; for each, the segments are walked back from pos until one
// holds a marker of its (or a barrier): the transaction is open if data
// of it follows that marker, from its first such batch.
func (p *Partition) openTxnsLocked(i int, pos int64) (map[int64]int64, error) {
	cut := map[int64]bool{}
	for k := i; k < len(p.segs); k++ {
		from := int64(0)
		if k == i {
			from = pos
		}
		if err := p.walkHeadersLocked(p.segs[k], from, p.segs[k].size, func(h segfile.Header) {
			if h.Attrs&recordbatch.AttrControl != 0 && h.PID >= 0 {
				cut[h.PID] = true
			}
		}); err != nil {
			return nil, err
		}
	}
	open := map[int64]int64{}
	for k := i; k >= 0 && len(cut) > 0; k-- {
		end := p.segs[k].size
		if k == i {
			end = pos
		}
		type seen struct {
			marker bool
			start  int64 // first transactional batch after the last marker, -1 none
		}
		s := map[int64]*seen{}
		if err := p.walkHeadersLocked(p.segs[k], 0, end, func(h segfile.Header) {
			switch {
			case h.Attrs&recordbatch.AttrControl != 0 && h.PID < 0: // a barrier ends them all
				for pid := range cut {
					s[pid] = &seen{marker: true, start: -1}
				}
			case !cut[h.PID]:
			case h.Attrs&recordbatch.AttrControl != 0:
				s[h.PID] = &seen{marker: true, start: -1}
			case h.Attrs&recordbatch.AttrTransactional != 0:
				if x := s[h.PID]; x == nil {
					s[h.PID] = &seen{start: h.Base}
				} else if x.start < 0 {
					x.start = h.Base
				}
			}
		}); err != nil {
			return nil, err
		}
		for pid, x := range s {
			if x.start >= 0 {
				open[pid] = x.start
			}
			if x.marker {
				delete(cut, pid)
			}
		}
	}
	return open, nil
}

// walkHeadersLocked calls fn with the header of each batch of seg
// between byte positions from and end.
func (p *Partition) walkHeadersLocked(seg *segment, from, end int64, fn func(segfile.Header)) error {
	f, err := p.e.files.Acquire(seg.file)
	if err != nil {
		return err
	}
	defer p.e.files.Release(seg.file)
	hr := segfile.HeaderReader{F: f, End: end}
	defer hr.Release()
	for pos := from; ; {
		h, err := hr.Header(pos)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		fn(h)
		pos += h.Size
	}
}

// OffsetForTimestamp finds the first record with timestamp >= ts below
// the high watermark (ListOffsets by timestamp).
func (p *Partition) OffsetForTimestamp(ts int64) (offset, timestamp int64, epoch int32, ok bool) {
	for i := 0; ; i++ {
		p.mu.Lock()
		if p.deleted || i >= len(p.segs) {
			p.mu.Unlock()
			return -1, -1, -1, false
		}
		seg, logStart, hwm := p.segs[i], p.logStart, p.hwm
		if seg.size == 0 || seg.maxTs < ts || seg.next <= logStart {
			p.mu.Unlock()
			continue
		}
		if seg.base >= hwm {
			p.mu.Unlock()
			return -1, -1, -1, false
		}
		sf, size := seg.file, seg.size
		f, err := p.e.files.Acquire(sf)
		p.mu.Unlock()
		if err != nil {
			p.e.log.Warn("offset for timestamp", "err", err)
			return -1, -1, -1, false
		}
		offset, timestamp, epoch, ok = p.searchTimestamp(f, seg.base, size, ts, logStart, hwm)
		p.e.files.Release(sf)
		if ok {
			return offset, timestamp, epoch, true
		}
	}
}

// searchTimestamp looks for the first record with timestamp >= ts in the
// segment at base, starting at the last index entry below ts.
func (p *Partition) searchTimestamp(f vfs.File, base, size, ts, logStart, hwm int64) (offset, timestamp int64, epoch int32, ok bool) {
	pos := int64(0)
	p.e.closeMu.RLock()
	if !p.e.closed {
		it, err := p.e.db.NewIter(&pebble.IterOptions{LowerBound: keys.Index(p.id, p.part, base), UpperBound: keys.PrefixEnd(keys.Sub(p.id, p.part, keys.SubIndex))})
		if err == nil {
			for it.First(); it.Valid(); it.Next() {
				v := it.Value()
				if len(v) != 16 || be64(v[8:]) >= ts || be64(v) >= size {
					break
				}
				pos = be64(v)
			}
			it.Close()
		}
	}
	p.e.closeMu.RUnlock()
	hr := segfile.HeaderReader{F: f, End: size}
	for {
		h, err := hr.Header(pos)
		if err != nil || h.Base >= hwm {
			return -1, -1, -1, false
		}
		if h.MaxTs >= ts && h.Last >= logStart {
			b, err := segfile.ReadBatch(f, pos, h, nil)
			if err != nil {
				return -1, -1, -1, false
			}
			if b.LogAppendTime() {
				return max(h.Base, logStart), h.MaxTs, h.Epoch, true
			}
			found := false
			werr := recordbatch.Walk(b, compactDecompressLimit, func(r *recordbatch.Record) error {
				o, t := h.Base+int64(r.OffsetDelta), b.BaseTimestamp()+r.TimestampDelta
				if !found && o >= logStart && t >= ts {
					offset, timestamp, found = o, t, true
				}
				return nil
			})
			if werr != nil {
				p.e.log.Warn("offset for timestamp: unreadable batch", "topic", p.topic, "partition", p.part, "base", h.Base, "err", werr)
			} else if found {
				return offset, timestamp, h.Epoch, true
			}
		}
		pos += h.Size
	}
}

// MaxTimestamp returns the record with the largest timestamp below the
// high watermark (ListOffsets -3, KIP-734); the first one on ties.
func (p *Partition) MaxTimestamp() (offset, timestamp int64, epoch int32, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	timestamp = math.MinInt64
	for _, s := range p.segs {
		if s.base >= p.hwm {
			break
		}
		if s.size > 0 && s.maxTs > timestamp && s.next > p.logStart {
			offset, timestamp, epoch, ok = max(s.maxTsOff, p.logStart), s.maxTs, s.maxTsEpoch, true
		}
	}
	if !ok {
		return -1, -1, -1, false
	}
	return offset, timestamp, epoch, true
}

// enforceRetention applies the delete and compact policies: the oldest
// segments go while they are older than retention.ms or the log is larger
// than retention.bytes without them, as in Kafka. The active segment goes
// too once it is expired and wholly durable: a new empty one is rolled
// first, so that offsets continue.
func (p *Partition) enforceRetention(now time.Time) error {
	cfg := p.cfg.Load()
	unlock, err := p.lock()
	if err != nil {
		return nil // closed or deleted meanwhile: nothing to do
	}
	nowMs := now.UnixMilli()
	if cfg.Delete {
		var size int64
		for _, s := range p.segs {
			size += s.size
		}
		n := 0
		for ; n < len(p.segs); n++ {
			s := p.segs[n]
			if n+1 < len(p.segs) && p.segs[n+1].base > p.hwm || n+1 == len(p.segs) && (s.size == 0 || p.leo > p.hwm) {
				break // not wholly below the high watermark
			}
			byTime := cfg.RetentionMs >= 0 && s.maxTs < nowMs-cfg.RetentionMs
			bySize := cfg.RetentionBytes >= 0 && size-s.size >= cfg.RetentionBytes
			if !byTime && !bySize {
				break
			}
			size -= s.size
		}
		if n == len(p.segs) && n > 0 {
			if _, err := p.rollLocked(p.leo, now); err != nil {
				unlock()
				return err
			}
		}
		if n > 0 {
			if err := p.removeBelowLocked(n, max(p.logStart, p.segs[n].base)); err != nil {
				unlock()
				return err
			}
		}
	}
	p.expireProducersLocked(now)
	unlock()
	if cfg.Compact {
		return p.compact(now, cfg)
	}
	return nil
}

// expireProducersLocked forgets idle producers; the next sync round
// deletes their state from Pebble.
func (p *Partition) expireProducersLocked(now time.Time) {
	cutoff := now.Add(-producerExpiration).UnixMilli()
	gone := false
	for pid, pe := range p.producers {
		if pe.LastTimestamp < cutoff && pe.TxnStart < 0 {
			delete(p.producers, pid)
			if p.dirtyPIDs == nil {
				p.dirtyPIDs = make(map[int64]struct{})
			}
			p.dirtyPIDs[pid] = struct{}{}
			gone = true
		}
	}
	if gone && p.active() != nil {
		p.e.syncer.register(p, false)
	}
}

// epochValue encodes an epoch cache entry's start offset.
func epochValue(start int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(start)) }
