package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorview"
	"github.com/tandem-kafka/tandem/plugins/mirror/source"
	"github.com/tandem-kafka/tandem/plugins/mirror/statestore"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// sourceState is the source loop's state: the connection to the source
// cluster (plugins/mirror/source; shared with the fetchers) and the
// source's metadata.
type sourceState struct {
	conn *source.Conn

	clusterID string // the source's, as first seen
	// meta, byTopic and metaAt are written with r.mu held: the
	// fetchers read meta (sourceBrokerAddr).
	meta     *kmsg.MetadataResponse
	byTopic  map[string]*kmsg.MetadataResponseTopic // meta's topics by name
	metaAt   time.Time
	stale    atomic.Bool   // a fetcher saw leadership move: refresh soon
	failures int           // consecutive failed refreshes (reconnect backoff)
	rtt      time.Duration // the least round trip to the source measured (0: none yet); r.mu

	// The run's partitions with a source side, as of generation gen
	// (mirrorRun.changed), their topics' source names, those PREPARING, and whether
	// their leaders were assigned from meta: a step walks them only
	// when one of those changed.
	gen       uint64
	parts     []*ledPartition
	topics    []string
	preparing []*ledPartition
	assigned  bool
}

func (r *mirrorRun) sourceLoop() {
	defer func() {
		r.syncFetchers(nil)
		r.src.conn.Reset()
	}()
	for r.ctx.Err() == nil {
		err := r.sourceStep()
		if err != nil && r.ctx.Err() == nil {
			r.log.Debug("mirror source", "err", err)
			r.src.failures++
			select { // the reconnect backoff, whatever pokes the loop
			case <-r.ctx.Done():
			case <-time.After(r.reconnectBackoff()):
			}
			continue
		}
		r.src.failures = 0
		select {
		case <-r.ctx.Done():
		case <-r.srcWake:
		case <-time.After(time.Second):
		}
	}
}

// reconnectBackoff is mirror.reconnect.backoff.ms, doubled for each
// consecutive failure up to one second (Kafka's reconnect.backoff.max.ms).
func (r *mirrorRun) reconnectBackoff() time.Duration {
	d := r.p.cfg.ReconnectBackoff
	for i := 1; i < r.src.failures && d < time.Second; i++ {
		d *= 2
	}
	return min(d, max(time.Second, r.p.cfg.ReconnectBackoff))
}

// sourceStep refreshes the source's metadata when it is due, gives each
// partition its source leader, runs a fetcher per source broker and
// prepares new partitions.
func (r *mirrorRun) sourceStep() error {
	src := &r.src
	if gen := r.gen.Load(); gen != src.gen || src.topics == nil {
		r.collectParts(gen)
	}
	parts := src.parts
	if r.metaDue(src.topics) {
		if err := r.refresh(src.topics); err != nil {
			r.setTrouble(parts, err)
			return err
		}
		src.assigned = false
	}
	if len(parts) == 0 {
		r.syncFetchers(nil)
		return nil
	}
	if !src.assigned {
		r.assignLeaders(parts)
		r.syncFetchers(parts)
		src.assigned = true
	}
	var preparing []*ledPartition
	for _, pt := range src.preparing {
		if st, _ := r.state(pt.topicPartition); st == mirrorstate.Preparing {
			preparing = append(preparing, pt)
		}
	}
	if len(preparing) == 0 || r.ctx.Err() != nil {
		return nil
	}
	if beforePrepare != nil {
		beforePrepare(r, preparing)
	}
	return r.prepare(preparing)
}

// beforePrepare, set by tests only, is called by the source loop with
// the partitions it is about to prepare.
var beforePrepare func(r *mirrorRun, parts []*ledPartition)

// collectParts gathers the run's partitions with a source side as of
// generation gen.
func (r *mirrorRun) collectParts(gen uint64) {
	src := &r.src
	src.gen, src.assigned = gen, false
	src.parts = r.sortedParts(func(pt *ledPartition) bool { return mirrorview.NeedsSource(pt.state) })
	src.topics, src.preparing = []string{}, nil // no topics: a mirror without topics still checks its source
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, pt := range src.parts {
		if i == 0 || pt.Topic != src.parts[i-1].Topic { // sorted by topic
			src.topics = append(src.topics, pt.src)
		}
		if pt.state == mirrorstate.Preparing {
			src.preparing = append(src.preparing, pt)
		}
	}
}

// metaDue reports whether the source's metadata must be fetched: never
// fetched, older than the refresh interval, not covering the topics, or
// stale (a fetcher saw leadership move) and a fetch backoff old.
func (r *mirrorRun) metaDue(topics []string) bool {
	m := r.src.meta
	if m == nil || time.Since(r.src.metaAt) > r.p.cfg.RefreshInterval {
		return true
	}
	for _, t := range topics {
		if r.src.byTopic[t] == nil {
			return true
		}
	}
	return r.src.stale.Load() && time.Since(r.src.metaAt) > r.p.cfg.Backoff
}

