package mirror

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/apply"
	"github.com/tandem-kafka/tandem/plugins/mirror/fetch"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/source"
	"github.com/tandem-kafka/tandem/plugins/mirror/statestore"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// mirrorRun is one mirror's work on this broker, in goroutines that never
// wait for each other's I/O:
//
//   - the control loop follows the partition states in __mirror_state and
//     does everything that needs only this cluster: pausing, epoch bumps,
//     and the failover sequence (STOPPING). It never talks to the source,
//     so that a failover works with the source gone.
//   - the source loop (source.go, over the connection of
//     plugins/mirror/source) keeps the source's metadata, prepares
//     new partitions (LME truncation) and runs one fetcher per source
//     broker, KIP-1279's MirrorFetcherThread (plugins/mirror/fetch;
//     the run's side of it is fetchtarget.go, and what an answer does
//     to a partition plugins/mirror/apply's, applytarget.go here).
//
// The fetchers and the source loop change a partition's log only with
// applyMu held and only while the partition is in the state they work
// on; the control loop takes applyMu once after a partition left that
// state, after which nothing but the control loop writes to it.
type mirrorRun struct {
	p       *Plugin
	log     *slog.Logger
	name    string
	configs map[string]string
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	wake    chan struct{} // the control loop
	srcWake chan struct{} // the source loop

	applyMu sync.Mutex
	src     sourceState   // the source loop's own state
	gen     atomic.Uint64 // fetch.Target.Generation: see changed
	// written counts the states the loops wrote and took in (setState,
	// setStates); a partition's writtenAt is the count at its last one.
	// The control loop's read of persisted states can be older than such
	// a write: read before it, taken in after it. syncPart then keeps
	// the state written, which would otherwise go back (MIRRORING to
	// PREPARING, whose truncation to the source's last mirror epoch
	// removes what was mirrored).
	written atomic.Uint64

	ctl control // the control loop's own

	mu       sync.Mutex // guards what follows; never held across I/O
	failed   string     // why the source cannot be used ("" if it can)
	code     int16
	contact  time.Time // the source's last answer
	parts    map[topicPartition]*ledPartition
	bumps    map[topicPartition]int32 // scheduled proactive bumps: source epoch seen
	fetchers map[fetch.Key]*fetch.Fetcher
}

// topicPartition names a partition of a mirror whose name is known.
type topicPartition = mirrorstate.TopicPartition

// ledPartition is a mirror partition this broker leads. Its
// topicPartition names it here; src is its topic's name on the source
// (the same unless the mirror has a mirror.topic.prefix), which every
// request to the source uses.
type ledPartition struct {
	topicPartition
	src      string
	id       uuid.UUID
	state    mirrorstate.State
	reason   string // of a FAILED state
	stopDone bool   // STOPPING work done; waits for the topic's other partitions
	// writtenAt is mirrorRun.written when a loop last took in a state it
	// wrote (0: never).
	writtenAt uint64

	// What the source loop and the fetchers last learned.
	leader      int32     // the source's leader (-1: unknown)
	leaderEpoch int32     // its leader epoch (-1: unknown)
	trouble     string    // why the partition cannot be copied now ("" when it can)
	troubleAt   time.Time // since when
	cutOff      bool      // trouble is the source's: unreachable, or no leader there (cutOff in truth.go)
	// progress is what the fetchers' answers (the apply stage) and the
	// lag measure (measureLagMs) record of the copy.
	progress apply.Progress
	savedAt  int64     // progress.CaughtUpAt as last persisted (CompleteAt), Unix ms
	fetchKey fetch.Key // the fetcher of leader

	// The fetcher whose session holds the partition (nil: none), and
	// since when: its answers that leave the partition out say the
	// source has nothing new for it (endAt).
	fetcher      *fetchTarget
	fetchedSince time.Time
}

