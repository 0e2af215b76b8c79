// Package fetch is the mirror's fetch stage, KIP-1279's
// MirrorFetcherThread: one Fetcher per source broker and fetcher id
// (mirror.num.replica.fetchers of them per broker), each with its own
// connection to the source. A round of a fetcher sends one Fetch in its
// fetch session (session.go) for the partitions it is given, trims each
// partition's answer to whole batches not above the epoch it was asked
// for (KAFKA-18723) and hands each to be applied; a goroutine of the
// fetcher's then waits for the round's appends to be durable while the
// fetcher goes on with the next round (at most two rounds ahead). An
// answer of records alone has the next Fetch sent before its appends,
// so that the source sends while the destination writes. The fetch
// sizes follow the link (sizes.go).
//
// What a partition's answer means (truncation on a diverging epoch,
// OFFSET_OUT_OF_RANGE, epoch fencing, the partition's state) is the
// mirror's, not the fetcher's: the fetcher reaches the mirror only
// through Target, which the mirror plugin implements (plugins/mirror,
// fetchtarget.go), so that it does not import the plugin.
package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/tandem-kafka/tandem/internal/uuid"
)

// Key names a fetcher: a source broker and one of its fetcher ids.
type Key struct {
	Broker int32
	ID     int
}

// KeyOf is the fetcher of a partition whose source leader is leader:
// the partitions a source broker leads are spread over its fetcher ids
// (fetchers of them, at least one), a topic's partitions one after the
// other from a place its name picks, so that a topic's partitions are
// evenly spread however few there are.
func KeyOf(topic string, partition, leader int32, fetchers int) Key {
	h := fnv.New32a()
	h.Write([]byte(topic))
	return Key{leader, int((uint64(h.Sum32()) + uint64(max(0, partition))) % uint64(max(1, fetchers)))}
}

// Partition is a partition as one round fetches it.
type Partition struct {
	Topic     string
	TopicID   uuid.UUID
	Partition int32
	// FetchOffset is where the fetch starts: the destination's log
	// end, or the source's log start to restart at.
	FetchOffset int64
	// LeaderEpoch is the source leader's epoch as last learned (-1:
	// unknown), sent as CurrentLeaderEpoch: the source fences a stale
	// one, and the fetcher drops the answer's batches above it.
	LeaderEpoch int32
	// LastFetchedEpoch is the epoch of the destination's last batch (-1:
	// none), for the source to answer a DivergingEpoch.
	LastFetchedEpoch int32
}

// Target is the mirror as one fetcher sees it. A fetcher calls its target
// from its own goroutine only (but the waits): Generation before each
// round, and Partitions when the generation changed (and at the first
// round); for each Fetch either Unreachable or Answered; after an answer
// without a top-level error, Apply for each partition in it. The waits
// Apply returned are called from the fetcher's waiter goroutine, in
// order, concurrently with the next round's calls.
type Target interface {
	// Generation changes whenever Partitions would say something new
	// other than what the fetcher's own appends did: a partition added,
	// removed, paused or failed, a source leader or epoch that moved, a
	// log truncated. The fetcher moves a partition's position after an
	// append itself, and asks for all of them only on a new generation
	// (or after an error), so that a round costs what changed. The
	// answer to a Fetch sent before a new generation is dropped, not
	// applied.
	Generation() uint64
	// Partitions are the partitions to fetch, with their positions.
	// None: the fetcher waits for a new generation. An error: it cannot
	// fetch now, and asks again after the backoff.
	Partitions() ([]Partition, error)
	// Unreachable is told that a Fetch got no answer (not when the
	// fetcher was stopped meanwhile); err is the connection's (the
	// fetcher has closed it: the next round reconnects). It returns the
	// error the fetcher reports, worded as the target wants (which
	// source, why).
	Unreachable(err error) error
	// Answered is told that the source broker answered a Fetch sent at
	// sent; err is the answer's top-level error, nil if none. A
	// partition of the fetch session that is not in an answer without
	// error had nothing new at the source: its high watermark is the
	// one last given to Apply, as of sent.
	Answered(sent time.Time, err error)
	// Apply applies one partition's answer to a Fetch from
	// p.FetchOffset. Its RecordBatches are trimmed to whole batches not
	// above p.LeaderEpoch, and they are the fetcher's buffer: the
	// append must be written before Apply returns, and wait must not
	// read them. Apply must refuse an answer unless the partition's log
	// ends at p.FetchOffset: the fetcher sends its next Fetch before
	// this answer is appended, and writes that Fetch's answer before
	// these appends are durable; when one of them fails, the next answer
	// starts past the log's end (appending it would leave a hole).
	// wait is nil when nothing was appended, else it waits until the
	// append is durable; the fetcher's waiter goroutine calls it once,
	// in the order of the rounds, while the fetcher calls the target for
	// the next round. n counts towards the fetcher's bytes and the
	// throttle.
	Apply(p Partition, rp *kmsg.FetchResponseTopicPartition) (n int, wait func() error, err error)
}

