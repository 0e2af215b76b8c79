// Package coord is a partitioned-coordinator runtime: the pattern Kafka's
// group and transaction coordinators share. Coordinator state lives in an
// internal compacted topic; each partition of it is a Shard, served by the
// broker that leads the partition. On gaining leadership the shard replays
// its partition into a StateMachine, then serves; every state change is
// written to the partition before it is applied and answered; on losing
// leadership the state is dropped.
//
// The runtime serialises everything a shard does behind one mutex: request
// handlers (Do), timers (AfterFunc) and loading. A shard's writes are
// therefore ordered, and a state machine needs no locking of its own.
package coord

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
)

// Record is one keyed record of a coordinator topic. A nil Value is a
// tombstone: compaction eventually removes the key.
type Record struct {
	Key, Value []byte
}

// StateMachine is the in-memory state of one shard. All its methods are
// called with the shard's lock held.
type StateMachine interface {
	// Replay applies one record read back from the log while the shard
	// loads, in offset order; value is nil for a tombstone. An error
	// stops the load: the shard does not serve.
	Replay(key, value []byte) error
	// Loaded is called once replay is done, before the shard serves;
	// it is where timers (session expiry, retention) are started.
	Loaded(sh *Shard)
	// Unloaded is called when leadership is lost or the runtime stops:
	// the state is about to be dropped, so waiters must be answered
	// (with NOT_COORDINATOR).
	Unloaded()
}

// TxnStateMachine is a StateMachine that keeps transactional records
// (the consumer-groups plugin's TxnOffsetCommit): they are pending until
// the producer's transaction marker follows them in the log.
type TxnStateMachine interface {
	StateMachine
	// ReplayTxn applies a record of producer pid's open transaction.
	ReplayTxn(pid int64, key, value []byte) error
	// ReplayMarker applies the COMMIT (commit true) or ABORT marker that
	// ends producer pid's transaction.
	ReplayMarker(pid int64, commit bool) error
}

// Partitions are the broker's partition logs, where shards are read and
// written (server/plugin's Coordinator adapts plugin.Host to it).
type Partitions interface {
	// Partition is the log of partition partition of topic id, nil when
	// the broker does not host it.
	Partition(id engine.TopicID, partition int32) Log
}

// Log is what a shard does to its partition's log: read it from its
// start to its end when it loads, append its records and transaction
// markers. *engine.Partition implements it.
type Log interface {
	Offsets() engine.Offsets
	Fetch(offset int64, maxBytes int, iso engine.Isolation) (engine.FetchResult, error)
	Append(ctx context.Context, req *engine.AppendRequest) (engine.AppendResult, error)
	WriteTxnMarkers(ctx context.Context, markers ...engine.Marker) (int64, error)
}

var _ Log = (*engine.Partition)(nil)

// Replicas is the broker's acks=all, which a shard's writes go through so
// that a coordinator answers only once the ISR has what it wrote
// (plugin.Host implements it).
type Replicas interface {
	// CheckWritable is checked before an append: this broker leads the
	// partition and its ISR is large enough. It returns the leader
	// epoch to wait in.
	CheckWritable(id engine.TopicID, partition int32) (leaderEpoch int32, err error)
	// AwaitReplicated returns once the high watermark covers last.
	AwaitReplicated(ctx context.Context, id engine.TopicID, partition int32, leaderEpoch int32, last int64, timeout time.Duration) error
	// CheckSession fails while this broker may have been fenced without
	// knowing it (no heartbeat answered for the session timeout): a
	// shard then serves nothing from its state, which another broker
	// may have moved past.
	CheckSession() error
}

// WriteTimeout bounds how long a shard write waits for the ISR to have
// it: Kafka's offsets.commit.timeout.ms (5000), which its transaction
// coordinator's appends share in effect (request.timeout.ms). The shard
// is locked meanwhile.
const WriteTimeout = 5 * time.Second

// Config configures a Runtime.
type Config struct {
	Topic      string // the internal topic, e.g. __consumer_offsets
	Partitions int32  // its partition count, for routing keys
	// New returns the empty state machine of a partition's shard.
	New    func(partition int32) StateMachine
	Logger *slog.Logger
	// Now is the clock (record timestamps); nil is time.Now.
	Now func() time.Time
}

