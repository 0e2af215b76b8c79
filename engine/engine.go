package engine

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Config configures an Engine.
type Config struct {
	Dir string // Pebble directory
	FS  vfs.FS // nil: the real disk
	// SyncWrites makes appends with acks != 0 wait for the WAL fsync
	// (grouped across concurrent appends) before they are acknowledged.
	SyncWrites bool
	Logger     *slog.Logger
	// Validators are called in order before every append, any origin.
	Validators []AppendValidator
	// Observers are called after every append is durable.
	Observers []AppendObserver
	// RetentionCheckInterval is how often retention and compaction run:
	// 0 means 30s (log.retention.check.interval.ms), < 0 disables the loop.
	RetentionCheckInterval time.Duration
}

// StoredPartition is a partition found on disk.
type StoredPartition struct {
	Topic     string
	TopicID   TopicID
	Partition int32
}

// Stats are the engine's counters.
type Stats struct {
	BytesWritten int64  // record batch bytes appended
	Appends      int64  // successful appends (duplicates excluded)
	Partitions   int    // partitions open
	TailBytes    int64  // bytes held by the in-memory tails
	DiskUsage    uint64 // Pebble's disk space usage
}

// Memory bounds of the in-memory tails of recent batches. A consumer at
// the head reads batches appended milliseconds ago, so 1 MiB per partition
// serves it at hundreds of MB/s; the global bound keeps a broker with
// thousands of partitions within its memory budget (Pebble's memtables
// serve the rest of the recent log).
const (
	tailPartitionBytes = 1 << 20
	tailGlobalBytes    = 64 << 20
)

type partKey struct {
	id TopicID
	p  int32
}

// Engine is one broker's storage: every partition in one Pebble instance.
type Engine struct {
	cfg Config
	log *slog.Logger
	db  *pebble.DB

	// closeMu is held shared by every operation that writes to Pebble, and
	// exclusively by Close, so that nothing writes to a closed DB.
	closeMu sync.RWMutex
	closed  bool

	mu    sync.RWMutex
	parts map[partKey]*Partition

	bytesWritten atomic.Int64
	appends      atomic.Int64
	tailBytes    atomic.Int64
	numParts     atomic.Int64 // len(parts), read without e.mu by appends

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// persistedState is the value of a partition's state key. It changes
// rarely, so JSON keeps it readable.
type persistedState struct {
	Topic       string
	LogStart    int64
	LeaderEpoch int32
	Config      LogConfig
}

var errClosed = errors.New("engine: closed")

// Open opens (or creates) the Pebble store and loads every partition
// found in it.
func Open(cfg Config) (*Engine, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RetentionCheckInterval == 0 {
		cfg.RetentionCheckInterval = 30 * time.Second
	}
	opts := &pebble.Options{
		FS: cfg.FS,
		// Memtables hold the log until it is flushed to blob files. Two
		// of 48 MiB (96 MiB at most) keep the broker within its memory
		// budget; measured with BenchmarkAppend they append as fast as
		// 2 x 64 MiB, while 3 x 32 MiB was 10-20% slower (more flushes,
		// each with fixed costs).
		MemTableSize:                48 << 20,
		MemTableStopWritesThreshold: 2,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      pebbleLogger{cfg.Logger},
	}
	// Record batches are large values read in order: keep them out of the
	// LSM's sstables so that compactions do not rewrite them.
	opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           1024,
			MaxBlobReferenceDepth: 10,
			RewriteMinimumAge:     5 * time.Minute,
			TargetGarbageRatio:    0.2,
		}
	}
	// A write stall holds every produce of the broker: say so, with how
	// long it lasted, since it shows as latency nowhere else.
	var stallStart atomic.Int64
	opts.EventListener = &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			stallStart.Store(time.Now().UnixNano())
			cfg.Logger.Warn("pebble write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			cfg.Logger.Warn("pebble write stall ended", "after", time.Since(time.Unix(0, stallStart.Load())))
		},
	}
	// Batches arrive compressed by producers (or chose not to be): Kafka
	// stores them as they are, and compressing them again costs CPU for
	// little gain.
	opts.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("engine: open pebble at %q: %w", cfg.Dir, err)
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, db: db, parts: make(map[partKey]*Partition), stop: make(chan struct{})}
	if err := e.load(); err != nil {
		db.Close()
		return nil, err
	}
	if cfg.RetentionCheckInterval > 0 {
		e.wg.Add(1)
		go e.retentionLoop(cfg.RetentionCheckInterval)
	}
	return e, nil
}

