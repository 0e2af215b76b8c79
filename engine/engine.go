package engine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/diskspace"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Config configures an Engine.
type Config struct {
	// Dir is the engine's directory: the Pebble store, and the segment
	// files under Dir/segments.
	Dir string
	FS  vfs.FS // nil: the real disk
	// SyncWrites makes appends with acks != 0 wait for the fdatasync of
	// their segment file (grouped across concurrent appends) before they
	// are acknowledged.
	SyncWrites bool
	Logger     *slog.Logger
	// Validators are called in order before every append, any origin.
	Validators []AppendValidator
	// Observers are called after every append is durable.
	Observers []AppendObserver
	// RetentionCheckInterval is how often retention and compaction run:
	// 0 means 30s (log.retention.check.interval.ms), < 0 disables the loop.
	RetentionCheckInterval time.Duration
	// MemoryBudget is the memory the engine sizes its caches to
	// (tandem.memory.budget); 0 means DefaultMemoryBudget.
	MemoryBudget int64
	// MaxOpenFiles bounds the segment files kept open; 0 derives it from
	// the process's file descriptor limit.
	MaxOpenFiles int
	// Now is the clock of the engine's decisions and stamps: segment.ms
	// rolls, log-append times, control batches' timestamps and the
	// retention loop's passes. nil is time.Now; tests move a fake one.
	Now func() time.Time
}

// DefaultMemoryBudget is tandem.memory.budget's default.
const DefaultMemoryBudget = 256 << 20

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
	DiskUsage    uint64 // segment files and Pebble
	OpenFiles    int    // segment files open
	// DiskFull is set while the data directory's free space is below the
	// reserve (or a write failed for lack of space): appends other than
	// the broker's own are refused with KAFKA_STORAGE_ERROR.
	DiskFull bool
	// DiskFree is the filesystem's free space at the last check (0 when
	// unknown).
	DiskFree uint64
}

type partKey struct {
	id TopicID
	p  int32
}

// Engine is one broker's storage: every partition's segment files and one
// Pebble instance for their metadata.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	db     *pebble.DB
	fs     vfs.FS // cfg.FS, calling space.OnDiskFull on ENOSPC
	segDir string
	// newPartitionDirs syncs segDir for the partition directories
	// created in it.
	newPartitionDirs *segfile.DirSyncs
	files            *segfile.Table
	syncer           *syncer
	space            *diskspace.Space

	// closeMu is held shared by every operation that writes to Pebble, and
	// exclusively by Close, so that nothing writes to a closed DB.
	closeMu sync.RWMutex
	closed  bool

	mu    sync.RWMutex
	parts map[partKey]*Partition

	bytesWritten atomic.Int64
	appends      atomic.Int64

	stop       chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup
	syncStop   chan struct{}
	syncerDone chan struct{}

	// testHook, set by tests, is called at named points of the write
	// path (where a crash is interesting).
	testHook func(point string)
}

var errClosed = errors.New("engine: closed")

