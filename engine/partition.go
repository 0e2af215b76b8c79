package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrUnexpectedAppendOffset is returned (wrapped) when a mirror or replica
// append does not continue the log: its first batch starts below the log
// end offset. Forward gaps are accepted, as compacted sources have them.
var ErrUnexpectedAppendOffset = errors.New("append offset below the log end offset")

// batchMeta is the in-memory index entry of one stored batch; the whole
// index of a partition is kept in memory (about 40 bytes per batch) so
// that retention, timestamps and epochs never scan the log.
type batchMeta struct {
	Base       int64
	LastDelta  int32
	Size       int32
	MaxTs      int64
	MaxTsDelta int32 // offset delta of the record holding MaxTs
	Epoch      int32
}

func (m batchMeta) last() int64 { return m.Base + int64(m.LastDelta) }

func (m batchMeta) encode() []byte {
	b := make([]byte, 0, 24)
	b = binary.BigEndian.AppendUint32(b, uint32(m.LastDelta))
	b = binary.BigEndian.AppendUint32(b, uint32(m.Size))
	b = binary.BigEndian.AppendUint64(b, uint64(m.MaxTs))
	b = binary.BigEndian.AppendUint32(b, uint32(m.MaxTsDelta))
	return binary.BigEndian.AppendUint32(b, uint32(m.Epoch))
}

func decodeMeta(base int64, b []byte) (batchMeta, error) {
	if len(b) != 24 {
		return batchMeta{}, fmt.Errorf("batch index entry at %d has %d bytes", base, len(b))
	}
	return batchMeta{
		Base:       base,
		LastDelta:  int32(binary.BigEndian.Uint32(b)),
		Size:       int32(binary.BigEndian.Uint32(b[4:])),
		MaxTs:      int64(binary.BigEndian.Uint64(b[8:])),
		MaxTsDelta: int32(binary.BigEndian.Uint32(b[16:])),
		Epoch:      int32(binary.BigEndian.Uint32(b[20:])),
	}, nil
}

func metaKey(id TopicID, p int32, base int64) []byte {
	return binary.BigEndian.AppendUint64(subPrefix(id, p, subMeta), uint64(base))
}

type epochEntry struct {
	Epoch int32
	Start int64
}

type tailBatch struct {
	base, last int64
	data       []byte
}

// Partition is one partition's log.
type Partition struct {
	e     *Engine
	topic string
	id    TopicID
	part  int32
	cfg   atomic.Pointer[LogConfig]

	// mu orders appends (offset assignment and Pebble's commit order) and
	// guards everything below. It is not held while waiting for fsync.
	mu          sync.Mutex
	deleted     bool
	logStart    int64
	leo         int64 // log end offset: next offset to assign
	hwm         int64
	leaderEpoch int32
	index       []batchMeta
	indexBytes  int64
	epochs      []epochEntry
	producers   map[int64]*producerEntry
	aborted     []abortedTxn // by Last
	openTxns    int          // producers with an open transaction
	tail        []tailBatch  // recent batches, a contiguous suffix of the log
	tailSize    int64
	waitCh      chan struct{}
	gen         uint64 // bumped by anything that removes or rewrites batches

	cleanedUpTo  int64 // compaction has processed the batches below this offset
	tombstoneDue int64 // unix ms when a kept tombstone becomes removable

	repl replState // replication between brokers (replica.go)
}

func newPartition(e *Engine, topic string, id TopicID, part int32, cfg LogConfig) *Partition {
	p := &Partition{e: e, topic: topic, id: id, part: part, producers: make(map[int64]*producerEntry),
		waitCh: make(chan struct{})}
	p.cfg.Store(&cfg)
	return p
}

func (p *Partition) encodeState() []byte {
	b, _ := json.Marshal(persistedState{Topic: p.topic, LogStart: p.logStart, LeaderEpoch: p.leaderEpoch, Config: *p.cfg.Load()})
	return b
}