// Runtime runs the shards of one internal topic that this broker leads.
type Runtime struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	eng     Partitions   // nil until Start
	repl    Replicas     // nil: writes are acknowledged once in the local log
	contain func(func()) // runs the work of loaders and timers (Start)
	stopped bool
	shards  map[int32]*Shard
	wg      sync.WaitGroup // loaders and unloaders
}

// New returns a runtime; it loads nothing until Start.
func New(cfg Config) *Runtime {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Runtime{cfg: cfg, log: cfg.Logger.With("coordinator", cfg.Topic), shards: map[int32]*Shard{}}
}

// Topic is the internal topic's name.
func (r *Runtime) Topic() string { return r.cfg.Topic }

// Partitions is the internal topic's partition count.
func (r *Runtime) Partitions() int32 { return r.cfg.Partitions }

// PartitionFor routes a key to its partition exactly as Kafka does:
// Utils.abs(key.hashCode()) % partitions, with Java's String.hashCode
// over UTF-16 code units and Utils.abs(x) = x & 0x7fffffff.
func (r *Runtime) PartitionFor(key string) int32 { return PartitionFor(key, r.cfg.Partitions) }

// PartitionFor is Runtime.PartitionFor for a given partition count.
func PartitionFor(key string, partitions int32) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(key)) {
		h = 31*h + int32(u)
	}
	return (h & 0x7fffffff) % partitions
}

// Start begins serving on eng: from now on SetLeader loads shards. The
// broker reports leadership only once its plugins have started. Writes
// wait for repl (nil: only for the local log). Loaders, unloaders and
// timer callbacks run inside contain (plugin.Host.Contain: a panic fails
// the plugin, not the process); nil runs them as they are.
func (r *Runtime) Start(eng Partitions, repl Replicas, contain func(func())) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if contain == nil {
		contain = func(f func()) { f() }
	}
	r.eng, r.repl, r.contain = eng, repl, contain
}

// Stop unloads every shard and returns once every goroutine of the runtime
// (loaders, unloaders, timers) has ended.
func (r *Runtime) Stop() {
	r.mu.Lock()
	r.stopped = true
	shards := r.shards
	r.shards = map[int32]*Shard{}
	r.mu.Unlock()
	for _, sh := range shards {
		sh.dropped.Store(true)
		sh.unload()
	}
	r.wg.Wait()
}

// SetLeader records that this broker gained (leader) or lost leadership of
// a partition of the topic. Calls must be ordered per partition; each is
// the partition's current state. A shard gained loads in the background.
// Leadership reported before Start or after Stop is ignored.
func (r *Runtime) SetLeader(id engine.TopicID, partition int32, leader bool, epoch int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.eng == nil || r.stopped {
		r.log.Warn("leadership reported while the coordinator is not running; ignored", "partition", partition, "leader", leader)
		return
	}
	old := r.shards[partition]
	if leader && old != nil && old.topicID == id {
		// Still ours (a new epoch of our own leadership): the state in
		// memory is still what the log says.
		old.epoch.Store(epoch)
		return
	}
	if old != nil {
		delete(r.shards, partition)
		old.dropped.Store(true) // before unload runs: waiting requests see it
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.contain(old.unload)
		}()
	}
	if !leader {
		return
	}
	sh := newShard(r, id, partition, epoch)
	r.shards[partition] = sh
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.contain(sh.load)
	}()
}

// Shard returns the shard of a partition, nil if this broker does not
// lead it.
func (r *Runtime) Shard(partition int32) *Shard {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.shards[partition]
}

// Shards returns the shards this broker leads.
func (r *Runtime) Shards() []*Shard {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Shard, 0, len(r.shards))
	for _, sh := range r.shards {
		out = append(out, sh)
	}
	return out
}