// Open opens (or creates) the store, migrating a data directory of an
// older format, and loads every partition found in it, recovering what a
// crash left unsynced.
func Open(cfg Config) (*Engine, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.RetentionCheckInterval == 0 {
		cfg.RetentionCheckInterval = 30 * time.Second
	}
	if cfg.MemoryBudget <= 0 {
		cfg.MemoryBudget = DefaultMemoryBudget
	}
	if cfg.MaxOpenFiles <= 0 {
		cfg.MaxOpenFiles = defaultMaxOpenFiles()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, parts: make(map[partKey]*Partition), stop: make(chan struct{}),
		syncStop: make(chan struct{}), syncerDone: make(chan struct{})}
	if err := cfg.FS.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: create %s: %w", cfg.Dir, err)
	}
	// Before Pebble opens: on a full disk, the reserve file makes room for
	// Pebble's recovery and the metadata a start writes.
	e.space = diskspace.New(cfg.FS, cfg.Dir, cfg.Logger)
	e.fs = vfs.OnDiskFull(cfg.FS, e.space.OnDiskFull)
	e.segDir = e.fs.PathJoin(cfg.Dir, segmentsDir)
	e.newPartitionDirs = &segfile.DirSyncs{Dir: e.segDir}
	e.files = segfile.NewTable(e.fs, cfg.MaxOpenFiles)
	db, err := pebble.Open(cfg.Dir, e.pebbleOptions())
	if err != nil {
		return nil, fmt.Errorf("engine: open pebble at %q: %w", cfg.Dir, err)
	}
	e.db = db
	if err := e.openStore(); err != nil {
		db.Close()
		e.files.CloseAll()
		return nil, err
	}
	e.syncer = newSyncer(e)
	go func() { defer close(e.syncerDone); e.syncer.run(e.syncStop) }()
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.space.Run(e.stop) }()
	if cfg.RetentionCheckInterval > 0 {
		e.wg.Add(1)
		go e.retentionLoop(cfg.RetentionCheckInterval)
	}
	return e, nil
}

func (e *Engine) pebbleOptions() *pebble.Options {
	// Pebble holds the log's metadata and raftmeta's log, never record
	// batches: small memtables and cache, within the memory budget.
	memtable := min(max(e.cfg.MemoryBudget/32, 1<<20), 16<<20)
	opts := &pebble.Options{
		FS:                          e.fs,
		MemTableSize:                uint64(memtable),
		MemTableStopWritesThreshold: 4,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      pebbleLogger{e.log},
	}
	opts.CacheSize = min(max(e.cfg.MemoryBudget/32, 1<<20), 64<<20)
	// A write stall holds every metadata write of the broker: say so, with
	// how long it lasted, since it shows as latency nowhere else.
	var stallStart atomic.Int64
	opts.EventListener = &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			stallStart.Store(time.Now().UnixNano())
			e.log.Warn("pebble write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			e.log.Warn("pebble write stall ended", "after", time.Since(time.Unix(0, stallStart.Load())))
		},
		BackgroundError: e.space.BackgroundError,
		FlushEnd:        func(pebble.FlushInfo) { e.space.BackgroundOK() },
	}
	return opts
}

// openStore checks the data directory's format, migrating an older one,
// and loads the partitions.
func (e *Engine) openStore() error {
	version, err := e.formatVersion()
	if err != nil {
		return err
	}
	if version > formatVersion {
		return fmt.Errorf("engine: %s has data-dir format version %d, and this broker reads versions 1 and %d: run a newer broker", e.cfg.Dir, version, formatVersion)
	}
	if err := e.fs.MkdirAll(e.segDir, 0o755); err != nil {
		return fmt.Errorf("engine: create %s: %w", e.segDir, err)
	}
	if err := segfile.SyncDir(e.fs, e.cfg.Dir); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if version == 1 {
		if err := e.migrateV1(); err != nil {
			return fmt.Errorf("engine: migrate %s from data-dir format version 1 to %d: %w", e.cfg.Dir, formatVersion, err)
		}
	}
	if err := e.load(); err != nil {
		return err
	}
	// One sync for the metadata every partition's recovery wrote, and the
	// format version.
	v := binary.BigEndian.AppendUint32(nil, formatVersion)
	if err := e.db.Set(keys.Version, v, pebble.Sync); err != nil {
		return fmt.Errorf("engine: write format version: %w", err)
	}
	return nil
}

// formatVersion is the store's data-dir format: its version key, or 1
// for a store with partitions and no version key (written before segment
// files), or the current version for a new store.
func (e *Engine) formatVersion() (uint32, error) {
	v, closer, err := e.db.Get(keys.Version)
	if err == nil {
		defer closer.Close()
		if len(v) != 4 {
			return 0, fmt.Errorf("engine: malformed format version %x", v)
		}
		return binary.BigEndian.Uint32(v), nil
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return 0, fmt.Errorf("engine: read format version: %w", err)
	}
	lo := []byte{keys.NS, keys.KindState}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: keys.PrefixEnd(lo)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if it.First() {
		return 1, nil
	}
	return formatVersion, it.Error()
}

