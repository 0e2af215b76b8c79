package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
	"github.com/tandem-kafka/tandem/engine/wake"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrUnexpectedAppendOffset is returned (wrapped) when a mirror or replica
// append does not continue the log: its first batch starts below the log
// end offset. Forward gaps are accepted, as compacted sources have them.
var ErrUnexpectedAppendOffset = errors.New("append offset below the log end offset")

type epochEntry struct {
	Epoch int32
	Start int64
}

// cursor remembers where a fetch ended, so that the next fetch of a
// sequential consumer starts there without an index lookup.
type cursor struct {
	offset   int64 // the next offset to read
	seg, pos int64 // segment base and position of the batch holding it
	gen      uint64
}

// Partition is one partition's log.
type Partition struct {
	e     *Engine
	topic string
	id    TopicID
	part  int32
	dir   string // the segment files' directory
	cfg   atomic.Pointer[LogConfig]

	// metaMu orders the partition's metadata writes to Pebble: a sync
	// round holds it from taking the pending entries until it has applied
	// them, and every other writer (truncation, retention, compaction)
	// takes it first, so that nothing commits between. Taken before mu.
	metaMu sync.Mutex

	// mu orders appends (offset assignment and file position) and guards
	// everything below. It is not held while waiting for fsync.
	mu          sync.Mutex
	deleted     bool
	shut        bool // the engine closed: waits end at once
	logStart    int64
	leo         int64 // log end offset: next offset to assign
	hwm         int64
	leaderEpoch int32
	segs        []*segment // by base; the last one is active
	epochs      []epochEntry
	producers   map[int64]*producerEntry
	aborted     []abortedTxn // by Last
	openTxns    int          // producers with an open transaction
	waitCh      chan struct{}
	syncing     atomic.Bool // a sync round's fdatasync of the partition runs
	waiters     wake.List   // Watch(w, false): woken with waitCh
	endWaiters  wake.List   // Watch(w, true): woken when the log end moves
	gen         uint64      // bumped by anything that removes or rewrites batches

	// What was appended since the last sync round took it: entries in the
	// order they must be applied, and producers whose state changed.
	pending   *pebble.Batch
	dirtyPIDs map[int64]struct{}
	// newDirEntries is the directory change of rolls since the last sync
	// round took the pending metadata: what the round must make durable
	// before that metadata, which names the new segment (see rollLocked).
	newDirEntries dirEntries
	// lastIndexPos is the position of the active segment's last index
	// entry (-1: none yet).
	lastIndexPos int64
	// synced is the last point known durable with its metadata in
	// Pebble: where a failed sync rolls the log back to.
	synced recoveryPoint
	// failed is set when the partition could not be rolled back after a
	// failed write or sync: appends fail until the broker restarts.
	failed error
	dirty  bool // in the syncer's list; guarded by syncer.mu

	cursors    [4]cursor
	nextCursor int

	cleanedUpTo  int64 // compaction has processed the batches below this offset
	tombstoneDue int64 // unix ms when a kept tombstone becomes removable

	repl replState // replication between brokers (replica.go)
}

// persistedState is the value of a partition's state key. It changes
// rarely, so JSON keeps it readable.
type persistedState struct {
	Topic       string
	LogStart    int64
	LeaderEpoch int32
	Config      LogConfig
}

func newPartition(e *Engine, topic string, id TopicID, part int32, cfg LogConfig) *Partition {
	p := &Partition{e: e, topic: topic, id: id, part: part, producers: make(map[int64]*producerEntry),
		waitCh: make(chan struct{}), lastIndexPos: -1,
		dir: e.fs.PathJoin(e.segDir, partitionDirName(id, part))}
	for i := range p.cursors {
		p.cursors[i].offset = -1
	}
	p.cfg.Store(&cfg)
	return p
}

func (p *Partition) encodeState() []byte {
	b, _ := json.Marshal(persistedState{Topic: p.topic, LogStart: p.logStart, LeaderEpoch: p.leaderEpoch, Config: *p.cfg.Load()})
	return b
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
	return p.e.db.Set(keys.State(p.id, p.part), p.encodeState(), pebble.Sync)
}