func (r *mirrorRun) markStale() {
	r.src.stale.Store(true)
	signal(r.srcWake)
}

func (r *mirrorRun) setFailed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.failed, r.code = "", 0
		return
	}
	r.code, r.failed = code(err)
	if r.code == kerr.UnknownServerError.Code {
		r.code = mirrorproto.ErrMirrorSourceUnavailable.Code
	}
}

// contacted records an answer from the source.
func (r *mirrorRun) contacted() {
	r.mu.Lock()
	r.contact = time.Now()
	r.mu.Unlock()
}

// setTrouble records why partitions cannot be copied now (nil: they can).
func (r *mirrorRun) setTrouble(parts []*ledPartition, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pt := range parts {
		switch {
		case err == nil:
			pt.trouble = ""
		case pt.trouble == "":
			pt.trouble, pt.troubleAt = err.Error(), time.Now()
		default:
			pt.trouble = err.Error()
		}
		pt.cutOff = errors.Is(err, mirrorproto.ErrMirrorSourceUnavailable)
	}
}

// refresh fetches the source's metadata for the mirror's topics (an
// empty list asks for none, not all), checks its cluster ID, and records
// the mirror's health.
func (r *mirrorRun) refresh(topics []string) error {
	m, err := r.src.conn.Metadata(r.ctx, topics)
	if err != nil {
		err = r.src.conn.Err("the mirror's metadata request", err)
		r.setFailed(err)
		r.src.conn.Reset()
		return err
	}
	r.contacted()
	id := ""
	if m.ClusterID != nil {
		id = *m.ClusterID
	}
	if want := r.p.Image().Mirrors[r.name]; want != nil && want.SourceClusterID != "" {
		r.src.clusterID = want.SourceClusterID // recorded by the metadata sync: survives restarts and config changes
	}
	if r.src.clusterID != "" && id != r.src.clusterID {
		err := fmt.Errorf("source cluster ID changed from %s to %s: mirroring halted: %w", r.src.clusterID, id, kerr.InconsistentClusterID)
		r.setFailed(err)
		return err
	}
	r.src.clusterID = id
	byTopic := make(map[string]*kmsg.MetadataResponseTopic, len(m.Topics))
	for i := range m.Topics {
		if t := &m.Topics[i]; t.Topic != nil {
			byTopic[*t.Topic] = t
		}
	}
	// The fetchers read meta for their brokers' addresses
	// (sourceBrokerAddr), with r.mu held.
	r.mu.Lock()
	r.src.meta, r.src.byTopic, r.src.metaAt = m, byTopic, time.Now()
	r.mu.Unlock()
	r.measureRTT()
	r.src.stale.Store(false)
	r.setFailed(nil)
	return nil
}

// measureRTT times a small request to the source on a connection the
// metadata request just used: the round trip decides how many fetchers a
// source broker gets (fetcherCount). The least measured counts: a busy
// broker only ever adds to a round trip.
func (r *mirrorRun) measureRTT() {
	rtt, err := r.src.conn.RTT(r.ctx)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.src.rtt == 0 || rtt < r.src.rtt {
		if fetchersFor(rtt) != fetchersFor(r.src.rtt) {
			r.src.assigned = false // partitions move to other fetchers
		}
		r.src.rtt = rtt
	}
}