// eachStored calls fn with a new Partition (not loaded) for every
// partition state in the store.
func (e *Engine) eachStored(fn func(p *Partition) error) error {
	lo := []byte{keys.NS, keys.KindState}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: keys.PrefixEnd(lo)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 22 {
			return fmt.Errorf("bad state key %x", k)
		}
		var id TopicID
		copy(id[:], k[2:18])
		var st persistedState
		if err := json.Unmarshal(it.Value(), &st); err != nil {
			return fmt.Errorf("%s-%d state: %w", id, keys.Suffix32(k), err)
		}
		p := newPartition(e, st.Topic, id, keys.Suffix32(k), st.Config)
		p.logStart, p.leaderEpoch = st.LogStart, st.LeaderEpoch
		if err := fn(p); err != nil {
			return fmt.Errorf("%s (%s) partition %d: %w", st.Topic, id, p.part, err)
		}
	}
	return it.Error()
}

func (e *Engine) load() error {
	err := e.eachStored(func(p *Partition) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if err := p.loadLocked(nil); err != nil {
			return err
		}
		e.parts[partKey{p.id, p.part}] = p
		return nil
	})
	if err != nil {
		return fmt.Errorf("engine: load: %w", err)
	}
	return e.removeOrphans()
}

// removeOrphans deletes segment directories of partitions that have no
// state: a Delete committed before a crash, its files not yet removed.
func (e *Engine) removeOrphans() error {
	names, err := e.fs.List(e.segDir)
	if err != nil {
		return fmt.Errorf("engine: list %s: %w", e.segDir, err)
	}
	known := make(map[string]bool, len(e.parts))
	for k := range e.parts {
		known[partitionDirName(k.id, k.p)] = true
	}
	for _, n := range names {
		if !known[n] {
			e.log.Info("removing the segments of a deleted partition", "dir", n)
			if err := e.fs.RemoveAll(e.fs.PathJoin(e.segDir, n)); err != nil {
				return fmt.Errorf("engine: remove %s: %w", n, err)
			}
		}
	}
	return nil
}

// Close syncs what was appended, stops the background work and closes
// the store. Appends in flight finish first; later calls fail.
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
	// Whoever waits on a partition (a long-polling fetch, an acks=all
	// produce, a follower's fetch) wakes now and finds it closed, rather
	// than waiting for an advance that will not come.
	e.mu.RLock()
	for _, p := range e.parts {
		p.mu.Lock()
		p.shut = true
		p.notifyLocked()
		p.notifyEndLocked()
		p.mu.Unlock()
	}
	e.mu.RUnlock()
	// A last sync round: a clean shutdown leaves nothing to replay.
	close(e.syncStop)
	<-e.syncerDone
	e.files.CloseAll()
	if err := e.db.Close(); err != nil {
		return fmt.Errorf("engine: close pebble: %w", err)
	}
	return nil
}

// DB is the Pebble instance, shared with raftmeta (see
// engine/internal/keys for the prefixes each owner uses).
func (e *Engine) DB() *pebble.DB { return e.db }

// Create creates a partition, or returns the existing one (its config
// is then updated to cfg).
func (e *Engine) Create(topic string, id TopicID, partition int32, cfg LogConfig) (*Partition, error) {
	if err := e.CreateAll(topic, id, []int32{partition}, cfg); err != nil {
		return nil, err
	}
	return e.Partition(id, partition), nil
}

