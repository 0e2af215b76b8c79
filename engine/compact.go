package engine

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

const defaultDeleteRetention = 24 * time.Hour

// compact keeps the latest record of every key, as Kafka's log cleaner
// does: it rewrites batches below the high watermark (never the last one)
// older than min.compaction.lag with only their live records, keeping
// their offsets, and drops tombstones older than delete.retention.
// Control and transactional batches are kept as they are.
func (p *Partition) compact(now time.Time, cfg *LogConfig) error {
	unlock, err := p.lock()
	if err != nil {
		return nil
	}
	nowMs := now.UnixMilli()
	// Like Kafka's min.cleanable.dirty.ratio (0.5): clean when at least
	// half of the log was written since the last pass, or a kept
	// tombstone has expired.
	var dirty int64
	for i := len(p.index) - 1; i >= 0 && p.index[i].Base >= p.cleanedUpTo; i-- {
		dirty += int64(p.index[i].Size)
	}
	if len(p.index) < 2 || (2*dirty < p.indexBytes || dirty == int64(p.index[len(p.index)-1].Size)) && nowMs < p.tombstoneDue {
		unlock()
		return nil
	}
	gen, hwm := p.gen, p.hwm
	index := append([]batchMeta(nil), p.index...)
	unlock()

	deleteRetention := cfg.DeleteRetention
	if deleteRetention == 0 {
		deleteRetention = defaultDeleteRetention
	}
	lagCutoff := nowMs - cfg.MinCompactionLag.Milliseconds()
	tombCutoff := nowMs - deleteRetention.Milliseconds()

	// Pass 1: the latest offset of every key. The read uses one Pebble
	// snapshot, so the map matches what pass 2 sees.
	p.e.closeMu.RLock()
	if p.e.closed {
		p.e.closeMu.RUnlock()
		return nil
	}
	snap := p.e.db.NewSnapshot()
	p.e.closeMu.RUnlock()
	defer snap.Close()
	read := func(base int64) (batch, error) {
		v, closer, err := snap.Get(logKey(p.id, p.part, base))
		if err != nil {
			return nil, fmt.Errorf("compaction read %d: %w", base, err)
		}
		defer closer.Close()
		return append(batch(nil), v...), nil
	}
	latest := make(map[string]int64)
	var buf []byte
	for _, m := range index {
		if m.Base >= hwm {
			break
		}
		b, err := read(m.Base)
		if err != nil {
			return err
		}
		if b.isControl() || b.isTransactional() {
			continue
		}
		if buf, err = decompressAll(buf, b, compactDecompressLimit); err != nil {
			continue // unreadable: kept as is, and it supersedes nothing
		}
		_ = walkRecords(&sliceSource{b: buf}, b.recordCount(), func(r *record) error {
			if !r.KeyNull {
				latest[string(r.Key)] = m.Base + int64(r.OffsetDelta)
			}
			return nil
		})
	}

	// Pass 2: rewrite what has dead records.
	type change struct {
		i    int
		data batch // nil: delete the batch
	}
	var changes []change
	tombstoneDue := int64(math64Max)
	cleanedUpTo := int64(0)
	for i, m := range index[:len(index)-1] {
		if m.last() >= hwm || m.MaxTs > lagCutoff {
			break
		}
		cleanedUpTo = m.last() + 1
		b, err := read(m.Base)
		if err != nil {
			return err
		}
		if b.isControl() || b.isTransactional() {
			continue
		}
		if buf, err = decompressAll(buf, b, compactDecompressLimit); err != nil {
			continue
		}
		var kept []byte
		n := int32(0)
		err = walkRecords(&sliceSource{b: buf}, b.recordCount(), func(r *record) error {
			if r.KeyNull || latest[string(r.Key)] != m.Base+int64(r.OffsetDelta) {
				return nil
			}
			if r.ValueNull {
				if m.MaxTs < tombCutoff {
					return nil
				}
				tombstoneDue = min(tombstoneDue, m.MaxTs+deleteRetention.Milliseconds())
			}
			kept = append(kept, r.Raw...)
			n++
			return nil
		})
		switch {
		case err != nil || n == b.recordCount():
		case n == 0:
			changes = append(changes, change{i, nil})
		default:
			nb, err := rebuildBatch(b, kept, n)
			if err != nil {
				return err
			}
			changes = append(changes, change{i, nb})
		}
	}

	unlock, err = p.lock()
	if err != nil {
		return nil
	}
	defer unlock()
	if p.gen != gen {
		return nil // truncated or trimmed meanwhile: the next pass redoes it
	}
	p.cleanedUpTo, p.tombstoneDue = cleanedUpTo, tombstoneDue
	if len(changes) == 0 {
		return nil
	}
	wb := p.e.db.NewBatch()
	defer wb.Close()
	for _, c := range changes {
		m := &index[c.i]
		if c.data == nil {
			wb.Delete(logKey(p.id, p.part, m.Base), nil)
			wb.Delete(metaKey(p.id, p.part, m.Base), nil)
			continue
		}
		m.Size = int32(len(c.data))
		wb.Set(logKey(p.id, p.part, m.Base), c.data, nil)
		wb.Set(metaKey(p.id, p.part, m.Base), m.encode(), nil)
	}
	if err := wb.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("compaction write: %w", err)
	}
	// p.index may have grown since the snapshot; its prefix is index's.
	newIndex := make([]batchMeta, 0, len(p.index))
	next, lastChanged := 0, int64(-1)
	for i, m := range p.index {
		if next < len(changes) && changes[next].i == i {
			c := changes[next]
			next++
			lastChanged = m.Base
			p.indexBytes -= int64(m.Size)
			if c.data == nil {
				continue
			}
			m = index[i]
			p.indexBytes += int64(m.Size)
		}
		newIndex = append(newIndex, m)
	}
	p.index = newIndex
	t := 0
	for t < len(p.tail) && p.tail[t].base <= lastChanged {
		t++
	}
	p.dropTail(t)
	p.gen++
	return nil
}

const math64Max = 1<<63 - 1

// rebuildBatch makes a batch with the header of b and the given records
// (re-compressed with b's codec), keeping base offset and last offset
// delta so that the offsets of the kept records do not change.
func rebuildBatch(b batch, records []byte, count int32) (batch, error) {
	payload, err := compress(b.codec(), records)
	if err != nil {
		return nil, fmt.Errorf("compaction: compress: %w", err)
	}
	nb := make(batch, batchHeaderLen, batchHeaderLen+len(payload))
	copy(nb, b[:batchHeaderLen])
	nb = append(nb, payload...)
	binary.BigEndian.PutUint32(nb[offBatchLength:], uint32(len(nb)-12))
	binary.BigEndian.PutUint32(nb[offRecordCount:], uint32(count))
	nb.fixCRC()
	return nb, nil
}