// load reads the index, epoch cache and producer state from Pebble.
func (p *Partition) load() error {
	pre := dataPrefix(p.id, p.part)
	it, err := p.e.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: prefixEnd(pre)})
	if err != nil {
		return err
	}
	defer it.Close()
	// Only the small keys are read: the 'L' range (batches) is skipped.
	for it.First(); it.Valid(); {
		k := it.Key()
		switch k[len(pre)] {
		case subLog:
			it.SeekGE(subPrefix(p.id, p.part, subLog+1))
			continue
		case subMeta:
			m, err := decodeMeta(keySuffix64(k), it.Value())
			if err != nil {
				return err
			}
			p.index = append(p.index, m)
			p.indexBytes += int64(m.Size)
		case subEpoch:
			p.epochs = append(p.epochs, epochEntry{keySuffix32(k), int64(binary.BigEndian.Uint64(it.Value()))})
		case subAborted:
			v := it.Value()
			if len(v) != 16 {
				return fmt.Errorf("aborted transaction entry of %d bytes", len(v))
			}
			p.aborted = append(p.aborted, abortedTxn{int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:])), keySuffix64(k[:len(k)-8])})
		case subProduce:
			pe, err := decodeProducer(it.Value())
			if err != nil {
				return err
			}
			p.producers[keySuffix64(k)] = pe
		}
		it.Next()
	}
	if err := it.Error(); err != nil {
		return err
	}
	p.countOpenTxnsLocked()
	p.leo = p.logStart
	if n := len(p.index); n > 0 {
		p.leo = max(p.leo, p.index[n-1].last()+1)
	}
	p.hwm = p.leo // everything Pebble recovered is durable
	return nil
}

// Config returns the partition's log configuration.
func (p *Partition) Config() LogConfig { return *p.cfg.Load() }

// SetConfig replaces the log configuration and persists it.
func (p *Partition) SetConfig(cfg LogConfig) {
	if *p.cfg.Load() == cfg {
		return // the common case: the metadata loop re-applies configs
	}
	p.e.closeMu.RLock()
	defer p.e.closeMu.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Store(&cfg)
	if err := p.persistStateLocked(); err != nil {
		p.e.log.Warn("persisting partition config", "topic", p.topic, "partition", p.part, "err", err)
	}
}

// persistStateLocked writes the state key. The caller holds p.mu and
// p.e.closeMu shared (always taken before p.mu).
func (p *Partition) persistStateLocked() error {
	if p.e.closed || p.deleted {
		return errClosed
	}
	return p.e.db.Set(stateKey(p.id, p.part), p.encodeState(), pebble.Sync)
}

// notifyLocked wakes fetches waiting in Wait.
func (p *Partition) notifyLocked() {
	close(p.waitCh)
	p.waitCh = make(chan struct{})
}

// Wait returns a channel closed the next time the high watermark
// advances (or the partition is truncated or deleted).
func (p *Partition) Wait() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitCh
}

// Offsets returns the partition's current positions.
func (p *Partition) Offsets() Offsets {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Offsets{LogStart: p.logStart, HighWatermark: p.hwm, LastStable: p.lastStableLocked(), LogEnd: p.leo, LeaderEpoch: p.leaderEpoch}
}

func (p *Partition) countOpenTxnsLocked() {
	p.openTxns = 0
	for _, pe := range p.producers {
		if pe.TxnStart >= 0 {
			p.openTxns++
		}
	}
}

// lastStableLocked is the last stable offset: the high watermark, or the
// first offset of the earliest open transaction below it.
func (p *Partition) lastStableLocked() int64 {
	lso := p.hwm
	if p.openTxns == 0 {
		return lso
	}
	for _, pe := range p.producers {
		if pe.TxnStart >= 0 {
			lso = min(lso, pe.TxnStart)
		}
	}
	return lso
}