// CreateAll creates the partitions of topic that do not exist yet and sets
// cfg on those that do. The new partitions' states are written in one
// synced batch: a topic of 50,000 partitions costs one sync, not 50,000.
func (e *Engine) CreateAll(topic string, id TopicID, partitions []int32, cfg LogConfig) error {
	var missing []int32
	for _, n := range partitions {
		if p := e.Partition(id, n); p != nil {
			p.SetConfig(cfg)
		} else {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return errClosed
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	batch := e.db.NewBatch()
	defer batch.Close()
	var created []*Partition
	for _, n := range missing {
		if e.parts[partKey{id, n}] != nil {
			continue // created concurrently
		}
		p := newPartition(e, topic, id, n, cfg)
		if err := batch.Set(keys.State(id, n), p.encodeState(), nil); err != nil {
			return fmt.Errorf("engine: create %s partition %d: %w", topic, n, err)
		}
		created = append(created, p)
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("engine: create %d partitions of %s: %w", len(created), topic, err)
	}
	for _, p := range created {
		e.parts[partKey{id, p.part}] = p
	}
	return nil
}

// Partition returns the partition, or nil.
func (e *Engine) Partition(id TopicID, partition int32) *Partition {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.parts[partKey{id, partition}]
}

// Len is the number of partitions open.
func (e *Engine) Len() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return len(e.parts)
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
	e.mu.Unlock()
	dir := e.fs.PathJoin(e.segDir, partitionDirName(id, partition))
	if p != nil {
		// metaMu: a sync round holding the partition's metadata applies it
		// before the range deletion below.
		p.metaMu.Lock()
		defer p.metaMu.Unlock()
		p.mu.Lock()
		p.deleted = true
		if p.pending != nil {
			p.pending.Close()
			p.pending = nil
		}
		for _, s := range p.segs {
			e.files.Retire(s.file)
		}
		p.segs = nil
		p.notifyLocked()
		p.mu.Unlock()
	}
	b := e.db.NewBatch()
	defer b.Close()
	pre := keys.Data(id, partition)
	b.DeleteRange(pre, keys.PrefixEnd(pre), nil)
	b.Delete(keys.State(id, partition), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("engine: delete %s partition %d: %w", id, partition, err)
	}
	// A crash before the files are gone leaves a directory without state,
	// which the next Open removes.
	if err := e.fs.RemoveAll(dir); err != nil {
		return fmt.Errorf("engine: delete %s partition %d: %w", id, partition, err)
	}
	e.space.Freed()
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
		case <-t.C:
			if err := e.EnforceRetention(e.cfg.Now()); err != nil {
				e.log.Warn("retention pass failed", "err", err)
			}
		}
	}
}

// Metrics returns the engine's counters.
func (e *Engine) Metrics() Stats {
	s := Stats{
		BytesWritten: e.bytesWritten.Load(),
		Appends:      e.appends.Load(),
		DiskFull:     e.space.IsFull(),
		DiskFree:     e.space.Free(),
	}
	parts := e.partitions()
	s.Partitions = len(parts)
	for _, p := range parts {
		s.DiskUsage += uint64(p.Size())
	}
	s.OpenFiles = e.files.Open()
	e.closeMu.RLock()
	if !e.closed {
		s.DiskUsage += e.db.Metrics().DiskSpaceUsage()
	}
	e.closeMu.RUnlock()
	return s
}

// DiskFull reports whether appends from clients are refused for lack of
// space (see Stats.DiskFull).
func (e *Engine) DiskFull() bool { return e.space.IsFull() }

func (e *Engine) hook(point string) {
	if e.testHook != nil {
		e.testHook(point)
	}
}

// defaultMaxOpenFiles leaves half of the process's descriptors to
// connections and Pebble.
func defaultMaxOpenFiles() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 512
	}
	return int(min(max(rl.Cur/2, 64), 100_000))
}

// storageError is the error of a write refused or failed for lack of
// space or an I/O error: KAFKA_STORAGE_ERROR, which clients retry.
func storageError(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, kerr.KafkaStorageError)...)
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