// Do runs fn on the shard of partition with the shard's lock held, once it
// has loaded. It fails with COORDINATOR_NOT_AVAILABLE before Start and
// after Stop, with NOT_COORDINATOR when this broker does not lead the
// partition (or stops leading it before fn runs), and with
// COORDINATOR_LOAD_IN_PROGRESS if ctx ends while the shard loads.
func (r *Runtime) Do(ctx context.Context, partition int32, fn func(sh *Shard) error) error {
	r.mu.Lock()
	running, sh := r.eng != nil && !r.stopped, r.shards[partition]
	r.mu.Unlock()
	switch {
	case !running:
		return fmt.Errorf("%s coordinator is not running: %w", r.cfg.Topic, kerr.CoordinatorNotAvailable)
	case sh == nil:
		return fmt.Errorf("%s-%d is not led here: %w", r.cfg.Topic, partition, kerr.NotCoordinator)
	}
	return sh.Do(ctx, fn)
}

// Shard is one partition of the internal topic that this broker leads.
type Shard struct {
	r         *Runtime
	topicID   engine.TopicID
	partition int32
	epoch     atomic.Int32
	ctx       context.Context // canceled when the shard is dropped
	cancel    context.CancelFunc
	loaded    chan struct{} // closed when loading finished (ok or not)

	dropped atomic.Bool // leadership lost: set before the state is dropped

	mu    sync.Mutex
	sm    StateMachine
	state shardState

	tmu    sync.Mutex
	timers map[*time.Timer]struct{} // pending AfterFunc timers; nil once unloaded
	fired  sync.WaitGroup           // AfterFunc timers not yet stopped or finished
}

type shardState int8

const (
	loading shardState = iota
	serving
	failed // the load failed: the shard never serves
	dead   // unloaded
)

func newShard(r *Runtime, id engine.TopicID, partition, epoch int32) *Shard {
	sh := &Shard{r: r, topicID: id, partition: partition, loaded: make(chan struct{}), sm: r.cfg.New(partition), timers: map[*time.Timer]struct{}{}}
	sh.epoch.Store(epoch)
	sh.ctx, sh.cancel = context.WithCancel(context.Background())
	sh.mu.Lock() // held until loaded: Do waits on it
	return sh
}

// Partition is the shard's partition of the internal topic.
func (sh *Shard) Partition() int32 { return sh.partition }

// TopicID is the ID of the internal topic.
func (sh *Shard) TopicID() engine.TopicID { return sh.topicID }

// Epoch is the leader epoch of the shard's leadership.
func (sh *Shard) Epoch() int32 { return sh.epoch.Load() }

// State is the shard's state machine. Use it only with the lock held
// (inside Do or an AfterFunc callback).
func (sh *Shard) State() StateMachine { return sh.sm }

// Context is canceled when the shard is dropped.
func (sh *Shard) Context() context.Context { return sh.ctx }

// Do runs fn with the shard's lock held once the shard serves; see
// Runtime.Do.
func (sh *Shard) Do(ctx context.Context, fn func(sh *Shard) error) error {
	select {
	case <-sh.loaded:
	case <-ctx.Done():
		return fmt.Errorf("%s-%d: %w", sh.r.cfg.Topic, sh.partition, kerr.CoordinatorLoadInProgress)
	}
	if sh.r.repl != nil {
		// Not NOT_COORDINATOR: the shard is still this broker's as far
		// as it knows, and work of its own (a transaction's markers)
		// waits and retries rather than leaving it to a successor
		// that may never come.
		if err := sh.r.repl.CheckSession(); err != nil {
			return fmt.Errorf("%s-%d: %v: %w", sh.r.cfg.Topic, sh.partition, err, kerr.CoordinatorNotAvailable)
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch {
	case sh.dropped.Load():
	case sh.state == serving:
		return fn(sh)
	case sh.state == failed:
		return fmt.Errorf("%s-%d failed to load: %w", sh.r.cfg.Topic, sh.partition, kerr.CoordinatorNotAvailable)
	}
	return fmt.Errorf("%s-%d is no longer led here: %w", sh.r.cfg.Topic, sh.partition, kerr.NotCoordinator)
}

// AfterFunc runs fn with the shard's lock held after d, unless the shard
// has been dropped by then or stop was called. Unloading the shard stops
// its timers and waits for a callback already running.
func (sh *Shard) AfterFunc(d time.Duration, fn func()) (stop func() bool) {
	sh.tmu.Lock()
	defer sh.tmu.Unlock()
	if sh.timers == nil {
		return func() bool { return false } // unloaded
	}
	sh.fired.Add(1)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		defer sh.fired.Done()
		sh.tmu.Lock()
		delete(sh.timers, t)
		sh.tmu.Unlock()
		sh.r.contain(func() {
			sh.mu.Lock()
			defer sh.mu.Unlock()
			if sh.state == serving && !sh.dropped.Load() {
				fn()
			}
		})
	})
	sh.timers[t] = struct{}{}
	return func() bool {
		sh.tmu.Lock()
		defer sh.tmu.Unlock()
		if _, ok := sh.timers[t]; !ok || !t.Stop() {
			return false
		}
		delete(sh.timers, t)
		sh.fired.Done()
		return true
	}
}