// Refresher is a Target that also keeps something fresh between fetches
// (the mirror: the source end offsets of its paused partitions, and the
// lag in record time): the fetcher calls Refresh after a round, at most
// once a second, on a goroutine of its own so that the rounds go on
// meanwhile; never two calls at once, and Run returns after the last.
type Refresher interface {
	Refresh()
}

// Counter counts (a *metrics.Counter).
type Counter interface {
	Add(n int)
}

// Config is a fetcher's settings.
type Config struct {
	Mirror string // the mirror's name, in the client ID
	NodeID int32  // this broker's, in the client ID
	// Addr is the source broker's address now (it may move).
	Addr           func(broker int32) (string, error)
	TLS            *tls.Config    // nil: plaintext
	SASL           sasl.Mechanism // nil: none
	ConnectTimeout time.Duration  // mirror.socket.connection.setup.timeout.ms
	RequestTimeout time.Duration  // mirror.request.timeout.ms: bounds each request
	MaxWait        time.Duration  // replica.fetch.wait.max.ms
	MinBytes       int32          // replica.fetch.min.bytes
	// MaxBytes and PartitionMaxBytes are replica.fetch.response.max.bytes
	// and replica.fetch.max.bytes (0: Kafka's defaults). FixedSizes says
	// the operator set them: they are then fixed, else where the
	// adaptive sizes start (sizes.go).
	MaxBytes          int32
	PartitionMaxBytes int32
	FixedSizes        bool
	// Budget bounds the answers of all the fetchers that share it
	// (nil: one of DefaultBudget for this fetcher alone).
	Budget  *Budget
	Backoff time.Duration // mirror.replica.fetch.backoff.ms: after a failed round
	// Rate is mirror.replication.throttled.rate in bytes a second, read
	// at each fetch (it is dynamic); 0 or less, or a nil Rate, does not
	// throttle.
	Rate func() int64
	Log  *slog.Logger // nil: none
	// Requests counts the Fetch requests sent, Bytes what Apply
	// reported; nil counts nothing.
	Requests, Bytes Counter
}

// Fetcher is one MirrorFetcherThread.
type Fetcher struct {
	key    Key
	cfg    Config
	t      Target
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	poke   chan struct{}
	// The fetcher goroutine's own:
	refreshedAt time.Time // last Refresh
	conn        *conn     // to the source, nil until the first fetch or after a failure
	version     int16     // of Fetch on conn
	next        *inflight // the Fetch sent and not answered yet, if any
	sess        *session
	gen         uint64
	loaded      bool // sess holds the partitions of generation gen
	sizes       *sizes
	// rounds takes each round's waits to the fetcher's waiter
	// goroutine, which calls them in order while the fetcher goes on
	// (the engine makes one round durable while the fetcher reads and
	// writes the next); it holds one round, so that the fetcher is at
	// most two rounds ahead of what is durable. failed says a wait
	// failed: the fetcher asks for the positions again.
	rounds chan []func() error
	failed atomic.Bool
	// refreshing holds the Refresh under way, if any: it runs beside the
	// rounds (the mirror's is a round trip to the source, which in series
	// would cost each round over a long link one), one at a time.
	refreshing  sync.WaitGroup
	refreshBusy atomic.Bool
}

type noCount struct{}

func (noCount) Add(int) {}

// New returns the fetcher k of the mirror that t is, not running yet:
// Run runs it until ctx ends or Stop.
func New(ctx context.Context, k Key, cfg Config, t Target) *Fetcher {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Requests == nil {
		cfg.Requests = noCount{}
	}
	if cfg.Bytes == nil {
		cfg.Bytes = noCount{}
	}
	if cfg.Budget == nil {
		cfg.Budget = NewBudget(DefaultBudget)
	}
	f := &Fetcher{key: k, cfg: cfg, t: t, done: make(chan struct{}), poke: make(chan struct{}, 1), sess: newSession(),
		sizes: newSizes(cfg.Budget, cfg.MaxBytes, cfg.PartitionMaxBytes, cfg.FixedSizes), rounds: make(chan []func() error, 1)}
	f.ctx, f.cancel = context.WithCancel(ctx)
	return f
}