// notifyLocked wakes fetches waiting in Wait.
func (p *Partition) notifyLocked() {
	close(p.waitCh)
	p.waitCh = make(chan struct{})
	p.waiters.WakeAll()
}

// Wait returns a channel closed the next time the high watermark
// advances (or the partition is truncated or deleted), or at once when
// the engine has closed.
func (p *Partition) Wait() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		return closedCh
	}
	return p.waitCh
}

// closedCh is what waits get once the engine has closed.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

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

func (p *Partition) active() *segment {
	if n := len(p.segs); n > 0 {
		return p.segs[n-1]
	}
	return nil
}

// Append validates and appends record batches. See AppendRequest.
func (p *Partition) Append(ctx context.Context, req *AppendRequest) (AppendResult, error) {
	return p.AppendAsync(ctx, req)()
}

// writeBufs recycles the buffers appends are copied into.
var writeBufs = sync.Pool{New: func() any { return new([]byte) }}

// AppendAsync is Append for callers that pipeline appends (one client
// connection's produce requests): it returns once the batches are in the
// log, ordered after every earlier append of the partition, and wait
// blocks until they are durable and the high watermark covers them, then
// returns what Append would. The next append need not wait for this one's
// fsync, so that their syncs are grouped. wait must be called exactly once
// (the engine cannot close before).
func (p *Partition) AppendAsync(ctx context.Context, req *AppendRequest) (wait func() (AppendResult, error)) {
	wait, err := p.Write(ctx, req)
	if err != nil {
		return func() (AppendResult, error) { return AppendResult{}, err }
	}
	return wait
}

// Write is AppendAsync that tells at once an append refused before
// anything was written (a validator's error, a batch out of order, a
// deleted or failed partition): err, with a nil wait. Otherwise wait is
// AppendAsync's, to be called exactly once; it fails only if the
// batches could not be made durable. A mirror's fetcher writes its next
// answer before the last one is durable, and must know at once whether
// the log ends where it fetched from.
func (p *Partition) Write(ctx context.Context, req *AppendRequest) (wait func() (AppendResult, error), err error) {
	fail := func(res AppendResult, err error) (func() (AppendResult, error), error) {
		if err == nil { // a duplicate: nothing to write, nothing failed
			return func() (AppendResult, error) { return res, nil }, nil
		}
		return nil, err
	}
	cfg := p.cfg.Load()
	assign := !req.Origin.Copies()
	batches, metas, err := p.checkWrite(ctx, req, cfg)
	if err != nil {
		return fail(AppendResult{}, err)
	}

	p.e.closeMu.RLock()
	if p.e.closed {
		p.e.closeMu.RUnlock()
		return fail(AppendResult{}, errClosed)
	}
	p.mu.Lock()
	unlock := func() { p.mu.Unlock(); p.e.closeMu.RUnlock() }
	if p.deleted {
		unlock()
		return fail(AppendResult{}, fmt.Errorf("%s-%d: partition deleted: %w", p.topic, p.part, kerr.UnknownTopicOrPartition))
	}
	if p.failed != nil {
		unlock()
		return fail(AppendResult{}, fmt.Errorf("%s-%d: log unavailable after a storage error (%v): %w", p.topic, p.part, p.failed, kerr.KafkaStorageError))
	}
	var buf []byte
	var res AppendResult
	if assign {
		bufp := writeBufs.Get().(*[]byte)
		defer writeBufs.Put(bufp) // after the write below
		res, buf, err = p.prepareLocked(req, batches, metas, assign, cfg, (*bufp)[:0])
		*bufp = buf[:0]
	} else {
		// Copied batches (a mirror's, a follower's) are written as they
		// came: nothing in them changes, and the engine keeps none of
		// their bytes after the write.
		res, buf, err = p.prepareLocked(req, batches, metas, assign, cfg, nil)
	}
	if err == nil && !res.Duplicate {
		err = p.writeLocked(buf, metas, cfg, p.applyLocked)
	}
	sync := p.e.cfg.SyncWrites && req.Acks != 0
	if err == nil && res.Duplicate && sync && res.LastOffset >= p.synced.next {
		return p.awaitOriginalLocked(res), nil
	}
	if err != nil || res.Duplicate {
		unlock()
		return fail(res, err)
	}
	p.notifyEndLocked()
	round := p.e.syncer.register(p, sync)
	if !sync {
		p.advanceLocked(p.leo)
	}
	p.mu.Unlock()

	// closeMu stays held until the sync is done: Close waits for it.
	return func() (AppendResult, error) {
		defer p.e.closeMu.RUnlock()
		if sync {
			<-round.done
			if err := round.err; err != nil {
				return AppendResult{}, fmt.Errorf("%s-%d: sync: %v: %w", p.topic, p.part, err, kerr.KafkaStorageError)
			}
		}
		hwm := p.advance(res.LastOffset + 1)
		n := len(buf)
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
	}, nil
}