func (e *Engine) load() error {
	lo := []byte{nsEngine, kindState}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return fmt.Errorf("engine: load: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 22 {
			return fmt.Errorf("engine: load: bad state key %x", k)
		}
		var id TopicID
		copy(id[:], k[2:18])
		part := keySuffix32(k)
		var st persistedState
		if err := json.Unmarshal(it.Value(), &st); err != nil {
			return fmt.Errorf("engine: load %s-%d state: %w", id, part, err)
		}
		p := newPartition(e, st.Topic, id, part, st.Config)
		p.logStart, p.leaderEpoch = st.LogStart, st.LeaderEpoch
		if err := p.load(); err != nil {
			return fmt.Errorf("engine: load %s (%s) partition %d: %w", st.Topic, id, part, err)
		}
		e.parts[partKey{id, part}] = p
	}
	e.numParts.Store(int64(len(e.parts)))
	return it.Error()
}

// Close stops the retention loop and closes Pebble. Appends in flight
// finish first; later calls fail.
func (e *Engine) Close() error {
	// The retention loop stops first: it takes closeMu itself.
	e.stopOnce.Do(func() { close(e.stop) })
	e.wg.Wait()
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if err := e.db.Close(); err != nil {
		return fmt.Errorf("engine: close pebble: %w", err)
	}
	return nil
}

// DB is the Pebble instance, shared with raftmeta (see keys.go for the
// prefixes each owner uses).
func (e *Engine) DB() *pebble.DB { return e.db }

// Create creates a partition, or returns the existing one (its config
// is then updated to cfg).
func (e *Engine) Create(topic string, id TopicID, partition int32, cfg LogConfig) (*Partition, error) {
	if p := e.Partition(id, partition); p != nil {
		p.SetConfig(cfg)
		return p, nil
	}
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return nil, errClosed
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.parts[partKey{id, partition}]; p != nil {
		return p, nil // created concurrently
	}
	p := newPartition(e, topic, id, partition, cfg)
	if err := e.db.Set(stateKey(id, partition), p.encodeState(), pebble.Sync); err != nil {
		return nil, fmt.Errorf("engine: create %s partition %d: %w", topic, partition, err)
	}
	e.parts[partKey{id, partition}] = p
	e.numParts.Store(int64(len(e.parts)))
	return p, nil
}

// Partition returns the partition, or nil.
func (e *Engine) Partition(id TopicID, partition int32) *Partition {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.parts[partKey{id, partition}]
}

// Delete removes a partition and all its data. Deleting an absent
// partition is not an error.
func (e *Engine) Delete(id TopicID, partition int32) error {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return errClosed
	}
	e.mu.Lock()
	p := e.parts[partKey{id, partition}]
	delete(e.parts, partKey{id, partition})
	e.numParts.Store(int64(len(e.parts)))
	e.mu.Unlock()
	if p != nil {
		p.mu.Lock()
		p.deleted = true
		p.dropTail(len(p.tail))
		p.notifyLocked()
		p.mu.Unlock()
	}
	b := e.db.NewBatch()
	defer b.Close()
	pre := dataPrefix(id, partition)
	b.DeleteRange(pre, prefixEnd(pre), nil)
	b.Delete(stateKey(id, partition), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("engine: delete %s partition %d: %w", id, partition, err)
	}
	return nil
}

// Stored lists the partitions on disk.
func (e *Engine) Stored() []StoredPartition {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]StoredPartition, 0, len(e.parts))
	for k, p := range e.parts {
		out = append(out, StoredPartition{Topic: p.topic, TopicID: k.id, Partition: k.p})
	}
	slices.SortFunc(out, func(a, b StoredPartition) int {
		if c := bytes.Compare(a.TopicID[:], b.TopicID[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.Partition, b.Partition)
	})
	return out
}

func (e *Engine) partitions() []*Partition {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]*Partition, 0, len(e.parts))
	for _, p := range e.parts {
		out = append(out, p)
	}
	return out
}

// EnforceRetention runs one retention and compaction pass over every
// partition.
func (e *Engine) EnforceRetention(now time.Time) error {
	var errs []error
	for _, p := range e.partitions() {
		if err := p.enforceRetention(now); err != nil {
			errs = append(errs, fmt.Errorf("%s-%d: %w", p.topic, p.part, err))
		}
	}
	return errors.Join(errs...)
}

func (e *Engine) retentionLoop(every time.Duration) {
	defer e.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case now := <-t.C:
			if err := e.EnforceRetention(now); err != nil {
				e.log.Warn("retention pass failed", "err", err)
			}
		}
	}
}

// Metrics returns the engine's counters.
func (e *Engine) Metrics() Stats {
	e.mu.RLock()
	n := len(e.parts)
	e.mu.RUnlock()
	s := Stats{
		BytesWritten: e.bytesWritten.Load(),
		Appends:      e.appends.Load(),
		Partitions:   n,
		TailBytes:    e.tailBytes.Load(),
	}
	e.closeMu.RLock()
	if !e.closed {
		s.DiskUsage = e.db.Metrics().DiskSpaceUsage()
	}
	e.closeMu.RUnlock()
	return s
}

// pebbleLogger sends Pebble's logs to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any)  { p.l.Debug(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Error(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}