// Stop ends the fetcher and waits until Run has returned; a fetch
// waiting at the source is abandoned.
func (f *Fetcher) Stop() {
	f.cancel()
	<-f.done
}

// Poke tells a fetcher waiting for partitions that the target's
// generation changed.
func (f *Fetcher) Poke() {
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// Run fetches round after round until the fetcher is stopped. A round
// that fetched starts the next at once (the fetch waited at the source,
// replica.fetch.wait.max.ms); one with nothing to fetch waits for a poke
// (or a second), a failed one the backoff.
func (f *Fetcher) Run() {
	defer close(f.done)
	defer f.sizes.release(0)
	defer f.closeConn()
	waited := make(chan struct{})
	go func() { defer close(waited); f.waiter() }()
	defer func() { close(f.rounds); <-waited }() // every wait is called, even when stopped
	defer f.refreshing.Wait()
	for f.ctx.Err() == nil {
		fetched, err := f.round()
		f.refresh()
		wait := time.Second
		switch {
		case err != nil:
			if f.ctx.Err() == nil {
				f.cfg.Log.Debug("mirror fetch", "source_broker", f.key.Broker, "err", err)
			}
			f.loaded = false // ask for the positions again
			wait = f.cfg.Backoff
		case fetched:
			continue
		}
		select {
		case <-f.ctx.Done():
		case <-f.poke:
		case <-time.After(wait):
		}
	}
}

// refresh starts the target's Refresh on a goroutine of its own, at most
// once a second and unless one is still under way.
func (f *Fetcher) refresh() {
	r, ok := f.t.(Refresher)
	if !ok || time.Since(f.refreshedAt) < time.Second || !f.refreshBusy.CompareAndSwap(false, true) {
		return
	}
	f.refreshedAt = time.Now()
	f.refreshing.Go(func() {
		defer f.refreshBusy.Store(false)
		r.Refresh()
	})
}

// load brings the session's partitions up to the target's generation.
func (f *Fetcher) load() error {
	gen := f.t.Generation() // before Partitions: a change during the call is seen next round
	if f.loaded && gen == f.gen {
		return nil
	}
	parts, err := f.t.Partitions()
	if err != nil {
		return err
	}
	f.sess.set(parts)
	f.gen, f.loaded = gen, true
	return nil
}

// connect returns the fetcher's connection to its source broker, dialing
// (again) when there is none or its SASL session is about to end.
func (f *Fetcher) connect() (*conn, error) {
	if f.conn != nil && f.conn.expired(time.Now()) {
		f.closeConn()
	}
	if f.conn != nil {
		return f.conn, nil
	}
	addr, err := f.cfg.Addr(f.key.Broker)
	if err != nil {
		return nil, err
	}
	d := dialer{ClientID: fmt.Sprintf("broker-%d-fetcher-%d-mirror-%s", f.cfg.NodeID, f.key.ID, f.cfg.Mirror),
		TLS: f.cfg.TLS, SASL: f.cfg.SASL, ConnectTimeout: f.cfg.ConnectTimeout, RequestTimeout: f.cfg.RequestTimeout + f.cfg.MaxWait}
	c, err := d.dial(f.ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("source broker %d: %w", f.key.Broker, err)
	}
	f.conn = c
	return c, nil
}

func (f *Fetcher) closeConn() {
	if f.conn != nil {
		f.conn.close()
		f.conn = nil
	}
	f.next = nil   // its answer is gone with the connection
	f.sess.reset() // a session lives on its connection's broker, not on the connection; a new one is safe either way
}

// waiter calls each round's waits, in order, until rounds is closed.
func (f *Fetcher) waiter() {
	for waits := range f.rounds {
		for _, wait := range waits {
			if err := wait(); err != nil {
				f.failed.Store(true)
				f.cfg.Log.Debug("mirror append", "source_broker", f.key.Broker, "err", err)
			}
		}
	}
}

// round is one Fetch: sent (unless the round before sent it already),
// the last round's appends waited for while it is at the source, then
// its answer applied. fetched is false when there was nothing to fetch.
func (f *Fetcher) round() (fetched bool, err error) {
	if f.next != nil && f.moved() {
		// The positions changed after the Fetch under way was sent: its
		// answer may start where a log no longer ends.
		if err := f.drop(); err != nil {
			return false, err
		}
	}
	if f.next == nil {
		if err := f.load(); err != nil {
			return false, err
		}
		if f.sess.len() == 0 && len(f.sess.forgotten) == 0 {
			return false, nil
		}
		if f.failed.Swap(false) {
			// An append of an earlier round failed after this round's
			// positions moved past it: Apply refuses the answers that
			// start past a log's end, and the positions are asked for
			// again.
			f.loaded = false
			if err := f.load(); err != nil {
				return false, err
			}
		}
		if err := f.send(); err != nil {
			return false, err
		}
	}
	resp, sent, err := f.receive()
	switch {
	case err != nil:
		return false, err
	case resp == nil:
		return true, nil // the session was lost: a full fetch next
	}
	f.t.Answered(sent, nil)
	return true, f.apply(resp)
}

// inflight is the Fetch sent and not answered yet.
type inflight struct {
	sent  time.Time
	epoch int32 // its SessionEpoch
}

// moved reports whether the positions may have changed other than by
// the fetcher's own appends since the Fetch under way was sent.
func (f *Fetcher) moved() bool {
	return !f.loaded || f.failed.Load() || f.t.Generation() != f.gen
}

// drop reads the answer to the Fetch under way and lets its records go:
// they are fetched again from the positions the target gives.
func (f *Fetcher) drop() error {
	resp, _, err := f.receive()
	if err == nil && resp != nil && len(resp.Topics) > 0 {
		f.cfg.Log.Debug("mirror fetch answer dropped: positions moved", "source_broker", f.key.Broker)
	}
	f.loaded = false
	return err
}

// send sends the next Fetch from the session's positions.
func (f *Fetcher) send() error {
	f.sizes.reserve()
	c, err := f.connect()
	if err != nil {
		return f.unreachable(err)
	}
	v, ok := c.version(kmsg.NewPtrFetchRequest())
	if !ok || v < 4 {
		f.closeConn()
		return fmt.Errorf("source broker %d does not serve Fetch v4 or later (record batches)", f.key.Broker)
	}
	req := f.sess.request(v, f.sizes.partition)
	req.MaxWaitMillis = int32(f.cfg.MaxWait.Milliseconds())
	req.MinBytes, req.MaxBytes = f.cfg.MinBytes, f.sizes.answer
	next := &inflight{sent: time.Now(), epoch: req.SessionEpoch}
	f.cfg.Requests.Add(1)
	if err := c.send(f.ctx, req); err != nil {
		return f.unreachable(err)
	}
	f.next = next
	f.version = v
	return nil
}

// receive reads the answer to the Fetch under way. resp is nil without
// an error when the source lost the session (a full fetch next); an
// answer with a top-level error is reported to the target and returned
// as the error.
func (f *Fetcher) receive() (resp *kmsg.FetchResponse, sent time.Time, err error) {
	next := f.next
	f.next = nil
	resp = kmsg.NewPtrFetchResponse()
	resp.SetVersion(f.version)
	if err := f.conn.recv(f.ctx, resp, &f.sizes.buf, f.sizes.grow); err != nil {
		return nil, next.sent, f.unreachable(err)
	}
	if !f.sess.answered(next.epoch, resp) {
		return nil, next.sent, nil
	}
	if resp.ErrorCode != 0 {
		err := fmt.Errorf("fetch from source broker %d: %w", f.key.Broker, kerr.ErrorForCode(resp.ErrorCode))
		f.t.Answered(next.sent, err)
		return nil, next.sent, err
	}
	return resp, next.sent, nil
}

// unreachable closes the connection after a failed exchange and reports
// it, unless the fetcher was stopped (an abandoned fetch is not the
// source's fault).
func (f *Fetcher) unreachable(err error) error {
	f.closeConn()
	if f.ctx.Err() != nil {
		return f.ctx.Err()
	}
	return f.t.Unreachable(err)
}

// apply hands each partition of an answer to the target and moves the
// positions of those appended to. The answer's bytes are the buffer's,
// which the next round reuses: the engine copies what it appends before
// Apply returns.
//
// When the answer carries records and nothing else (no partition error,
// no diverging epoch) the next Fetch is sent before the appends, from
// the positions after them: the source reads and sends the next answer
// while this one is appended, instead of waiting for a request. Should
// an append not happen, the next answer is dropped unread (round, moved)
// or refused by Apply (its log does not end where the answer starts).
func (f *Fetcher) apply(resp *kmsg.FetchResponse) error {
	parts, kept, bound, clean := f.trimAll(resp)
	// The next Fetch goes with this round's limits: adapt follows the
	// appends, as the buffer holds the answer until they are written.
	var sendErr error
	early := clean && kept > 0 && !f.throttled() && !f.failed.Load()
	if early {
		for _, a := range parts {
			if len(a.rp.RecordBatches) > 0 {
				f.sess.moved(a.pt, a.tr.last.LastOffset()+1, a.tr.last.PartitionLeaderEpoch)
			}
		}
		sendErr = f.send()
	}
	total, waits, errs := 0, []func() error(nil), []error(nil)
	for _, a := range parts {
		n, wait, err := f.t.Apply(a.p, a.rp)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s-%d: %w", a.p.Topic, a.p.Partition, err))
		}
		switch {
		case wait == nil && early && len(a.rp.RecordBatches) > 0:
			f.loaded = false // moved above, not appended: ask for the positions again
			continue
		case wait == nil:
			continue
		case !early:
			f.sess.moved(a.pt, a.tr.last.LastOffset()+1, a.tr.last.PartitionLeaderEpoch)
		}
		p := a.p
		waits = append(waits, func() error {
			if err := wait(); err != nil {
				return fmt.Errorf("%s-%d: %w", p.Topic, p.Partition, err)
			}
			return nil
		})
	}
	var rtt time.Duration
	if f.conn != nil {
		rtt = f.conn.rtt
	}
	if len(waits) > 0 {
		select {
		case f.rounds <- waits: // waits while the waiter is a round behind
		case <-f.ctx.Done():
			for _, wait := range waits { // stopped: called here, as the waiter may be gone
				wait()
			}
		}
	}
	f.sizes.adapt(total, bound, rtt)
	f.cfg.Bytes.Add(total)
	f.throttle(total)
	if err := errors.Join(append(errs, sendErr)...); err != nil {
		f.loaded = false
		return err
	}
	return nil
}