// Write appends records to the shard's partition as one batch (acks=all)
// and returns once they are in the log. Call it with the lock held; apply
// the change to memory and answer only after it returns nil. Failures are
// Kafka errors a coordinator answers with: NOT_COORDINATOR when the
// partition is gone, COORDINATOR_NOT_AVAILABLE otherwise.
func (sh *Shard) Write(ctx context.Context, recs ...Record) error {
	if len(recs) == 0 {
		return nil
	}
	return sh.append(ctx, EncodeBatch(sh.r.cfg.Now(), recs))
}

func (sh *Shard) append(ctx context.Context, records []byte) error {
	if sh.state != serving || sh.dropped.Load() {
		return fmt.Errorf("%s-%d is no longer led here: %w", sh.r.cfg.Topic, sh.partition, kerr.NotCoordinator)
	}
	return sh.replicated(ctx, "write", func(p Log) (int64, error) {
		res, err := p.Append(ctx, &engine.AppendRequest{
			Topic: sh.r.cfg.Topic, TopicID: sh.topicID, Partition: sh.partition,
			Origin: engine.OriginInternal, Acks: -1, Records: records,
		})
		return res.LastOffset, err
	})
}

// replicated runs an append to the shard's partition with acks=all: the
// ISR is checked before it and the high watermark awaited after it.
// Errors are mapped as Kafka's coordinators map them: leadership lost
// (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION) is
// NOT_COORDINATOR; NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
// REQUEST_TIMED_OUT and the rest COORDINATOR_NOT_AVAILABLE, both of
// which clients retry after finding the coordinator again.
func (sh *Shard) replicated(ctx context.Context, what string, appendFn func(p Log) (last int64, err error)) error {
	p := sh.r.eng.Partition(sh.topicID, sh.partition)
	if p == nil {
		return fmt.Errorf("%s-%d is gone: %w", sh.r.cfg.Topic, sh.partition, kerr.NotCoordinator)
	}
	epoch := int32(-1)
	var err error
	if sh.r.repl != nil {
		epoch, err = sh.r.repl.CheckWritable(sh.topicID, sh.partition)
	}
	var last int64
	if err == nil {
		last, err = appendFn(p)
	}
	if err == nil && sh.r.repl != nil {
		err = sh.r.repl.AwaitReplicated(ctx, sh.topicID, sh.partition, epoch, last, WriteTimeout)
	}
	if err != nil {
		code := kerr.CoordinatorNotAvailable
		if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.NotLeaderForPartition) {
			code = kerr.NotCoordinator
		}
		return fmt.Errorf("%s-%d: %s: %v: %w", sh.r.cfg.Topic, sh.partition, what, err, code)
	}
	return nil
}

// WriteTxn is Write for records of producer pid's transaction: they go
// in a transactional batch, and the partition keeps them pending (its
// last stable offset stays below them) until WriteMarker ends it.
func (sh *Shard) WriteTxn(ctx context.Context, pid int64, epoch int16, recs ...Record) error {
	return sh.append(ctx, encodeBatch(sh.r.cfg.Now(), recs, pid, epoch))
}