// SetLeaderEpoch sets the epoch stamped on client appends. The epoch
// cache gets an entry when the first batch of the epoch is appended, so
// that mirrored partitions keep their source's epoch history.
func (p *Partition) SetLeaderEpoch(epoch int32) error {
	p.e.closeMu.RLock()
	defer p.e.closeMu.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch == p.leaderEpoch {
		return nil
	}
	old := p.leaderEpoch
	p.leaderEpoch = epoch
	if err := p.persistStateLocked(); err != nil {
		p.leaderEpoch = old
		return fmt.Errorf("engine: %s-%d set leader epoch %d: %w", p.topic, p.part, epoch, err)
	}
	return nil
}

func (p *Partition) latestEpochLocked() int32 {
	if n := len(p.epochs); n > 0 {
		return p.epochs[n-1].Epoch
	}
	return -1
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch as Kafka's leader epoch
// cache does: the largest epoch <= epoch and the start offset of the
// epoch after it (the log end offset for the latest epoch).
func (p *Partition) EndOffsetForEpoch(epoch int32) (leaderEpoch int32, endOffset int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	epochs := p.epochsLocked()
	if epoch < 0 || len(epochs) == 0 {
		return -1, -1
	}
	if epochs[len(epochs)-1].Epoch == epoch {
		return epoch, p.leo
	}
	hi := sort.Search(len(epochs), func(i int) bool { return epochs[i].Epoch > epoch })
	if hi == len(epochs) {
		return -1, -1
	}
	if hi == 0 {
		return epoch, epochs[0].Start
	}
	return epochs[hi-1].Epoch, epochs[hi].Start
}

// EpochAt returns the leader epoch in force at offset (-1 if unknown);
// at the log end offset that is the current leader epoch.
func (p *Partition) EpochAt(offset int64) int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	epochs := p.epochsLocked()
	i := sort.Search(len(epochs), func(i int) bool { return epochs[i].Start > offset })
	if i == 0 {
		return -1
	}
	return epochs[i-1].Epoch
}

// epochsLocked is the epoch cache plus the current leader epoch, which
// counts as the latest even before a batch was appended in it (Kafka
// assigns it to the cache when the leader is elected; the engine waits
// for a batch so that mirrored partitions keep their source's history).
func (p *Partition) epochsLocked() []epochEntry {
	if p.leaderEpoch > p.latestEpochLocked() {
		return append(p.epochs[:len(p.epochs):len(p.epochs)], epochEntry{p.leaderEpoch, p.leo})
	}
	return p.epochs
}

// Topic is the partition's topic name.
func (p *Partition) Topic() string { return p.topic }

// TopicID is the partition's topic ID.
func (p *Partition) TopicID() TopicID { return p.id }

// Index is the partition number.
func (p *Partition) Index() int32 { return p.part }

// Producers returns the idempotent producers' states.
func (p *Partition) Producers() []ProducerState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ProducerState, 0, len(p.producers))
	for pid, pe := range p.producers {
		st := ProducerState{ProducerID: pid, ProducerEpoch: pe.Epoch, LastSequence: -1, LastTimestamp: pe.LastTimestamp,
			CoordinatorEpoch: pe.CoordinatorEpoch, CurrentTxnStartOffset: pe.TxnStart}
		if n := len(pe.Batches); n > 0 {
			st.LastSequence = pe.Batches[n-1].LastSeq
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProducerID < out[j].ProducerID })
	return out
}

// Append validates and appends record batches. See AppendRequest.
func (p *Partition) Append(ctx context.Context, req *AppendRequest) (AppendResult, error) {
	return p.AppendAsync(ctx, req)()
}