// answered is one partition of an answer, trimmed, with the position it
// was fetched from.
type answered struct {
	pt *part
	p  Partition // as sent
	rp *kmsg.FetchResponseTopicPartition
	tr trimmed
}

// trimAll trims each partition of an answer to whole batches not above
// its epoch. kept is the record bytes left, bound whether a partition
// was held back by its limit, clean that no partition carries an error
// or a diverging epoch.
func (f *Fetcher) trimAll(resp *kmsg.FetchResponse) (parts []answered, kept int, bound, clean bool) {
	clean = true
	for ti := range resp.Topics {
		t := &resp.Topics[ti]
		for i := range t.Partitions {
			rp := &t.Partitions[i]
			pt := f.sess.lookup(t, rp.Partition)
			if pt == nil {
				continue // forgotten meanwhile
			}
			clean = clean && rp.ErrorCode == 0 && rp.DivergingEpoch.Epoch < 0 && rp.DivergingEpoch.EndOffset < 0
			tr := trim(rp.RecordBatches, pt.LeaderEpoch)
			bound = bound || tr.whole >= int(pt.sentMax)/2 && tr.whole > 0 && rp.HighWatermark > tr.last.LastOffset()+1
			rp.RecordBatches = tr.keep
			kept += len(tr.keep)
			parts = append(parts, answered{pt: pt, p: pt.Partition, rp: rp, tr: tr})
		}
	}
	return parts, kept, bound, clean
}

// throttled reports whether mirror.replication.throttled.rate is set:
// the next Fetch then waits for the throttle's sleep.
func (f *Fetcher) throttled() bool {
	return f.cfg.Rate != nil && f.cfg.Rate() > 0
}

// throttle sleeps as long as n bytes take at the configured rate, or
// until the fetcher is stopped: at a low rate the sleep can be hours,
// and the mirror's source loop waits for a Stop.
func (f *Fetcher) throttle(n int) {
	if f.cfg.Rate == nil {
		return
	}
	rate := f.cfg.Rate()
	if rate <= 0 || n <= 0 {
		return
	}
	select {
	case <-f.ctx.Done():
	case <-time.After(time.Duration(float64(n) / float64(rate) * float64(time.Second))):
	}
}
