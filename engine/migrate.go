package engine

import (
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
)

// migrateV1 moves the record batches of a data directory of format
// version 1, which kept them in Pebble, into segment files, partition by
// partition: the batches are written to segments as they are (offsets,
// epochs and bytes unchanged) and indexed; producer state, epochs and
// aborted transactions keep their keys; and only then are the batches
// deleted from Pebble. A crash midway
// leaves a partition with its batches still in Pebble, which the next
// Open migrates again from scratch.
func (e *Engine) migrateV1() error {
	n := 0
	err := e.eachStored(func(p *Partition) error {
		moved, err := p.migrateV1()
		if moved > 0 && err == nil {
			n++
			e.log.Info("migrated a partition's batches to segment files", "topic", p.topic, "partition", p.part, "bytes", moved)
		}
		return err
	})
	if err != nil {
		return err
	}
	e.log.Info("data directory migrated to format version 2 (segment files)", "dir", e.cfg.Dir, "partitions", n)
	return nil
}

func (p *Partition) migrateV1() (moved int64, err error) {
	e := p.e
	pre := keys.Sub(p.id, p.part, keys.SubV1Log)
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: keys.PrefixEnd(pre)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.First() {
		return 0, it.Error()
	}
	// Files of an interrupted migration are redone.
	if err := e.fs.RemoveAll(p.dir); err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		for _, s := range p.segs {
			e.files.Retire(s.file)
		}
	}()
	cfg := p.cfg.Load()
	var buf []byte
	var metas []batchMeta
	next := int64(0)
	write := func() error {
		if len(buf) == 0 {
			return nil
		}
		err := p.writeLocked(buf, metas, cfg, p.indexLocked)
		buf, metas = buf[:0], metas[:0]
		return err
	}
	for ; it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return moved, err
		}
		bs, err := recordbatch.Split(v)
		if err != nil || len(bs) != 1 {
			return moved, fmt.Errorf("batch at %d: %v", keys.Suffix64(it.Key()), err)
		}
		b := bs[0]
		if moved == 0 {
			// The first batch may start above the log start (retention
			// keeps a batch straddling it; compaction leaves gaps).
			p.leo, next = b.BaseOffset(), b.BaseOffset()
		}
		if b.BaseOffset() < next {
			return moved, fmt.Errorf("batch at %d below the previous batch's end %d", b.BaseOffset(), next)
		}
		next = b.LastOffset() + 1
		buf = append(buf, b...)
		metas = append(metas, batchMeta{Base: b.BaseOffset(), LastDelta: b.LastOffsetDelta(), Size: int32(len(b)),
			MaxTs: b.MaxTimestamp(), MaxTsDelta: maxTimestampDelta(b), Epoch: b.LeaderEpoch()})
		moved += int64(len(b))
		if len(buf) >= 1<<20 {
			if err := write(); err != nil {
				return moved, err
			}
		}
	}
	if err := write(); err != nil {
		return moved, err
	}
	if err := p.flushLocked(); err != nil {
		return moved, err
	}
	db := e.db.NewBatch()
	defer db.Close()
	for _, sub := range []byte{keys.SubV1Log, keys.SubV1Meta} {
		pre := keys.Sub(p.id, p.part, sub)
		db.DeleteRange(pre, keys.PrefixEnd(pre), nil)
	}
	return moved, db.Commit(pebble.Sync)
}