// checkWrite is what Write checks before it takes a lock: the context,
// the validators, each batch against the log's config, and the disk's
// free space. The batches alias req.Records, which is only read:
// prepareLocked copies them into the write buffer.
func (p *Partition) checkWrite(ctx context.Context, req *AppendRequest, cfg *LogConfig) ([]recordbatch.Batch, []batchMeta, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	for _, v := range p.e.cfg.Validators {
		if err := v.ValidateAppend(req); err != nil {
			return nil, nil, err
		}
	}
	batches, err := recordbatch.Split(req.Records)
	if err != nil {
		return nil, nil, fmt.Errorf("%s-%d: %w", p.topic, p.part, err)
	}
	metas := make([]batchMeta, len(batches))
	for i, b := range batches {
		if metas[i], err = validateBatch(b, cfg, req.Origin); err != nil {
			return nil, nil, fmt.Errorf("%s-%d batch %d: %w", p.topic, p.part, i, err)
		}
	}
	if err := p.e.space.Allow(req.Origin.ownWrite()); err != nil {
		return nil, nil, fmt.Errorf("%s-%d: %w", p.topic, p.part, err)
	}
	return batches, metas, nil
}

// awaitOriginalLocked answers a duplicate whose original is written but
// not yet durable (an idempotent producer's retry of a request that
// timed out while its sync ran): once the original is durable, as its
// own answer would have been, so that no acknowledged batch is above
// the high watermark or lost in a crash. If the original's sync failed
// it is gone (the log rolled back) and the retry is refused, to be
// retried again. The caller holds p.mu and closeMu (read), which the
// wait releases, as Write's does.
func (p *Partition) awaitOriginalLocked(res AppendResult) func() (AppendResult, error) {
	round := p.e.syncer.register(p, true)
	p.mu.Unlock()
	return func() (AppendResult, error) {
		defer p.e.closeMu.RUnlock()
		<-round.done
		p.mu.Lock()
		durable := p.synced.next > res.LastOffset
		p.mu.Unlock()
		if !durable {
			return AppendResult{}, fmt.Errorf("%s-%d: the original of a retried batch was not made durable: %w", p.topic, p.part, kerr.KafkaStorageError)
		}
		p.advance(res.LastOffset + 1)
		return res, nil
	}
}