// endAt is when srcEnd was last known to be the source's end: learned
// from the partition's last answer, or confirmed by a later answer of
// its fetcher's session that left it out (nothing new; KIP-227). r.mu
// is held.
func (pt *ledPartition) endAt() time.Time {
	at := pt.progress.SrcEndAt
	if f := pt.fetcher; f != nil && pt.progress.SrcEnd >= 0 && pt.trouble == "" && f.trouble == "" &&
		f.answeredAt.After(pt.fetchedSince) && f.answeredAt.After(at) {
		at = f.answeredAt
	}
	return at
}

// completeAt is when the log last held everything the source had
// (CompleteAt); r.mu is held.
func (pt *ledPartition) completeAt() time.Time {
	at := pt.progress.CaughtUpAt
	if pt.progress.SrcEnd >= 0 && pt.progress.DstLEO >= pt.progress.SrcEnd {
		if e := pt.endAt(); e.After(at) {
			at = e
		}
	}
	return at
}

// troubleNow is why the partition cannot be copied now, and since when:
// its own trouble, or its fetcher's. r.mu is held.
func (pt *ledPartition) troubleNow() (string, time.Time) {
	if pt.trouble == "" && pt.fetcher != nil && pt.fetcher.trouble != "" {
		return pt.fetcher.trouble, pt.fetcher.troubleAt
	}
	return pt.trouble, pt.troubleAt
}

// cutOffNow reports whether the trouble troubleNow tells is the
// source's (cutOff in truth.go); r.mu is held.
func (pt *ledPartition) cutOffNow() bool {
	if pt.trouble == "" && pt.fetcher != nil && pt.fetcher.trouble != "" {
		return pt.fetcher.cutOff
	}
	return pt.trouble != "" && pt.cutOff
}

// view is a copy of pt with the times and trouble its fetcher adds
// (endAt, completeAt, troubleNow); r.mu is held.
func (pt *ledPartition) view() ledPartition {
	v := *pt
	v.progress.SrcEndAt, v.progress.CaughtUpAt = pt.endAt(), pt.completeAt()
	v.trouble, v.troubleAt = pt.troubleNow()
	v.cutOff = pt.cutOffNow()
	v.fetcher = nil
	return v
}

// lag is the partition's lag in records against the source end offset
// last learned, -1 when that is unknown.
func (pt *ledPartition) lag() int64 {
	if pt.progress.SrcEnd < 0 {
		return -1
	}
	return max(0, pt.progress.SrcEnd-pt.progress.DstLEO)
}

func newRun(p *Plugin, m *metadata.Mirror) *mirrorRun {
	r := &mirrorRun{p: p, log: p.log.With("mirror", m.Name), name: m.Name, configs: maps.Clone(m.Configs),
		wake: make(chan struct{}, 1), srcWake: make(chan struct{}, 1),
		parts: map[topicPartition]*ledPartition{}, bumps: map[topicPartition]int32{}, fetchers: map[fetch.Key]*fetch.Fetcher{}}
	r.src.conn = &source.Conn{Mirror: m.Name, Configs: r.configs,
		Timeouts: mirrorcfg.Timeouts{Connect: p.cfg.ConnectTimeout, Request: p.cfg.RequestTimeout},
		ClientID: fmt.Sprintf("broker-%d-mirror-%s", p.Host().NodeID(), m.Name)}
	r.ctx, r.cancel = context.WithCancel(p.ctx)
	return r
}

// start runs the loops; stop ends them.
func (r *mirrorRun) start() {
	r.p.metrics.TrackRun(runMetrics{r})
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.p.Contain(r.controlLoop) }()
	go func() { defer r.wg.Done(); r.p.Contain(r.sourceLoop) }()
}