// AppendAsync is Append for callers that pipeline appends (one client
// connection's produce requests): it returns once the batches are in the
// log, ordered after every earlier append of the partition, and wait
// blocks until they are durable and the high watermark covers them, then
// returns what Append would. The next append need not wait for this one's
// fsync, so that their syncs are grouped. wait must be called exactly once
// (the engine cannot close before).
func (p *Partition) AppendAsync(ctx context.Context, req *AppendRequest) (wait func() (AppendResult, error)) {
	fail := func(res AppendResult, err error) func() (AppendResult, error) {
		return func() (AppendResult, error) { return res, err }
	}
	if err := ctx.Err(); err != nil {
		return fail(AppendResult{}, err)
	}
	for _, v := range p.e.cfg.Validators {
		if err := v.ValidateAppend(req); err != nil {
			return fail(AppendResult{}, err)
		}
	}
	cfg := p.cfg.Load()
	assign := !req.Origin.Copies()
	// The batches alias req.Records, which is only read: prepareLocked
	// copies them into the Pebble batch.
	batches, err := splitBatches(req.Records)
	if err != nil {
		return fail(AppendResult{}, fmt.Errorf("%s-%d: %w", p.topic, p.part, err))
	}
	metas := make([]batchMeta, len(batches))
	for i, b := range batches {
		if metas[i], err = validateBatch(b, cfg, req.Origin); err != nil {
			return fail(AppendResult{}, fmt.Errorf("%s-%d batch %d: %w", p.topic, p.part, i, err))
		}
	}

	p.e.closeMu.RLock()
	if p.e.closed {
		p.e.closeMu.RUnlock()
		return fail(AppendResult{}, errClosed)
	}
	p.mu.Lock()
	if p.deleted {
		p.mu.Unlock()
		p.e.closeMu.RUnlock()
		return fail(AppendResult{}, fmt.Errorf("%s-%d: partition deleted: %w", p.topic, p.part, kerr.UnknownTopicOrPartition))
	}
	res, pb, err := p.prepareLocked(req, batches, metas, assign, cfg)
	if err != nil || res.Duplicate {
		p.mu.Unlock()
		p.e.closeMu.RUnlock()
		return fail(res, err)
	}
	sync := p.e.cfg.SyncWrites && req.Acks != 0
	if sync {
		err = p.e.db.ApplyNoSyncWait(pb, pebble.Sync)
	} else {
		err = p.e.db.Apply(pb, pebble.NoSync)
	}
	if err != nil {
		p.mu.Unlock()
		pb.Close()
		p.e.closeMu.RUnlock()
		return fail(AppendResult{}, fmt.Errorf("%s-%d: write: %w", p.topic, p.part, err))
	}
	p.commitLocked(batches, metas)
	p.notifyEndLocked()
	p.mu.Unlock()

	// closeMu stays held until the sync is done: Close waits for it.
	// pb is not closed: Close would recycle its buffer, which holds the
	// batches the tail serves. The garbage collector frees it.
	return func() (AppendResult, error) {
		defer p.e.closeMu.RUnlock()
		if sync {
			// Pebble syncs its WAL in commit order, so once this batch is
			// durable every earlier append of this partition is too: the
			// high watermark may move to our end.
			if err := pb.SyncWait(); err != nil {
				return AppendResult{}, fmt.Errorf("%s-%d: sync: %w", p.topic, p.part, err)
			}
		}
		hwm := p.advance(res.LastOffset + 1)
		n := 0
		for _, b := range batches {
			n += len(b)
		}
		p.e.bytesWritten.Add(int64(n))
		p.e.appends.Add(1)
		if len(p.e.cfg.Observers) > 0 {
			info := AppendInfo{Topic: p.topic, TopicID: p.id, Partition: p.part, Origin: req.Origin,
				BaseOffset: res.BaseOffset, LastOffset: res.LastOffset, Batches: len(batches), Bytes: n, HighWatermark: hwm}
			for _, o := range p.e.cfg.Observers {
				o.OnAppend(info)
			}
		}
		return res, nil
	}
}

