package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kerr"
)

// producerExpiration is Kafka's producer.id.expiration.ms default: the
// state of a producer idle this long (and with no open transaction) goes.
const producerExpiration = 24 * time.Hour

// compactDecompressLimit bounds what compaction inflates per batch;
// larger batches (possible only from mirrors) are kept as they are.
const compactDecompressLimit = 64 << 20

// lock takes the locks in their order: engine close lock, then p.mu.
func (p *Partition) lock() (unlock func(), err error) {
	p.e.closeMu.RLock()
	if p.e.closed {
		p.e.closeMu.RUnlock()
		return nil, errClosed
	}
	p.mu.Lock()
	if p.deleted {
		p.mu.Unlock()
		p.e.closeMu.RUnlock()
		return nil, fmt.Errorf("%s-%d: partition deleted: %w", p.topic, p.part, kerr.UnknownTopicOrPartition)
	}
	return func() { p.mu.Unlock(); p.e.closeMu.RUnlock() }, nil
}

// DeleteRecords moves the log start offset to before (-1: the high
// watermark) and deletes the batches wholly below it.
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
	n := sort.Search(len(p.index), func(i int) bool { return p.index[i].last() >= before })
	n = min(n, len(p.index)-1) // the last batch stays so that offsets continue
	if err := p.removeBelowLocked(max(n, 0), before); err != nil {
		return -1, err
	}
	return p.logStart, nil
}

// removeBelowLocked deletes the first n batches and sets the log start
// offset to logStart.
func (p *Partition) removeBelowLocked(n int, logStart int64) error {
	b := p.e.db.NewBatch()
	defer b.Close()
	if n > 0 {
		end := p.index[n-1].last() + 1
		if n < len(p.index) {
			end = p.index[n].Base
		}
		b.DeleteRange(logKey(p.id, p.part, 0), logKey(p.id, p.part, end), nil)
		b.DeleteRange(metaKey(p.id, p.part, 0), metaKey(p.id, p.part, end), nil)
	}
	// Epoch cache: entries wholly below the new start go, the one in
	// force at it now starts there (Kafka's truncateFromStart).
	epochs := p.epochs
	k := sort.Search(len(epochs), func(i int) bool { return epochs[i].Start > logStart })
	if k > 0 {
		for _, en := range epochs[:k-1] {
			b.Delete(epochKey(p.id, p.part, en.Epoch), nil)
		}
		epochs = append([]epochEntry{{epochs[k-1].Epoch, logStart}}, epochs[k:]...)
		b.Set(epochKey(p.id, p.part, epochs[0].Epoch), binary.BigEndian.AppendUint64(nil, uint64(logStart)), nil)
	}
	a := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].Last >= logStart })
	b.DeleteRange(abortedKey(p.id, p.part, 0), abortedKey(p.id, p.part, logStart), nil)
	old := p.logStart
	p.logStart = logStart
	b.Set(stateKey(p.id, p.part), p.encodeState(), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		p.logStart = old
		return fmt.Errorf("%s-%d: delete below %d: %w", p.topic, p.part, logStart, err)
	}
	p.epochs = epochs
	p.aborted = p.aborted[a:]
	for _, m := range p.index[:n] {
		p.indexBytes -= int64(m.Size)
	}
	p.index = append([]batchMeta(nil), p.index[n:]...)
	t := sort.Search(len(p.tail), func(i int) bool { return p.tail[i].last >= logStart })
	p.dropTail(t)
	p.gen++
	return nil
}

// Truncate removes everything at or above offset. A batch that straddles
// offset goes whole (the log end offset becomes its base); truncating
// below the log start empties the log and restarts it at offset.
func (p *Partition) Truncate(offset int64) error {
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if offset >= p.leo {
		return nil
	}
	i := sort.Search(len(p.index), func(i int) bool { return p.index[i].last() >= offset })
	leo, logStart := offset, p.logStart
	if i < len(p.index) && p.index[i].Base < leo {
		leo = p.index[i].Base
	}
	if offset < p.logStart {
		i, leo, logStart = 0, offset, offset
	} else if leo < logStart {
		leo = logStart // the batch holding the log start went: the log is empty
	}
	b := p.e.db.NewBatch()
	defer b.Close()
	from := leo
	if i < len(p.index) {
		from = min(from, p.index[i].Base)
	}
	b.DeleteRange(logKey(p.id, p.part, from), prefixEnd(subPrefix(p.id, p.part, subLog)), nil)
	b.DeleteRange(metaKey(p.id, p.part, from), prefixEnd(subPrefix(p.id, p.part, subMeta)), nil)
	b.DeleteRange(abortedKey(p.id, p.part, leo), prefixEnd(subPrefix(p.id, p.part, subAborted)), nil)
	a := sort.Search(len(p.aborted), func(j int) bool { return p.aborted[j].Last >= leo })
	k := sort.Search(len(p.epochs), func(j int) bool { return p.epochs[j].Start >= leo })
	for _, en := range p.epochs[k:] {
		b.Delete(epochKey(p.id, p.part, en.Epoch), nil)
	}
	// Producer state forgets the batches that are gone.
	changed := map[int64]*producerEntry{}
	for pid, pe := range p.producers {
		j := sort.Search(len(pe.Batches), func(j int) bool { return pe.Batches[j].LastOffset >= leo })
		if j < len(pe.Batches) {
			c := pe.clone()
			c.Batches = c.Batches[:j]
			if c.TxnStart >= leo {
				c.TxnStart = -1
			}
			changed[pid] = c
			b.Set(producerKey(p.id, p.part, pid), c.encode(), nil)
		}
	}
	oldStart := p.logStart
	p.logStart = logStart
	b.Set(stateKey(p.id, p.part), p.encodeState(), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		p.logStart = oldStart
		return fmt.Errorf("%s-%d: truncate to %d: %w", p.topic, p.part, offset, err)
	}
	for _, m := range p.index[i:] {
		p.indexBytes -= int64(m.Size)
	}
	p.index = p.index[:i:i]
	p.epochs = p.epochs[:k:k]
	for pid, pe := range changed {
		p.producers[pid] = pe
	}
	p.countOpenTxnsLocked()
	p.aborted = p.aborted[:a:a]
	t := sort.Search(len(p.tail), func(j int) bool { return p.tail[j].last >= leo })
	for _, tb := range p.tail[t:] {
		p.tailSize -= int64(len(tb.data))
		p.e.tailBytes.Add(-int64(len(tb.data)))
	}
	p.tail = p.tail[:t:t]
	p.leo = leo
	p.hwm = min(p.hwm, leo)
	p.cleanedUpTo = min(p.cleanedUpTo, leo)
	p.gen++
	p.notifyLocked()
	return nil
}