func (r *mirrorRun) stop() {
	r.cancel()
	r.wg.Wait()
	r.p.metrics.Forget(runMetrics{r})
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// poke wakes both loops: partition states changed.
func (r *mirrorRun) poke() {
	signal(r.wake)
	signal(r.srcWake)
}

func (r *mirrorRun) scheduleBump(topic string, partition int32, sle int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := topicPartition{Topic: topic, Partition: partition}
	r.bumps[k] = max(r.bumps[k], sle)
}

// state returns a partition's state as this run knows it: UNKNOWN for
// one this broker no longer leads in its latest metadata, whatever
// r.parts still says. syncParts forgets such a partition on the control
// loop, which may be held up for seconds by a write to __mirror_state
// (on a broker that was cut off, for as long as it was); a fetch must not
// append meanwhile, next to the follower fetcher that now copies the new
// leader into the same log (issue 44's TestPartitionMirror: the two
// fought over the log, and the replica never converged).
func (r *mirrorRun) state(k topicPartition) (mirrorstate.State, bool) {
	if !r.leads(k) {
		return mirrorstate.Unknown, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if pt := r.parts[k]; pt != nil {
		return pt.state, true
	}
	return mirrorstate.Unknown, false
}

// leads reports whether this broker leads partition k in its latest
// metadata image.
func (r *mirrorRun) leads(k topicPartition) bool {
	h, img := r.p.Host(), r.p.Image()
	if h == nil || img == nil {
		return false
	}
	t := img.Topics[k.Topic]
	return t != nil && int(k.Partition) < len(t.Partitions) && t.Partitions[k.Partition].Leader == h.NodeID()
}

// sortedParts returns the partitions in topic and partition order.
func (r *mirrorRun) sortedParts(keep func(*ledPartition) bool) []*ledPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*ledPartition
	for _, pt := range r.parts {
		if keep == nil || keep(pt) {
			out = append(out, pt)
		}
	}
	slices.SortFunc(out, func(a, b *ledPartition) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

func (r *mirrorRun) controlLoop() {
	for r.ctx.Err() == nil {
		if err := r.controlStep(); err != nil && r.ctx.Err() == nil {
			r.log.Warn("mirror control", "err", err)
		}
		select {
		case <-r.ctx.Done():
		case <-r.wake:
		case <-time.After(time.Second):
		}
	}
}

// controlStep does one round of the local work: follow the persisted
// states, pause, fence, bump and stop.
func (r *mirrorRun) controlStep() error {
	img := r.p.Image()
	m := img.Mirrors[r.name]
	if m == nil {
		return nil
	}
	if err := r.syncParts(img, m); err != nil {
		return err
	}
	r.mu.Lock()
	bumps := r.bumps
	r.bumps = map[topicPartition]int32{}
	r.mu.Unlock()
	parts := r.sortedParts(nil)
	var errs []error
	var due []*ledPartition // CompleteAt to persist
	var raise []epochBump
	for _, pt := range parts {
		st, _ := r.state(pt.topicPartition)
		var err error
		switch st {
		case mirrorstate.Pausing:
			r.release()
			if err = r.setState(pt, mirrorstate.Paused, ""); err == nil {
				err = r.saveComplete(pt, 0) // a paused partition learns nothing more
			}
		case mirrorstate.Stopping:
			err = r.stopPartition(pt)
		case mirrorstate.EpochFencing:
			// Above the source's epoch and the log's last, then MIRRORING.
			var ep plugin.Log
			if ep, err = r.partition(pt); err == nil {
				sle := max(bumps[pt.topicPartition], ep.EpochAt(ep.Offsets().LogEnd-1))
				raise = append(raise, epochBump{pt, bumpMinEpoch(sle), true})
			}
		case mirrorstate.Mirroring:
			if sle, ok := bumps[pt.topicPartition]; ok {
				raise = append(raise, epochBump{pt, bumpMinEpoch(sle), false})
			}
			if r.completeDue(pt, completeEvery) {
				due = append(due, pt)
			}
		}
		if err != nil && r.ctx.Err() == nil {
			errs = append(errs, fmt.Errorf("%s-%d (%s): %w", pt.Topic, pt.Partition, st, err))
		}
	}
	if err := r.bumpEpochs(raise); err != nil && r.ctx.Err() == nil {
		errs = append(errs, err)
	}
	if err := r.saveCompletes(due); err != nil && r.ctx.Err() == nil {
		errs = append(errs, err)
	}
	if err := r.finishStops(parts); err != nil {
		errs = append(errs, err)
	}
	signal(r.srcWake)
	return errors.Join(errs...)
}

// release waits until no fetcher is changing a log: a partition that left
// the fetchers' states before the call is not touched by them after it.
func (r *mirrorRun) release() {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
}

// syncParts brings r.parts in line with the mirror's topics and the
// partitions this broker leads, and reads each one's persisted state:
// all of them when the image changed, else only those of the
// __mirror_state shards that changed since last read (changedStates).
func (r *mirrorRun) syncParts(img *metadata.Image, m *metadata.Mirror) error {
	full := img != r.ctl.img
	if full {
		r.ctl.setWant(r.p, r.name, img, m)
	}
	want := r.ctl.want
	moved := false // partitions or their states changed: tell the fetchers
	defer func() {
		if moved {
			r.changed()
		}
	}()
	r.mu.Lock()
	for k := range r.parts {
		if _, ok := want[k]; !ok {
			delete(r.parts, k)
			r.p.metrics.ForgetPart(runMetrics{r}, k)
			moved = true
		}
	}
	r.mu.Unlock()
	if len(want) == 0 {
		return nil
	}
	if err := r.p.ensureStateTopic(r.ctx); err != nil {
		return err
	}
	readFrom := r.written.Load() // a write counted after this may be newer than the read
	states, err := r.changedStates(full)
	if err != nil {
		// The shards read before the error count as read (their marks
		// moved) though nothing read was taken in: read them all again
		// next step. Else a partition of a shard that does not change
		// again (one partition alone in it, new here after a leadership
		// move) never enters parts and never gets a fetcher
		// (TestPartitionMirror's orders/2, MIRRORING with lag -1).
		r.ctl.seen = nil
		return err
	}
	if statesRewrite != nil {
		statesRewrite(states)
	}
	err = r.startParts(img, m, states) // those that did not start are read again
	if statesRead != nil {
		statesRead(r, states)
	}
	for k, st := range states {
		changed, stale := r.syncPart(k, r.ctl.source[k.Topic], want[k], st, readFrom)
		moved = moved || changed
		if stale {
			// What the read missed is read again next step: the write
			// kept may be older than another one the read saw.
			r.ctl.seen = nil
			signal(r.wake)
		}
	}
	return err
}

// statesFail, set by tests only, is called by changedStates after it
// read the local shards and before it asks other brokers: an error fails
// the read there, as a coordinator that does not answer does.
var statesFail func(r *mirrorRun) error

// statesRewrite, set by tests only, may change the states read before
// startParts acts on them, as a read that missed a write would.
var statesRewrite func(states map[topicPartition]mirrorstate.PartitionState)

// statesRead, set by tests only, is called by the control loop between
// its read of persisted states and their taking in.
var statesRead func(r *mirrorRun, states map[topicPartition]mirrorstate.PartitionState)

// startParts moves the partitions of states that start (again) to
// PREPARING, in one batch: a new mirror partition, or one added again
// (failback). A STOPPED partition whose stop img does not show yet
// (another broker finished the topic a moment ago) is not. A partition
// whose write failed is dropped from states (read again next step).
func (r *mirrorRun) startParts(img *metadata.Image, m *metadata.Mirror, states map[topicPartition]mirrorstate.PartitionState) error {
	var ups []statestore.Update
	for k, st := range states {
		if stopped := m.Topics[k.Topic].Stopped; !stopped && (st.State == mirrorstate.Unknown || st.State == mirrorstate.Stopped && int64(img.Index) >= st.StopIndex) {
			ups = append(ups, statestore.Update{Partition: k, TopicID: r.ctl.want[k], Apply: func(s *mirrorstate.PartitionState) error {
				// Only from the state read: one that moved since (a
				// MIRRORING partition, under a read that missed it) would
				// go back through the last mirror epoch's truncation.
				if s.State != st.State || s.StopIndex != st.StopIndex {
					return fmt.Errorf("%s-%d is %s, not the %s read: %w", k.Topic, k.Partition, s.State, st.State, errStateMoved)
				}
				s.State, s.Reason, s.StopAt, s.StopEpoch, s.StopDone, s.StopIndex, s.Cut = mirrorstate.Preparing, "", -1, -1, false, 0, mirrorstate.Cut{At: -1}
				return nil
			}})
		}
	}
	if len(ups) == 0 {
		return nil
	}
	done, failed := r.p.store.WriteBatch(r.ctx, r.name, ups)
	maps.Copy(states, done)
	var err error
	for k, e := range failed {
		delete(states, k) // not taken in: read again next step
		if !errors.Is(e, errStateMoved) {
			err = e
		}
	}
	if len(failed) > 0 {
		r.ctl.seen = nil
		signal(r.wake)
	}
	return err
}

// errStateMoved refuses a write based on a state read that is no longer
// the saved one.
var errStateMoved = errors.New("the saved state moved since it was read")

// syncPart takes in one partition's persisted state, read when
// r.written was readFrom; changed says the partition is new here or its
// state moved, stale that a loop wrote the partition's state since
// readFrom, which is kept.
func (r *mirrorRun) syncPart(k topicPartition, src string, id uuid.UUID, st mirrorstate.PartitionState, readFrom uint64) (changed, stale bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pt := r.parts[k]
	if pt == nil {
		pt = &ledPartition{topicPartition: k, src: src, id: id, leader: -1, leaderEpoch: -1, progress: apply.NewProgress()}
		r.parts[k] = pt
		changed = true
	}
	if pt.writtenAt > readFrom {
		return changed, true
	}
	if pt.state != st.State {
		pt.stopDone, changed = false, true
	}
	if st.State == mirrorstate.Stopping && st.StopDone {
		pt.stopDone = true // done by this partition's earlier leader
	}
	pt.state, pt.reason = st.State, st.Reason
	if pt.progress.CaughtUpAt.IsZero() && st.CompleteAt > 0 { // a restart: as last persisted
		pt.progress.CaughtUpAt, pt.savedAt = time.UnixMilli(st.CompleteAt), st.CompleteAt
	}
	if ep := r.p.Host().Partition(id, k.Partition); ep != nil {
		pt.progress.DstLEO = ep.Offsets().LogEnd
	}
	return changed, false
}

// control is what the control loop keeps between its steps: the
// partitions it wants as of an image, grouped by their __mirror_state
// shard, and the version of each local shard as it last read it.
type control struct {
	img    *metadata.Image
	want   map[topicPartition]uuid.UUID
	source map[string]string // the wanted topics' names on the source
	shards map[int32][]topicPartition
	seen   map[int32]statestore.Mark
	// remoteSeen are the marks of the shards other brokers coordinate,
	// as they last answered them.
	remoteSeen map[int32]mirrorproto.ShardMark
}

// readRemoteShards reads from coordinator node the states of the wanted
// partitions of shards that changed since the marks it last gave
// (ReadMirrorStates KnownShards); those it could not read go to missing.
func (r *mirrorRun) readRemoteShards(node int32, shards []int32, out map[topicPartition]mirrorstate.PartitionState, missing map[topicPartition]uuid.UUID) {
	c := &r.ctl
	req := &mirrorproto.ReadMirrorStatesRequest{MirrorName: r.name, NeedPartitionStates: true}
	idx := map[string]int{}
	for _, shard := range shards {
		if mk, ok := c.remoteSeen[shard]; ok {
			req.KnownShards = append(req.KnownShards, mk)
		}
		for _, k := range c.shards[shard] {
			missing[k] = c.want[k]
			i, ok := idx[k.Topic]
			if !ok {
				i = len(req.Topics)
				idx[k.Topic] = i
				req.Topics = append(req.Topics, mirrorproto.PartitionsTopic{Name: k.Topic, TopicID: c.want[k]})
			}
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, k.Partition)
		}
	}
	resp, err := r.p.store.Send(r.ctx, node, req)
	if err != nil || resp.(*mirrorproto.ReadMirrorStatesResponse).ErrorCode != 0 {
		return
	}
	rr := resp.(*mirrorproto.ReadMirrorStatesResponse)
	for _, t := range rr.Topics {
		for _, sp := range t.Partitions {
			k := topicPartition{Topic: t.Name, Partition: sp.PartitionIndex}
			if id, ok := c.want[k]; ok && sp.ErrorCode == 0 {
				out[k] = statestore.StateOf(&sp, id)
				delete(missing, k)
			}
		}
	}
	for _, mk := range rr.Shards {
		if known, ok := c.remoteSeen[mk.Shard]; ok && known == mk {
			for _, k := range c.shards[mk.Shard] { // left out: as last read
				delete(missing, k)
			}
		}
		c.remoteSeen[mk.Shard] = mk
	}
}

// setWant computes the mirror partitions this broker leads in img.
func (c *control) setWant(p *Plugin, mirror string, img *metadata.Image, m *metadata.Mirror) {
	c.img, c.want, c.shards, c.source = img, map[topicPartition]uuid.UUID{}, map[int32][]topicPartition{}, map[string]string{}
	me := p.Host().NodeID()
	for name, mt := range m.Topics {
		t := img.Topics[name]
		if t == nil || t.ID != mt.ID {
			continue
		}
		c.source[name] = mt.SourceName(name)
		for i, pp := range t.Partitions {
			if pp.Leader == me {
				k := topicPartition{Topic: name, Partition: int32(i)}
				c.want[k] = t.ID
				shard := p.PartitionFor(statestore.Key(mirror, t.ID, int32(i)))
				c.shards[shard] = append(c.shards[shard], k)
			}
		}
	}
}

// changedStates reads the persisted states of the wanted partitions
// that may have changed: every one when full, else those of the local
// shards whose version moved, and every one on a shard another broker
// coordinates (read from it each step).
func (r *mirrorRun) changedStates(full bool) (map[topicPartition]mirrorstate.PartitionState, error) {
	c := &r.ctl
	if full || c.seen == nil {
		c.seen, c.remoteSeen = map[int32]statestore.Mark{}, map[int32]mirrorproto.ShardMark{}
	}
	out := map[topicPartition]mirrorstate.PartitionState{}
	byNode := map[int32][]int32{} // shards other brokers coordinate
	for shard, keys := range c.shards {
		if err := r.p.store.ReadShardLocal(r.ctx, r.name, shard, keys, c.want, c.seen, out); err != nil {
			k := keys[0]
			leader, _ := r.p.store.Leader(statestore.Key(r.name, c.want[k], k.Partition))
			byNode[leader] = append(byNode[leader], shard)
		}
	}
	if statesFail != nil {
		if err := statesFail(r); err != nil {
			return nil, err
		}
	}
	remote := map[topicPartition]uuid.UUID{} // not answered: one by one
	for node, shards := range byNode {
		r.readRemoteShards(node, shards, out, remote)
	}
	for k, id := range remote {
		st, err := r.p.store.Read(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: k.Topic, Partition: k.Partition}, id)
		if err != nil {
			return nil, err
		}
		out[k] = st
	}
	return out, nil
}

// completeEvery is how often a mirroring partition persists when it last
// held all the source had (CompleteAt): what a consistent cut after a
// restart may count it complete up to, at most this much behind.
const completeEvery = 10 * time.Second

// completeDue reports whether the partition's CompleteAt moved by at
// least every since last persisted.
func (r *mirrorRun) completeDue(pt *ledPartition, every time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	complete := pt.completeAt()
	at := complete.UnixMilli()
	return !complete.IsZero() && at > pt.savedAt && at-pt.savedAt >= every.Milliseconds()
}

// saveComplete persists the partition's CompleteAt if it moved by at
// least every since last persisted.
func (r *mirrorRun) saveComplete(pt *ledPartition, every time.Duration) error {
	if !r.completeDue(pt, every) {
		return nil
	}
	r.mu.Lock()
	at := pt.completeAt().UnixMilli()
	r.mu.Unlock()
	if _, err := r.p.store.Write(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: pt.Topic, Partition: pt.Partition}, pt.id, func(s *mirrorstate.PartitionState) error {
		s.CompleteAt = max(s.CompleteAt, at)
		return nil
	}); err != nil {
		return err
	}
	r.mu.Lock()
	pt.savedAt = at
	r.mu.Unlock()
	return nil
}