// WriteMarker writes the COMMIT or ABORT marker of producer pid's
// transaction to the shard's partition. Call it with the lock held and
// apply the outcome to memory once it returns nil.
func (sh *Shard) WriteMarker(ctx context.Context, m engine.Marker) error {
	if sh.state != serving || sh.dropped.Load() {
		return fmt.Errorf("%s-%d is no longer led here: %w", sh.r.cfg.Topic, sh.partition, kerr.NotCoordinator)
	}
	return sh.replicated(ctx, "write marker", func(p Log) (int64, error) {
		return p.WriteTxnMarkers(ctx, m)
	})
}

// load replays the partition from its log start to its log end, as
// Kafka's coordinator loader does: a new leader's log is the partition's
// from now on, records it has beyond the high watermark included (they
// become committed as the followers catch up, and a coordinator that
// left them out would contradict its own log).
// The lock is held since newShard.
func (sh *Shard) load() {
	defer close(sh.loaded)
	defer sh.mu.Unlock()
	if sh.state != loading {
		return // dropped before it loaded
	}
	start := time.Now()
	n, err := sh.replay()
	if err != nil {
		sh.state = failed
		sh.r.log.Error("coordinator shard failed to load", "partition", sh.partition, "err", err)
		return
	}
	sh.state = serving
	sh.sm.Loaded(sh)
	sh.r.log.Debug("coordinator shard loaded", "partition", sh.partition, "records", n, "took", time.Since(start))
}

func (sh *Shard) replay() (int, error) {
	p := sh.r.eng.Partition(sh.topicID, sh.partition)
	if p == nil {
		return 0, fmt.Errorf("partition %s-%d does not exist", sh.r.cfg.Topic, sh.partition)
	}
	offs := p.Offsets()
	n := 0
	for off := offs.LogStart; off < offs.LogEnd; {
		res, err := p.Fetch(off, 1<<20, engine.ReadLogEnd)
		var kerrErr *kerr.Error
		if errors.As(err, &kerrErr) && kerrErr == kerr.OffsetOutOfRange && off < res.LogStartOffset {
			off = res.LogStartOffset // retention moved the start meanwhile
			continue
		}
		if err != nil {
			return n, fmt.Errorf("read offset %d: %w", off, err)
		}
		if len(res.Batches) == 0 {
			break
		}
		txnSM, _ := sh.sm.(TxnStateMachine)
		var control func(b *kmsg.RecordBatch, key []byte) error
		if txnSM != nil {
			control = func(b *kmsg.RecordBatch, key []byte) error {
				if b.FirstOffset < off || len(key) < 4 {
					return nil
				}
				switch typ := int16(binary.BigEndian.Uint16(key[2:])); typ {
				case engine.ControlAbort, engine.ControlCommit:
					return txnSM.ReplayMarker(b.ProducerID, typ == engine.ControlCommit)
				}
				return nil
			}
		}
		for _, b := range res.Batches {
			next, err := eachRecord(b, control, func(rb *kmsg.RecordBatch, offset int64, key, value []byte) error {
				if offset < off {
					return nil // the first batch may start before off
				}
				n++
				if txnSM != nil && rb.Attributes&0x10 != 0 && rb.ProducerID >= 0 {
					return txnSM.ReplayTxn(rb.ProducerID, key, value)
				}
				return sh.sm.Replay(key, value)
			})
			if err != nil {
				return n, err
			}
			off = max(off, next)
		}
	}
	return n, nil
}

// unload drops the shard's state: pending and future Do calls get
// NOT_COORDINATOR. It returns once no timer callback of the shard runs.
func (sh *Shard) unload() {
	sh.cancel()
	<-sh.loaded
	sh.mu.Lock()
	if sh.state == serving {
		sh.sm.Unloaded()
	}
	sh.state = dead
	sh.mu.Unlock()
	sh.tmu.Lock()
	for t := range sh.timers {
		if t.Stop() {
			sh.fired.Done()
		}
	}
	sh.timers = nil
	sh.tmu.Unlock()
	sh.fired.Wait() // a callback that fired meanwhile sees the shard dead
}