// validateBatch checks one batch beyond its header and returns its index
// entry (offsets still relative).
func validateBatch(b recordbatch.Batch, cfg *LogConfig, origin Origin) (batchMeta, error) {
	m := batchMeta{LastDelta: b.LastOffsetDelta(), Size: int32(len(b)), MaxTs: b.MaxTimestamp(), MaxTsDelta: b.LastOffsetDelta()}
	if origin.Copies() {
		return m, nil // copied byte for byte: the source validated them
	}
	if len(b) > int(cfg.MaxMessageBytes) {
		return m, fmt.Errorf("batch of %d bytes exceeds max.message.bytes %d: %w", len(b), cfg.MaxMessageBytes, kerr.MessageTooLarge)
	}
	if b.RecordCount() < 1 || int64(b.RecordCount()) != int64(b.LastOffsetDelta())+1 {
		return m, recordbatch.Corrupt("record count %d with last offset delta %d", b.RecordCount(), b.LastOffsetDelta())
	}
	if origin == OriginClient && b.IsControl() {
		return m, fmt.Errorf("clients may not write control batches: %w", kerr.InvalidRecord)
	}
	var (
		i     int32
		maxTs = int64(-1 << 63)
	)
	err := recordbatch.Walk(b, recordbatch.MaxDecompressed, func(r *recordbatch.Record) error {
		if r.OffsetDelta != i {
			return fmt.Errorf("record %d has offset delta %d: %w", i, r.OffsetDelta, kerr.InvalidRecord)
		}
		if cfg.Compact && r.KeyNull && !b.IsControl() {
			return fmt.Errorf("compacted topic record %d has no key: %w", i, kerr.InvalidRecord)
		}
		if ts := b.BaseTimestamp() + r.TimestampDelta; ts > maxTs {
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

// prepareLocked checks producer state, copies the batches into buf and
// assigns their offsets there. Nothing in p changes.
func (p *Partition) prepareLocked(req *AppendRequest, batches []recordbatch.Batch, metas []batchMeta, assign bool, cfg *LogConfig, buf []byte) (AppendResult, []byte, error) {
	res := AppendResult{BaseOffset: -1, LogAppendTime: -1, LogStartOffset: p.logStart}
	txn := producerTxn{base: p.producers}
	next := p.leo
	now := p.e.cfg.Now().UnixMilli()
	size := 0
	for _, b := range batches {
		size += len(b)
	}
	// Sized up front: growing would copy every batch again.
	inPlace := buf == nil && !assign && size == len(req.Records)
	if !inPlace && cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	fail := func(err error) (AppendResult, []byte, error) {
		return AppendResult{}, buf, fmt.Errorf("%s-%d: %w", p.topic, p.part, err)
	}
	for i, b := range batches {
		if b.ProducerID() >= 0 {
			dup, err := txn.check(b, req.Origin)
			if err != nil {
				return fail(err)
			}
			if dup != nil {
				return AppendResult{BaseOffset: dup.FirstOffset, LastOffset: dup.LastOffset, LogAppendTime: -1,
					LogStartOffset: p.logStart, Duplicate: true}, buf, nil
			}
		}
		// The batch is copied once, into buf, and its offsets are set
		// in the copy: the caller's records are only read. In place,
		// buf is the caller's records.
		if inPlace {
			buf = req.Records[:len(buf)+len(b)]
		} else {
			buf = append(buf, b...)
		}
		b = recordbatch.Batch(buf[len(buf)-len(b):])
		batches[i] = b
		if assign {
			b.SetBaseOffset(next)
			b.SetLeaderEpoch(p.leaderEpoch)
			if cfg.LogAppendTime {
				b.SetLogAppendTime(now)
				res.LogAppendTime = now
				metas[i].MaxTs, metas[i].MaxTsDelta = now, 0
			}
		} else if b.BaseOffset() < 0 || b.LastOffset() < b.BaseOffset() {
			return fail(recordbatch.Corrupt("batch %d: offsets %d to %d", i, b.BaseOffset(), b.LastOffset()))
		} else if b.BaseOffset() < next {
			return fail(fmt.Errorf("batch %d at offset %d, log end offset is %d: %w", i, b.BaseOffset(), next, ErrUnexpectedAppendOffset))
		}
		if res.BaseOffset < 0 {
			res.BaseOffset = b.BaseOffset()
		}
		metas[i].Base, metas[i].Epoch = b.BaseOffset(), b.LeaderEpoch()
		next = b.LastOffset() + 1
		res.LastOffset = b.LastOffset()
		// Later batches of this append see this one's producer state.
		if isBarrier(b) {
			txn.resetAll(b.BaseOffset())
		} else if b.ProducerID() >= 0 {
			txn.update(b)
		}
	}
	return res, buf, nil
}

// writeLocked writes the prepared batches at the end of the active
// segment (rolling first when it is full or old) and calls apply for each
// (applyLocked: they enter the partition's state). On a failed write
// nothing changes.
func (p *Partition) writeLocked(buf []byte, metas []batchMeta, cfg *LogConfig, apply func(*segment, int64, recordbatch.Batch, batchMeta)) error {
	now := p.e.cfg.Now()
	seg := p.active()
	if seg == nil || seg.size > 0 && (seg.size+int64(len(buf)) > cfg.segmentBytes() || now.UnixMilli()-seg.created >= cfg.segmentMs()) {
		var err error
		if seg, err = p.rollLocked(p.leo, now); err != nil {
			return p.storageErr(err)
		}
	}
	f, err := p.e.files.Acquire(seg.file)
	if err != nil {
		return p.storageErr(err)
	}
	n, err := f.WriteAt(buf, seg.size)
	p.e.files.Release(seg.file)
	if err != nil || n != len(buf) {
		if err == nil {
			err = fmt.Errorf("short write: %d of %d bytes", n, len(buf))
		}
		p.e.space.NoteWriteError(err)
		p.rollBackWriteLocked(seg)
		return p.storageErr(err)
	}
	p.e.space.Wrote(len(buf))
	for i, start := 0, seg.size; i < len(metas); i++ {
		pos := seg.size // applyLocked moves it past each batch
		apply(seg, pos, recordbatch.Batch(buf[pos-start:pos-start+int64(metas[i].Size)]), metas[i])
	}
	return nil
}

func (p *Partition) storageErr(err error) error {
	return fmt.Errorf("%s-%d: write: %v: %w", p.topic, p.part, err, kerr.KafkaStorageError)
}

// rollBackWriteLocked cuts what a failed write may have left past the
// segment's end, so that no part of it is ever read or recovered.
func (p *Partition) rollBackWriteLocked(seg *segment) {
	if err := p.truncateSegmentLocked(seg, seg.size); err != nil {
		p.failed = err
		p.e.log.Error("partition unavailable: cannot cut a failed write", "topic", p.topic, "partition", p.part, "err", err)
	}
}

// truncateSegmentLocked cuts the segment's file at size.
func (p *Partition) truncateSegmentLocked(seg *segment, size int64) error {
	f, err := p.e.files.Acquire(seg.file)
	if err != nil {
		return err
	}
	replaced, err := segfile.Truncate(p.e.fs, f, seg.file.Path, size)
	p.e.files.Release(seg.file)
	if err != nil {
		return err
	}
	if replaced {
		old := seg.file
		seg.file = &segfile.File{Path: old.Path, RW: old.RW}
		p.e.files.Retire(old)
	}
	return nil
}

// applyLocked adds a batch written at pos of seg to the partition's state
// and its metadata to the pending entries (appends and recovery).
func (p *Partition) applyLocked(seg *segment, pos int64, b recordbatch.Batch, m batchMeta) {
	if p.pending == nil {
		p.pending = p.e.db.NewBatch()
	}
	txn := producerTxn{base: p.producers}
	var aborted []abortedTxn
	if isBarrier(b) {
		aborted = txn.resetAll(b.BaseOffset())
		p.pending.DeleteRange(keys.Sub(p.id, p.part, keys.SubProduce), keys.PrefixEnd(keys.Sub(p.id, p.part, keys.SubProduce)), nil)
		p.producers = make(map[int64]*producerEntry)
		clear(p.dirtyPIDs)
		p.openTxns = 0
	} else if b.ProducerID() >= 0 {
		if a := txn.update(b); a != nil {
			aborted = append(aborted, *a)
		}
	}
	for _, a := range aborted {
		p.aborted = append(p.aborted, a)
		p.pending.Set(keys.AbortedEntry(p.id, p.part, a.Last, a.PID), binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(a.PID)), uint64(a.First)), nil)
	}
	for pid, pe := range txn.changed {
		if old := p.producers[pid]; old != nil && old.TxnStart >= 0 {
			p.openTxns--
		}
		if pe.TxnStart >= 0 {
			p.openTxns++
		}
		p.producers[pid] = pe
		if p.dirtyPIDs == nil {
			p.dirtyPIDs = make(map[int64]struct{})
		}
		p.dirtyPIDs[pid] = struct{}{}
	}
	if e := b.LeaderEpoch(); e > p.latestEpochLocked() {
		p.epochs = append(p.epochs, epochEntry{e, b.BaseOffset()})
		p.pending.Set(keys.Epoch(p.id, p.part, e), epochValue(b.BaseOffset()), nil)
	}
	p.indexLocked(seg, pos, b, m)
}

// indexLocked adds a batch written at pos of seg to the segment's summary
// and the sparse index, and moves the log end past it.
func (p *Partition) indexLocked(seg *segment, pos int64, b recordbatch.Batch, m batchMeta) {
	if p.pending == nil {
		p.pending = p.e.db.NewBatch()
	}
	if p.lastIndexPos < 0 || pos-p.lastIndexPos >= indexInterval {
		before := int64(math.MinInt64)
		if seg.size > 0 {
			before = seg.maxTs
		}
		p.pending.Set(keys.Index(p.id, p.part, b.BaseOffset()), indexEntry(pos, before), nil)
		p.lastIndexPos = pos
	}
	seg.noteBatch(m)
	p.leo = b.LastOffset() + 1
}

// rollLocked makes a new active segment starting at next. The old one is
// synced first: only the last segment of a log can have a torn tail.
func (p *Partition) rollLocked(next int64, now time.Time) (*segment, error) {
	fs := p.e.fs
	if old := p.active(); old != nil {
		if old.size == 0 && old.base == next {
			return old, nil
		}
		f, err := p.e.files.Acquire(old.file)
		if err != nil {
			return nil, err
		}
		err = f.SyncData()
		p.e.files.Release(old.file)
		if err != nil {
			return nil, fmt.Errorf("sync segment %d before roll: %w", old.base, err)
		}
		if p.pending == nil {
			p.pending = p.e.db.NewBatch()
		}
		p.pending.Set(keys.Segment(p.id, p.part, old.base), old.summary(), nil)
	} else {
		if err := fs.MkdirAll(p.dir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", p.dir, err)
		}
		p.newDirEntries.partitionDir = p.e.newPartitionDirs.Changed()
	}
	if p.newDirEntries.segment {
		// A second roll before a sync round: the first segment's entry
		// is made durable before the next one's exists, so that a crash
		// never keeps a later segment of the log without an earlier one
		// (recovery reads the segments as one log).
		if err := segfile.SyncDir(fs, p.dir); err != nil {
			return nil, err
		}
		p.newDirEntries.segment = false
	}
	path := fs.PathJoin(p.dir, segfile.Name(next))
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	p.e.hook("roll:created")
	// The new directory entries are made durable by the sync round that
	// makes the segment's first bytes durable, before it writes the
	// metadata that names the segment, rather than here: a mirror taking
	// on thousands of partitions at once would otherwise wait for two
	// directory fsyncs a partition, one after the other, where a round
	// runs them side by side and syncs the segments' directory once for
	// all the partitions created since the last. Nothing of the segment
	// is acknowledged before that round.
	p.newDirEntries.segment = true
	seg := &segment{base: next, next: next, created: now.UnixMilli(), file: p.e.files.Adopt(path, f)}
	p.segs = append(p.segs, seg)
	p.lastIndexPos = -1
	return seg, nil
}

// pendingMeta is what a sync round takes from a partition: the file to
// sync and the metadata to apply once it is durable.
type pendingMeta struct {
	batch *pebble.Batch
	file  *segfile.File // referenced until synced
	f     vfs.File
	point recoveryPoint
	end   int64 // the log end offset the sync makes durable
	dir   string
	dirs  dirEntries // to make durable with the file
}

// dirEntries are the directory entries a partition's rolls created:
// its segment directory (the generation of newPartitionDirs that
// covers it, 0: none) and a segment file in it.
type dirEntries struct {
	partitionDir int64
	segment      bool
}

// keep adds the entries of a sync that failed back to those of the next.
func (d *dirEntries) keep(failed dirEntries) {
	d.partitionDir = max(d.partitionDir, failed.partitionDir)
	d.segment = d.segment || failed.segment
}

// sync fsyncs the file, and the directories that hold new entries for
// it, and drops the reference to it.
func (w pendingMeta) sync(e *Engine) error {
	defer e.files.Release(w.file)
	e.hook("sync:before")
	if err := w.f.SyncData(); err != nil {
		return err
	}
	if w.dirs.partitionDir > 0 {
		if err := e.newPartitionDirs.Sync(e.fs, w.dirs.partitionDir); err != nil {
			return err
		}
	}
	if w.dirs.segment {
		return segfile.SyncDir(e.fs, w.dir)
	}
	return nil
}

// takePendingLocked hands the pending metadata to a sync round, completed
// with the producers' current states, the active segment's summary and
// the recovery point after the last batch. ok is false when there is
// nothing to take.
func (p *Partition) takePendingLocked() (w pendingMeta, ok bool) {
	seg := p.active()
	if p.deleted || seg == nil || p.pending == nil && len(p.dirtyPIDs) == 0 {
		return w, false
	}
	f, err := p.e.files.Acquire(seg.file)
	if err != nil {
		p.e.log.Warn("sync: segment unavailable", "topic", p.topic, "partition", p.part, "err", err)
		return w, false
	}
	b := p.pending
	if b == nil {
		b = p.e.db.NewBatch()
	}
	for pid := range p.dirtyPIDs {
		if pe := p.producers[pid]; pe != nil {
			b.Set(keys.Producer(p.id, p.part, pid), pe.encode(), nil)
		} else {
			b.Delete(keys.Producer(p.id, p.part, pid), nil)
		}
	}
	clear(p.dirtyPIDs)
	b.Set(keys.Segment(p.id, p.part, seg.base), seg.summary(), nil)
	point := recoveryPoint{seg: seg.base, pos: seg.size, next: p.leo}
	b.Set(keys.Recovery(p.id, p.part), point.encode(), nil)
	p.pending = nil
	dirs := p.newDirEntries
	p.newDirEntries = dirEntries{}
	return pendingMeta{batch: b, file: seg.file, f: f, point: point, end: p.leo, dir: p.dir, dirs: dirs}, true
}

// applyPending writes a sync round's metadata to Pebble. If that fails,
// the entries go back in front of the pending ones for the next round.
// The caller holds p.metaMu.
func (p *Partition) applyPending(w pendingMeta, opts *pebble.WriteOptions) {
	err := p.e.db.Apply(w.batch, opts)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		w.batch.Close()
		p.synced = w.point
		return
	}
	p.e.log.Warn("writing log metadata failed; retrying with the next sync", "topic", p.topic, "partition", p.part, "err", err)
	if p.pending != nil {
		w.batch.Apply(p.pending, nil)
		p.pending.Close()
	}
	p.pending = w.batch
	p.e.syncer.register(p, false)
}

// syncFailed handles a failed fsync of the partition's active segment:
// what was written since the last good sync may be lost whatever later
// syncs say (Linux drops the failed pages), so the log is rolled back to
// that point and its state reloaded from Pebble. The caller holds
// p.metaMu.
func (p *Partition) syncFailed(w pendingMeta, err error) {
	w.batch.Close()
	p.e.space.NoteWriteError(err)
	p.e.log.Error("segment sync failed; rolling the log back to its last durable point", "topic", p.topic, "partition", p.part, "err", err)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.newDirEntries.keep(w.dirs)
	if p.deleted {
		return
	}
	if err := p.reloadLocked(); err != nil {
		p.failed = err
		p.e.log.Error("partition unavailable until restart", "topic", p.topic, "partition", p.part, "err", err)
	}
}

// flushLocked makes everything appended durable and its metadata applied,
// before a change that rewrites metadata (truncation, retention,
// compaction). The caller holds p.metaMu and p.mu.
func (p *Partition) flushLocked() error {
	w, ok := p.takePendingLocked()
	if !ok {
		return nil
	}
	if err := w.sync(p.e); err != nil {
		w.batch.Close()
		p.newDirEntries.keep(w.dirs)
		return err
	}
	if err := p.e.db.Apply(w.batch, pebble.NoSync); err != nil {
		// Back in front of what comes next, for the next round.
		p.pending = w.batch
		return err
	}
	w.batch.Close()
	p.synced = w.point
	p.advanceLocked(w.end)
	return nil
}

// advance moves the high watermark to end (bounded by the log end offset)
// and wakes waiting fetches.
func (p *Partition) advance(end int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advanceLocked(end)
	return p.hwm
}

// Deleted reports whether the partition was deleted: a holder of it must
// look the partition up again.
func (p *Partition) Deleted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deleted
}