// readBatchLocked returns the stored batch at base (from the tail if
// there). The caller holds the close lock.
func (p *Partition) readBatch(tail []tailBatch, base int64) (batch, error) {
	if i := sort.Search(len(tail), func(i int) bool { return tail[i].base >= base }); i < len(tail) && tail[i].base == base {
		return tail[i].data, nil
	}
	v, closer, err := p.e.db.Get(logKey(p.id, p.part, base))
	if err != nil {
		return nil, fmt.Errorf("%s-%d: read batch %d: %w", p.topic, p.part, base, err)
	}
	defer closer.Close()
	return append(batch(nil), v...), nil
}

// OffsetForTimestamp finds the first record with timestamp >= ts below
// the high watermark (ListOffsets by timestamp).
func (p *Partition) OffsetForTimestamp(ts int64) (offset, timestamp int64, epoch int32, ok bool) {
	unlock, err := p.lock()
	if err != nil {
		return -1, -1, -1, false
	}
	defer unlock()
	// The lock is held while reading: ListOffsets by time is rare, and it
	// keeps retention from deleting the batch under us.
	for _, m := range p.index {
		if m.MaxTs < ts || m.last() < p.logStart {
			continue
		}
		if m.Base >= p.hwm {
			break
		}
		b, err := p.readBatch(p.tail, m.Base)
		if err != nil {
			p.e.log.Warn("offset for timestamp", "err", err)
			return -1, -1, -1, false
		}
		if b.logAppendTime() {
			return max(m.Base, p.logStart), m.MaxTs, m.Epoch, true
		}
		found := false
		werr := walkBatch(b, compactDecompressLimit, func(r *record) error {
			o, t := m.Base+int64(r.OffsetDelta), b.baseTimestamp()+r.TimestampDelta
			if !found && o >= p.logStart && t >= ts {
				offset, timestamp, found = o, t, true
			}
			return nil
		})
		if werr != nil {
			p.e.log.Warn("offset for timestamp: unreadable batch", "topic", p.topic, "partition", p.part, "base", m.Base, "err", werr)
			continue
		}
		if found {
			return offset, timestamp, m.Epoch, true
		}
	}
	return -1, -1, -1, false
}

// MaxTimestamp returns the record with the largest timestamp below the
// high watermark (ListOffsets -3, KIP-734); the first one on ties.
func (p *Partition) MaxTimestamp() (offset, timestamp int64, epoch int32, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	timestamp = math.MinInt64
	for _, m := range p.index {
		if m.Base >= p.hwm {
			break
		}
		if m.MaxTs > timestamp && m.last() >= p.logStart {
			offset, timestamp, epoch, ok = max(m.Base+int64(m.MaxTsDelta), p.logStart), m.MaxTs, m.Epoch, true
		}
	}
	if !ok {
		return -1, -1, -1, false
	}
	return offset, timestamp, epoch, true
}

// enforceRetention applies the delete and compact policies.
func (p *Partition) enforceRetention(now time.Time) error {
	cfg := p.cfg.Load()
	unlock, err := p.lock()
	if err != nil {
		return nil // closed or deleted meanwhile: nothing to do
	}
	nowMs := now.UnixMilli()
	if cfg.Delete {
		size, n := p.indexBytes, 0
		for ; n < len(p.index)-1 && p.index[n].last() < p.hwm; n++ {
			m := p.index[n]
			byTime := cfg.RetentionMs >= 0 && m.MaxTs < nowMs-cfg.RetentionMs
			bySize := cfg.RetentionBytes >= 0 && size-int64(m.Size) >= cfg.RetentionBytes
			if !byTime && !bySize {
				break
			}
			size -= int64(m.Size)
		}
		if n > 0 {
			if err := p.removeBelowLocked(n, max(p.logStart, p.index[n].Base)); err != nil {
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

func (p *Partition) expireProducersLocked(now time.Time) {
	cutoff := now.Add(-producerExpiration).UnixMilli()
	b := p.e.db.NewBatch()
	defer b.Close()
	var gone []int64
	for pid, pe := range p.producers {
		if pe.LastTimestamp < cutoff && pe.TxnStart < 0 {
			gone = append(gone, pid)
			b.Delete(producerKey(p.id, p.part, pid), nil)
		}
	}
	if len(gone) == 0 {
		return
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		p.e.log.Warn("expiring producer state", "topic", p.topic, "partition", p.part, "err", err)
		return
	}
	for _, pid := range gone {
		delete(p.producers, pid)
	}
}