// validateBatch checks one batch beyond its header and returns its index
// entry (offsets still relative).
func validateBatch(b batch, cfg *LogConfig, origin Origin) (batchMeta, error) {
	m := batchMeta{LastDelta: b.lastOffsetDelta(), Size: int32(len(b)), MaxTs: b.maxTimestamp(), MaxTsDelta: b.lastOffsetDelta()}
	if origin.Copies() {
		return m, nil // copied byte for byte: the source validated them
	}
	if len(b) > int(cfg.MaxMessageBytes) {
		return m, fmt.Errorf("batch of %d bytes exceeds max.message.bytes %d: %w", len(b), cfg.MaxMessageBytes, kerr.MessageTooLarge)
	}
	if b.recordCount() < 1 || int64(b.recordCount()) != int64(b.lastOffsetDelta())+1 {
		return m, corrupt("record count %d with last offset delta %d", b.recordCount(), b.lastOffsetDelta())
	}
	if origin == OriginClient && b.isControl() {
		return m, fmt.Errorf("clients may not write control batches: %w", kerr.InvalidRecord)
	}
	var (
		i     int32
		maxTs = int64(-1 << 63)
	)
	err := walkBatch(b, maxDecompressedBatch, func(r *record) error {
		if r.OffsetDelta != i {
			return fmt.Errorf("record %d has offset delta %d: %w", i, r.OffsetDelta, kerr.InvalidRecord)
		}
		if cfg.Compact && r.KeyNull && !b.isControl() {
			return fmt.Errorf("compacted topic record %d has no key: %w", i, kerr.InvalidRecord)
		}
		if ts := b.baseTimestamp() + r.TimestampDelta; ts > maxTs {
			maxTs, m.MaxTsDelta = ts, i
		}
		i++
		return nil
	})
	if err != nil {
		return m, err
	}
	return m, nil
}

// prepareLocked checks producer state, assigns offsets and builds the
// Pebble batch. Nothing in p changes until commitLocked.
func (p *Partition) prepareLocked(req *AppendRequest, batches []batch, metas []batchMeta, assign bool, cfg *LogConfig) (AppendResult, *pebble.Batch, error) {
	res := AppendResult{BaseOffset: -1, LogAppendTime: -1, LogStartOffset: p.logStart}
	txn := producerTxn{base: p.producers}
	next := p.leo
	now := time.Now().UnixMilli()
	latestEpoch := p.latestEpochLocked()
	size := 0
	for _, b := range batches {
		size += len(b) + 256 // the batch, its index entry, their keys, producer and epoch entries
	}
	// Sized up front: growing would copy every batch again.
	pb := p.e.db.NewBatchWithSize(size, pebble.WithInitialSizeBytes(size))
	fail := func(err error) (AppendResult, *pebble.Batch, error) {
		pb.Close()
		return AppendResult{}, nil, fmt.Errorf("%s-%d: %w", p.topic, p.part, err)
	}
	for i, b := range batches {
		if b.producerID() >= 0 {
			dup, err := txn.check(b, req.Origin)
			if err != nil {
				return fail(err)
			}
			if dup != nil {
				pb.Close()
				return AppendResult{BaseOffset: dup.FirstOffset, LastOffset: dup.LastOffset, LogAppendTime: -1,
					LogStartOffset: p.logStart, Duplicate: true}, nil, nil
			}
		}
		// The batch is copied once, into the Pebble batch, and its offsets
		// are set in that copy, which the tail keeps (so pb is never
		// recycled). Key and value are complete before the next operation
		// on pb, which may move its buffer.
		op := pb.SetDeferred(logKeyLen, len(b))
		copy(op.Value, b)
		b = batch(op.Value)
		batches[i] = b
		if assign {
			b.setBaseOffset(next)
			b.setLeaderEpoch(p.leaderEpoch)
			if cfg.LogAppendTime {
				b.setLogAppendTime(now)
				res.LogAppendTime = now
				metas[i].MaxTs, metas[i].MaxTsDelta = now, 0
			}
		} else if b.baseOffset() < 0 || b.lastOffset() < b.baseOffset() {
			return fail(corrupt("batch %d: offsets %d to %d", i, b.baseOffset(), b.lastOffset()))
		} else if b.baseOffset() < next {
			return fail(fmt.Errorf("batch %d at offset %d, log end offset is %d: %w", i, b.baseOffset(), next, ErrUnexpectedAppendOffset))
		}
		copy(op.Key, logKey(p.id, p.part, b.baseOffset()))
		op.Finish()
		if res.BaseOffset < 0 {
			res.BaseOffset = b.baseOffset()
		}
		metas[i].Base, metas[i].Epoch = b.baseOffset(), b.leaderEpoch()
		next = b.lastOffset() + 1
		res.LastOffset = b.lastOffset()
		var aborted []abortedTxn
		if isBarrier(b) {
			aborted = txn.resetAll(b.baseOffset())
			pb.DeleteRange(subPrefix(p.id, p.part, subProduce), prefixEnd(subPrefix(p.id, p.part, subProduce)), nil)
		} else if b.producerID() >= 0 {
			if a := txn.update(b); a != nil {
				aborted = append(aborted, *a)
			}
		}
		for _, a := range aborted {
			pb.Set(abortedEntryKey(p.id, p.part, a), binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(a.PID)), uint64(a.First)), nil)
		}
		if e := b.leaderEpoch(); e > latestEpoch {
			latestEpoch = e
			pb.Set(epochKey(p.id, p.part, e), binary.BigEndian.AppendUint64(nil, uint64(b.baseOffset())), nil)
		}
		pb.Set(metaKey(p.id, p.part, b.baseOffset()), metas[i].encode(), nil)
	}
	for pid, pe := range txn.changed {
		pb.Set(producerKey(p.id, p.part, pid), pe.encode(), nil)
	}
	return res, pb, nil
}