// assignLeaders gives each partition its source leader and epoch from
// the metadata; a partition the source cannot serve now says why, and the
// metadata is asked again after a backoff.
func (r *mirrorRun) assignLeaders(parts []*ledPartition) {
	moved := false
	defer func() {
		if moved {
			r.changed()
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pt := range parts {
		was, wasEpoch := pt.leader, pt.leaderEpoch
		var trouble string
		pt.leader, pt.leaderEpoch, trouble = source.Leader(r.src.byTopic[pt.src], pt.Partition)
		if k := r.fetcherOf(pt); pt.leader != was || pt.leaderEpoch != wasEpoch || k != pt.fetchKey {
			pt.fetchKey, moved = k, true
		}
		if trouble == "" {
			pt.trouble = ""
			r.p.metrics.TrackPart(runMetrics{r}, pt.topicPartition, pt.src, pt.fetchKey, partMetrics{r, pt})
		} else if pt.trouble != trouble {
			// The source cannot serve it: cut off from its source.
			pt.trouble, pt.troubleAt, pt.cutOff = trouble, time.Now(), true
		}
	}
	if slices.ContainsFunc(parts, func(pt *ledPartition) bool { return pt.leader < 0 }) {
		r.src.stale.Store(true)
	}
}

// prepare is PREPARING for parts: LME truncation. Each log is cut at the
// start of the first epoch above the source's last mirror epoch
// (everything, when the source never mirrored the partition: scenario
// A); epoch-based truncation during fetch then finishes the convergence.
// The last mirror epochs are asked in one request and the MIRRORING
// states written in one batch: a mirror of ten thousand partitions
// starts in seconds, not in ten thousand round trips.
func (r *mirrorRun) prepare(parts []*ledPartition) error {
	lmes, err := source.LastMirrorEpochs(r.ctx, r.src.conn, parts)
	if err != nil && len(lmes) == 0 {
		r.setTrouble(parts, err)
		return err
	}
	errs := []error{err}
	var ready []statestore.Update
	for _, pt := range parts {
		lme, ok := lmes[pt.topicPartition]
		if !ok {
			r.setTrouble([]*ledPartition{pt}, err) // the source refused to say
			continue
		}
		done, err := r.truncateToLME(pt, lme)
		if err != nil && r.ctx.Err() == nil {
			r.setTrouble([]*ledPartition{pt}, err)
			errs = append(errs, fmt.Errorf("prepare %s-%d: %w", pt.Topic, pt.Partition, err))
		}
		if done {
			if afterTruncate != nil {
				afterTruncate(pt)
			}
			ready = append(ready, moveFrom(pt, mirrorstate.Preparing, mirrorstate.Mirroring))
		}
	}
	return errors.Join(append(errs, r.setStates(ready))...)
}

// moveFrom is the update of pt from state from to state to. A partition
// no longer in from keeps its state: it moved meanwhile (paused,
// stopped), and some moves back are allowed (PAUSED -> MIRRORING is a
// resume).
func moveFrom(pt *ledPartition, from, to mirrorstate.State) statestore.Update {
	return statestore.Update{Partition: pt.topicPartition, TopicID: pt.id, Apply: func(s *mirrorstate.PartitionState) error {
		if s.State != from {
			return fmt.Errorf("%s-%d is %s, not %s: %w", pt.Topic, pt.Partition, s.State, from, errStateMoved)
		}
		s.State, s.Reason = to, ""
		return nil
	}}
}

// afterTruncate, set by tests only, is called by prepare between a
// partition's LME truncation and its write of MIRRORING.
var afterTruncate func(pt *ledPartition)

// setStates writes a batch of state updates (Store.WriteBatch) and takes
// in the states written, as setState does one.
func (r *mirrorRun) setStates(ups []statestore.Update) error {
	if len(ups) == 0 {
		return nil
	}
	done, failed := r.p.store.WriteBatch(r.ctx, r.name, ups)
	moved := false
	r.mu.Lock()
	for k, st := range done {
		if pt := r.parts[k]; pt != nil {
			moved = moved || pt.state != st.State
			pt.state, pt.reason, pt.trouble, pt.writtenAt = st.State, st.Reason, "", r.written.Add(1)
		}
	}
	r.mu.Unlock()
	if moved {
		r.changed()
	}
	var errs []error
	for k, err := range failed {
		if !errors.Is(err, errStateMoved) { // the control loop reads the new state
			errs = append(errs, fmt.Errorf("%s-%d: %w", k.Topic, k.Partition, err))
		}
	}
	return errors.Join(errs...)
}

// truncateToLME cuts pt's log to its last mirror epoch lme and waits
// until the ISR has too (apply.Stage.TruncateToLME); done says the
// partition may move to MIRRORING.
func (r *mirrorRun) truncateToLME(pt *ledPartition, lme int32) (done bool, err error) {
	var awaitISR func(context.Context) error
	if rc, ok := r.p.Host().(plugin.ReplicaConvergence); ok {
		awaitISR = func(ctx context.Context) error { return rc.AwaitISRTruncated(ctx, pt.id, pt.Partition) }
	}
	return r.applier().TruncateToLME(r.ctx, pt, lme, awaitISR)
}

// listOffsets asks a source broker for one timestamp's offsets of parts,
// by their names here.
func (r *mirrorRun) listOffsets(broker int32, ts int64, parts []*ledPartition) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	out, err := source.ListOffsetsAt(r.ctx, r.src.conn, broker, parts, func(*ledPartition) int64 { return ts })
	if err != nil {
		return nil, r.src.conn.Err(fmt.Sprintf("ListOffsets to broker %d", broker), err)
	}
	r.contacted()
	return out, nil
}

// SourceName implements source.Named.
func (pt *ledPartition) SourceName() (topicPartition, string) { return pt.topicPartition, pt.src }