// saveCompletes persists the CompleteAt of parts (Store.WriteBatch: a few
// writes every completeEvery for ten thousand quiet partitions, not ten
// thousand).
func (r *mirrorRun) saveCompletes(parts []*ledPartition) error {
	if len(parts) == 0 {
		return nil
	}
	var ups []statestore.Update
	at := map[topicPartition]int64{}
	r.mu.Lock()
	for _, pt := range parts {
		complete := pt.completeAt().UnixMilli()
		at[pt.topicPartition] = complete
		ups = append(ups, statestore.Update{Partition: pt.topicPartition, TopicID: pt.id, Apply: func(s *mirrorstate.PartitionState) error {
			s.CompleteAt = max(s.CompleteAt, complete)
			return nil
		}})
	}
	r.mu.Unlock()
	done, failed := r.p.store.WriteBatch(r.ctx, r.name, ups)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range done {
		if pt := r.parts[k]; pt != nil {
			pt.savedAt = max(pt.savedAt, at[k])
		}
	}
	for _, err := range failed {
		return err // tried again at the next step
	}
	return nil
}

// setState persists a partition's new state; the coordinator refuses
// transitions the KIP does not allow (a concurrent failover wins over a
// fetcher's EPOCH_FENCING, say).
func (r *mirrorRun) setState(pt *ledPartition, s mirrorstate.State, reason string) error {
	st, err := r.p.store.Write(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: pt.Topic, Partition: pt.Partition}, pt.id, func(st *mirrorstate.PartitionState) error {
		st.State, st.Reason = s, reason
		return nil
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	moved := pt.state != st.State
	pt.state, pt.reason, pt.writtenAt = st.State, st.Reason, r.written.Add(1)
	r.mu.Unlock()
	if moved {
		r.changed()
	}
	return nil
}

// fail records a local, non-retriable error as the partition's FAILED
// state.
func (r *mirrorRun) fail(pt *ledPartition, err error) error {
	if r.ctx.Err() != nil {
		return err // shutting down: not the partition's fault
	}
	r.log.Warn("mirror partition failed", "topic", pt.Topic, "partition", pt.Partition, "err", err)
	if serr := r.setState(pt, mirrorstate.Failed, err.Error()); serr != nil {
		return serr
	}
	return err
}

func (r *mirrorRun) partition(pt *ledPartition) (plugin.Log, error) {
	ep := r.p.Host().Partition(pt.id, pt.Partition)
	if ep == nil {
		return nil, fmt.Errorf("%s-%d is not hosted here: %w", pt.Topic, pt.Partition, kerr.NotLeaderForPartition)
	}
	return ep, nil
}

// epochBump is a partition's leader epoch to raise above minEpoch: an
// EPOCH_FENCING partition (then MIRRORING) or a proactive bump.
type epochBump struct {
	pt        *ledPartition
	minEpoch  int32
	mirroring bool
}

// bumpEpochs raises the epochs of bs, each topic's partitions in one
// request to the controller (an EPOCH_FENCING of a new mirror's thousands
// of partitions is a commit per topic, not one each), waits until the
// local partitions have them, and moves those that were EPOCH_FENCING to
// MIRRORING in one batch.
func (r *mirrorRun) bumpEpochs(bs []epochBump) error {
	byTopic := map[uuid.UUID][]epochBump{}
	for _, b := range bs {
		byTopic[b.pt.id] = append(byTopic[b.pt.id], b)
	}
	var errs []error
	var ready []statestore.Update
	for id, tbs := range byTopic {
		mins := make(map[int32]int32, len(tbs))
		for _, b := range tbs {
			mins[b.pt.Partition] = b.minEpoch
		}
		// Bounded: the control loop waits here, and while it does no
		// partition newly led here is taken in (bumpTimeout).
		ctx, cancel := r.bumpContext()
		epochs, err := r.p.Host().Metadata().BumpLeaderEpochs(ctx, id, mins)
		if err != nil {
			cancel()
			errs = append(errs, fmt.Errorf("bump the leader epochs of %d partitions of %s: %w", len(tbs), tbs[0].pt.Topic, err))
			continue
		}
		for _, b := range tbs {
			if err := r.awaitEpoch(ctx, b.pt, epochs[b.pt.Partition]); err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", b.pt.Topic, b.pt.Partition, err))
			} else if b.mirroring {
				ready = append(ready, moveFrom(b.pt, mirrorstate.EpochFencing, mirrorstate.Mirroring))
			}
		}
		cancel()
	}
	return errors.Join(append(errs, r.setStates(ready))...)
}