// commitLocked updates the in-memory state after the Pebble batch is
// applied; it repeats prepareLocked's decisions, which cannot fail now.
func (p *Partition) commitLocked(batches []batch, metas []batchMeta) {
	txn := producerTxn{base: p.producers}
	for i, b := range batches {
		if isBarrier(b) {
			p.aborted = append(p.aborted, txn.resetAll(b.baseOffset())...)
		} else if b.producerID() >= 0 {
			if a := txn.update(b); a != nil {
				p.aborted = append(p.aborted, *a)
			}
		}
		if e := b.leaderEpoch(); e > p.latestEpochLocked() {
			p.epochs = append(p.epochs, epochEntry{e, b.baseOffset()})
		}
		p.index = append(p.index, metas[i])
		p.indexBytes += int64(len(b))
		p.tail = append(p.tail, tailBatch{b.baseOffset(), b.lastOffset(), b})
		p.tailSize += int64(len(b))
		p.e.tailBytes.Add(int64(len(b)))
		p.leo = b.lastOffset() + 1
	}
	if txn.reset {
		p.producers = make(map[int64]*producerEntry, len(txn.changed))
		p.openTxns = 0
	}
	for pid, pe := range txn.changed {
		if old := p.producers[pid]; old != nil && old.TxnStart >= 0 {
			p.openTxns--
		}
		if pe.TxnStart >= 0 {
			p.openTxns++
		}
		p.producers[pid] = pe
	}
	// Keep the tail within its share of memory: every partition gets an
	// equal share of the global bound, at most tailPartitionBytes. The
	// newest batch stays even above the share (a consumer at the head
	// reads it next), unless the global bound is exceeded: a thousand
	// partitions may not each keep a large batch.
	share := min(tailPartitionBytes, tailGlobalBytes/max(1, p.e.numParts.Load()))
	for len(p.tail) > 0 && (p.e.tailBytes.Load() > tailGlobalBytes || p.tailSize > share && len(p.tail) > 1) {
		p.dropTail(1)
	}
}