// bumpContext bounds an epoch bump, the controller's answer and the
// local partition taking the epoch, by mirror.request.timeout.ms. Under
// the run's context alone nothing did: a forwarded controller request
// gets its default deadline only from a context without one, so a
// request sent while this broker was cut from the controller waited on
// its connection for as long as TCP retried, and the control loop with
// it. A partition that became led here meanwhile was never taken in,
// never fetched (TestPartitionMirror: "orders/2: MIRRORING at 2524
// (source end 7710, lag -1)").
func (r *mirrorRun) bumpContext() (context.Context, context.CancelFunc) {
	if t := r.p.cfg.RequestTimeout; t > 0 {
		return context.WithTimeout(r.ctx, t)
	}
	return context.WithCancel(r.ctx)
}

// bumpEpoch asks the controller for a leader epoch above minEpoch and
// waits until the local partition has it.
func (r *mirrorRun) bumpEpoch(pt *ledPartition, minEpoch int32) error {
	ctx, cancel := r.bumpContext()
	defer cancel()
	epoch, err := r.p.bumpLeaderEpoch(ctx, pt.id, pt.Partition, minEpoch)
	if err != nil {
		return err
	}
	return r.awaitEpoch(ctx, pt, epoch)
}

// awaitEpoch waits until the local partition has leader epoch epoch, or
// until this broker no longer leads it: only a leader's partition takes
// the epochs of the metadata (a follower's keeps the one it had), so a
// bump answered after the leadership moved away is never seen here, and
// the control loop waited for it until the run ended.
func (r *mirrorRun) awaitEpoch(ctx context.Context, pt *ledPartition, epoch int32) error {
	ep, err := r.partition(pt)
	if err != nil {
		return err
	}
	for ep.Offsets().LeaderEpoch < epoch {
		if !r.leads(pt.topicPartition) {
			return fmt.Errorf("leader epoch %d: no longer led here: %w", epoch, kerr.NotLeaderForPartition)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("leader epoch %d not taken within the request timeout: %w", epoch, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