// dropTail removes the first n tail batches.
func (p *Partition) dropTail(n int) {
	for _, t := range p.tail[:n] {
		p.tailSize -= int64(len(t.data))
		p.e.tailBytes.Add(-int64(len(t.data)))
	}
	p.tail = p.tail[n:]
	if len(p.tail) == 0 {
		p.tail = nil
	}
}

// advance moves the high watermark to end (bounded by the log end offset)
// and wakes waiting fetches.
func (p *Partition) advance(end int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advanceLocked(end)
	return p.hwm
}

// Fetch reads batches from offset: at least one whole batch (even larger
// than maxBytes), then more while the total stays within maxBytes, never
// past the high watermark (the last stable offset for read_committed).
func (p *Partition) Fetch(offset int64, maxBytes int, iso Isolation) (FetchResult, error) {
	p.mu.Lock()
	res := FetchResult{HighWatermark: p.hwm, LastStableOffset: p.lastStableLocked(), LogStartOffset: p.logStart}
	leo, tail, deleted, aborted := p.leo, p.tail, p.deleted, p.aborted
	p.mu.Unlock()
	if deleted {
		return res, fmt.Errorf("%s-%d: partition deleted: %w", p.topic, p.part, kerr.UnknownTopicOrPartition)
	}
	res, err := p.read(res, leo, tail, offset, maxBytes, iso)
	if iso == ReadCommitted && len(res.Batches) > 0 {
		// The aborted transactions overlapping what is returned.
		end := batch(res.Batches[len(res.Batches)-1]).lastOffset()
		for _, a := range aborted[sort.Search(len(aborted), func(i int) bool { return aborted[i].Last >= offset }):] {
			if a.First <= end {
				res.AbortedTxns = append(res.AbortedTxns, AbortedTxn{ProducerID: a.PID, FirstOffset: a.First})
			}
		}
	}
	return res, err
}

func (p *Partition) read(res FetchResult, leo int64, tail []tailBatch, offset int64, maxBytes int, iso Isolation) (FetchResult, error) {
	if offset < res.LogStartOffset || offset > leo {
		return res, fmt.Errorf("%s-%d: fetch offset %d outside [%d, %d]: %w", p.topic, p.part, offset, res.LogStartOffset, leo, kerr.OffsetOutOfRange)
	}
	upper := res.HighWatermark
	if iso == ReadCommitted {
		upper = res.LastStableOffset
	}
	if offset >= upper {
		return res, nil
	}
	total := 0
	add := func(b []byte) bool {
		if len(res.Batches) > 0 && total+len(b) > maxBytes {
			return false
		}
		res.Batches = append(res.Batches, b)
		total += len(b)
		return true
	}
	if len(tail) > 0 && offset >= tail[0].base {
		i := sort.Search(len(tail), func(i int) bool { return tail[i].last >= offset })
		for ; i < len(tail) && tail[i].base < upper && add(tail[i].data); i++ {
		}
		return res, nil
	}
	p.e.closeMu.RLock()
	defer p.e.closeMu.RUnlock()
	if p.e.closed {
		return res, errClosed
	}
	it, err := p.e.db.NewIter(&pebble.IterOptions{LowerBound: logKey(p.id, p.part, 0), UpperBound: logKey(p.id, p.part, upper)})
	if err != nil {
		return res, fmt.Errorf("%s-%d: fetch: %w", p.topic, p.part, err)
	}
	defer it.Close()
	if !it.SeekLT(logKey(p.id, p.part, offset+1)) || batch(it.Value()).lastOffset() < offset {
		// offset falls in a gap (compaction, or before the first batch):
		// start at the next batch.
		if !it.SeekGE(logKey(p.id, p.part, offset)) {
			return res, it.Error()
		}
	}
	for ; it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return res, fmt.Errorf("%s-%d: fetch: %w", p.topic, p.part, err)
		}
		if !add(bytes.Clone(v)) {
			break
		}
	}
	return res, it.Error()
}
