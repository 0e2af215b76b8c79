package mirror

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/wire"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// source is the source loop's state: the client to the source cluster
// (shared with the fetchers) and the source's metadata.
type source struct {
	mu sync.Mutex // guards cl
	cl *kgo.Client

	clusterID string // the source's, as first seen
	// mirrors says whether the source serves LastMirroredOffsets (nil:
	// not asked yet).
	mirrors  *bool
	meta     *kmsg.MetadataResponse
	metaAt   time.Time
	stale    atomic.Bool // a fetcher saw leadership move: refresh soon
	failures int         // consecutive failed refreshes (reconnect backoff)
}

// needsSource reports whether a partition in state s has a source side:
// one being prepared, copied or paused.
func needsSource(s mirrorstate.State) bool {
	switch s {
	case mirrorstate.Preparing, mirrorstate.Mirroring, mirrorstate.EpochFencing, mirrorstate.Pausing, mirrorstate.Paused:
		return true
	}
	return false
}

func (r *mirrorRun) sourceLoop() {
	defer func() {
		r.syncFetchers(nil)
		r.resetClient()
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
	parts := r.sortedParts(func(pt *ledPartition) bool { return needsSource(pt.state) })
	topics := []string{} // none: a mirror without topics still checks its source
	for _, pt := range parts {
		if !slices.Contains(topics, pt.topic) {
			topics = append(topics, pt.topic)
		}
	}
	if r.metaDue(topics) {
		if err := r.refresh(topics); err != nil {
			r.setTrouble(parts, err)
			return err
		}
	}
	if len(parts) == 0 {
		r.syncFetchers(nil)
		return nil
	}
	r.assignLeaders(parts)
	r.syncFetchers(parts)
	var errs []error
	for _, pt := range parts {
		if st, _ := r.state(pt.topicPartition); st == mirrorstate.Preparing {
			if err := r.prepare(pt); err != nil && r.ctx.Err() == nil {
				r.setTrouble([]*ledPartition{pt}, err)
				errs = append(errs, fmt.Errorf("prepare %s-%d: %w", pt.topic, pt.partition, err))
			}
		}
	}
	return errors.Join(errs...)
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
		if !slices.ContainsFunc(m.Topics, func(mt kmsg.MetadataResponseTopic) bool { return mt.Topic != nil && *mt.Topic == t }) {
			return true
		}
	}
	return r.src.stale.Load() && time.Since(r.src.metaAt) > r.p.cfg.Backoff
}

func (r *mirrorRun) markStale() {
	r.src.stale.Store(true)
	signal(r.srcWake)
}

// client returns the franz-go client to the source for the source loop
// (metadata, LastMirroredOffsets, ListOffsets), built from the mirror's
// configs (bootstrap.servers, security.protocol, SASL, TLS). The
// fetchers have their own (fetcher.client).
func (r *mirrorRun) client() (*kgo.Client, error) {
	r.src.mu.Lock()
	defer r.src.mu.Unlock()
	if r.src.cl != nil {
		return r.src.cl, nil
	}
	opts, err := clientOpts(r.configs, r.p.cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.ClientID(fmt.Sprintf("broker-%d-mirror-%s", r.p.Host().NodeID(), r.name)))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: source client: %w", r.name, err)
	}
	r.src.cl = cl
	return cl, nil
}

// resetClient closes the client: the next request builds a fresh one
// (fresh connections, fresh credentials).
func (r *mirrorRun) resetClient() {
	r.src.mu.Lock()
	defer r.src.mu.Unlock()
	if r.src.cl != nil {
		r.src.cl.Close()
		r.src.cl = nil
	}
}

// request sends req to the source (to broker id, or any broker if id <
// 0) with the request timeout.
func (r *mirrorRun) request(id int32, req kmsg.Request) (kmsg.Response, error) {
	cl, err := r.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.p.cfg.RequestTimeout)
	defer cancel()
	if id < 0 {
		return cl.Request(ctx, req)
	}
	return cl.Broker(int(id)).Request(ctx, req)
}

// sourceErr describes a failed request to the source: the source refused
// it with a Kafka error (wrong credentials, missing ACLs), or could not
// be reached at all.
func (r *mirrorRun) sourceErr(what string, err error) error {
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return fmt.Errorf("source cluster %s refused %s: %w", r.configs["bootstrap.servers"], what, err)
	}
	return fmt.Errorf("source cluster %s unreachable (%s): %v: %w", r.configs["bootstrap.servers"], what, err, wire.ErrMirrorSourceUnavailable)
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
		r.code = wire.ErrMirrorSourceUnavailable.Code
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
	}
}

// learnedEnd records the source's end offset of a partition, just learned.
func (r *mirrorRun) learnedEnd(pt *ledPartition, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pt.srcEnd, pt.srcEndAt, pt.trouble = end, time.Now(), ""
	if pt.dstLEO >= end {
		pt.lagMs, pt.caughtUpAt = 0, pt.srcEndAt
	} else if pt.lagMs == 0 {
		pt.lagMs = -1 // behind again: unknown until measured
	}
}

// refresh fetches the source's metadata for the mirror's topics (an
// empty list asks for none, not all), checks its cluster ID, and records
// the mirror's health.
func (r *mirrorRun) refresh(topics []string) error {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	resp, err := r.request(-1, req)
	if err != nil {
		err = r.sourceErr("the mirror's metadata request", err)
		r.setFailed(err)
		r.resetClient()
		return err
	}
	r.contacted()
	m := resp.(*kmsg.MetadataResponse)
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
	r.src.meta, r.src.metaAt = m, time.Now()
	r.src.stale.Store(false)
	r.setFailed(nil)
	return nil
}

// assignLeaders gives each partition its source leader and epoch from
// the metadata; a partition the source cannot serve now says why, and the
// metadata is asked again after a backoff.
func (r *mirrorRun) assignLeaders(parts []*ledPartition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pt := range parts {
		pt.leader, pt.leaderEpoch = -1, -1
		trouble := "the source's metadata does not list the partition"
		for _, t := range r.src.meta.Topics {
			if t.Topic == nil || *t.Topic != pt.topic {
				continue
			}
			if t.ErrorCode != 0 {
				trouble = fmt.Sprintf("source topic: %v", kerr.ErrorForCode(t.ErrorCode))
				break
			}
			for _, sp := range t.Partitions {
				switch {
				case sp.Partition != pt.partition:
				case sp.ErrorCode != 0 || sp.Leader < 0:
					trouble = fmt.Sprintf("source partition has no leader: %v", kerr.ErrorForCode(sp.ErrorCode))
				default:
					pt.leader, pt.leaderEpoch, trouble = sp.Leader, sp.LeaderEpoch, ""
				}
			}
		}
		if trouble == "" {
			pt.trouble = ""
			r.p.metrics.trackPart(r, pt)
		} else if pt.trouble != trouble {
			pt.trouble, pt.troubleAt = trouble, time.Now()
		}
	}
	if slices.ContainsFunc(parts, func(pt *ledPartition) bool { return pt.leader < 0 }) {
		r.src.stale.Store(true)
	}
}

// lastMirrorEpoch asks the source for the partition's last mirror epoch:
// the epoch its own mirroring of the topic stopped at, -1 if it never
// mirrored it (KIP-1279 "Log Convergence").
func (r *mirrorRun) lastMirrorEpoch(pt *ledPartition) (int32, error) {
	if r.src.mirrors == nil {
		resp, err := r.request(-1, kmsg.NewPtrApiVersionsRequest())
		if err != nil {
			return -1, r.sourceErr("ApiVersions", err)
		}
		serves := slices.ContainsFunc(resp.(*kmsg.ApiVersionsResponse).ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool {
			return k.ApiKey == wire.KeyLastMirroredOffsets
		})
		r.src.mirrors = &serves
	}
	if !*r.src.mirrors {
		return -1, nil // a source without mirroring (e.g. Apache Kafka) never mirrored the partition
	}
	req := &wire.LastMirroredOffsetsRequest{MirrorName: r.name, Topics: []wire.PartitionsTopic{{Name: pt.topic, Partitions: []int32{pt.partition}}}}
	resp, err := r.request(-1, req)
	if err != nil {
		return -1, r.sourceErr("LastMirroredOffsets", err)
	}
	lr := resp.(*wire.LastMirroredOffsetsResponse)
	if lr.ErrorCode != 0 {
		return -1, fmt.Errorf("last mirror epoch of %s-%d: %w", pt.topic, pt.partition, wire.ErrorForCode(lr.ErrorCode))
	}
	for _, t := range lr.Topics {
		for _, p := range t.Partitions {
			if t.Name == pt.topic && p.PartitionIndex == pt.partition {
				if p.ErrorCode != 0 {
					return -1, fmt.Errorf("last mirror epoch of %s-%d: %w", pt.topic, pt.partition, wire.ErrorForCode(p.ErrorCode))
				}
				return p.LastMirrorEpoch, nil
			}
		}
	}
	return -1, nil
}

// prepare is PREPARING: LME truncation. The log is cut at the start of
// the first epoch above the source's last mirror epoch (everything, when
// the source never mirrored the partition: scenario A); epoch-based
// truncation during fetch then finishes the convergence.
func (r *mirrorRun) prepare(pt *ledPartition) error {
	lme, err := r.lastMirrorEpoch(pt)
	if err != nil {
		return err
	}
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if st, _ := r.state(pt.topicPartition); st != mirrorstate.Preparing {
		return nil // stopped or paused meanwhile
	}
	ep, err := r.partition(pt)
	if err != nil {
		return err
	}
	to := int64(0)
	if lme >= 0 {
		if _, end := ep.EndOffsetForEpoch(lme); end >= 0 {
			to = end
		}
	}
	if to < ep.Offsets().LogEnd {
		r.log.Info("mirror LME truncation", "topic", pt.topic, "partition", pt.partition, "lme", lme, "offset", to)
		if err := r.truncate(pt, ep, to, fmt.Sprintf("last mirror epoch %d", lme)); err != nil {
			return r.fail(pt, fmt.Errorf("LME truncation to %d: %w", to, err))
		}
	}
	// The KIP's MIRRORING: every ISR member has truncated too. Waited
	// for without applyMu, so that the mirror's other partitions keep
	// being copied; nothing appends to this one while it is PREPARING.
	if rc, ok := r.p.Host().(plugin.ReplicaConvergence); ok {
		r.applyMu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, isrTruncationWait)
		err := rc.AwaitISRTruncated(ctx, pt.id, pt.partition)
		cancel()
		r.applyMu.Lock()
		if err != nil {
			return fmt.Errorf("waiting for the ISR to truncate to the last mirror epoch: %w", err)
		}
		if st, _ := r.state(pt.topicPartition); st != mirrorstate.Preparing {
			return nil
		}
	}
	r.setTrouble([]*ledPartition{pt}, nil)
	return r.setState(pt, mirrorstate.Mirroring, "")
}

// isrTruncationWait bounds one wait for the ISR to truncate; PREPARING
// is retried after it (a silent follower leaves the ISR meanwhile).
const isrTruncationWait = 5 * time.Second

// --- fetchers ---

// fetcherKey names a fetcher: KIP-1279's MirrorFetcherThread of a source
// broker (mirror.num.replica.fetchers of them per broker).
type fetcherKey struct {
	broker int32
	id     int
}

func (r *mirrorRun) fetcherOf(pt *ledPartition) fetcherKey {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s-%d", pt.topic, pt.partition)
	return fetcherKey{pt.leader, int(h.Sum32() % uint32(max(1, r.p.cfg.Fetchers)))}
}

// syncFetchers runs one fetcher for each source broker and fetcher id
// that leads some of parts, and stops the others.
func (r *mirrorRun) syncFetchers(parts []*ledPartition) {
	want := map[fetcherKey]bool{}
	r.mu.Lock()
	for _, pt := range parts {
		if pt.leader >= 0 {
			want[r.fetcherOf(pt)] = true
		}
	}
	var stale []*fetcher
	for k, f := range r.fetchers {
		if !want[k] {
			stale = append(stale, f)
			delete(r.fetchers, k)
		}
	}
	for k := range want {
		if r.fetchers[k] == nil {
			f := newFetcher(r, k)
			r.fetchers[k] = f
			go r.p.Contain(f.loop)
		}
	}
	r.mu.Unlock()
	for _, f := range stale {
		f.stop()
	}
}

// fetcher copies the MIRRORING partitions one source broker leads and
// keeps the source end offsets of its partitions, paused ones included,
// fresh.
type fetcher struct {
	r      *mirrorRun
	key    fetcherKey
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	stats  *fetcherStats
	// The fetcher goroutine's own:
	endsAt time.Time   // last refresh of end offsets and lag in ms
	cl     *kgo.Client // to the source, nil until the first fetch or after a failure
}

func newFetcher(r *mirrorRun, k fetcherKey) *fetcher {
	host, port := "", int32(0)
	if m := r.src.meta; m != nil {
		for _, b := range m.Brokers {
			if b.NodeID == k.broker {
				host, port = b.Host, b.Port
			}
		}
	}
	f := &fetcher{r: r, key: k, done: make(chan struct{}), stats: r.p.metrics.fetcherStats(r, k, host, port)}
	f.ctx, f.cancel = context.WithCancel(r.ctx)
	return f
}

func (f *fetcher) stop() {
	f.cancel()
	<-f.done
}

// client returns the fetcher's own client to the source: its client ID
// is the KIP's, broker-<id>-fetcher-<n>-mirror-<name>, so that the
// source can set a quota on each fetcher. A new one learns the source's
// brokers with a metadata request first.
func (f *fetcher) client() (*kgo.Client, error) {
	if f.cl != nil {
		return f.cl, nil
	}
	r := f.r
	opts, err := clientOpts(r.configs, r.p.cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.ClientID(fmt.Sprintf("broker-%d-fetcher-%d-mirror-%s", r.p.Host().NodeID(), f.key.id, r.name)))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: fetcher client: %w", r.name, err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, r.p.cfg.RequestTimeout)
	defer cancel()
	md := kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{}
	if _, err := cl.Request(ctx, md); err != nil {
		cl.Close()
		return nil, err
	}
	f.cl = cl
	return cl, nil
}

// request sends req to the fetcher's source broker; a failure closes the
// client, so that the next request reconnects (and relearns brokers).
func (f *fetcher) request(req kmsg.Request) (kmsg.Response, error) {
	cl, err := f.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.r.p.cfg.RequestTimeout)
	defer cancel()
	resp, err := cl.Broker(int(f.key.broker)).Request(ctx, req)
	if err != nil {
		f.closeClient()
	}
	return resp, err
}

func (f *fetcher) closeClient() {
	if f.cl != nil {
		f.cl.Close()
		f.cl = nil
	}
}

// mine reports whether pt is this fetcher's.
func (f *fetcher) mine(pt *ledPartition) bool {
	return pt.leader >= 0 && f.r.fetcherOf(pt) == f.key && needsSource(pt.state)
}

func (f *fetcher) loop() {
	defer close(f.done)
	defer f.closeClient()
	r := f.r
	for f.ctx.Err() == nil {
		parts := r.sortedParts(f.mine)
		var fetch []*ledPartition
		r.mu.Lock()
		for _, pt := range parts {
			if pt.state == mirrorstate.Mirroring {
				fetch = append(fetch, pt)
			}
		}
		r.mu.Unlock()
		var err error
		if len(fetch) > 0 {
			_, err = f.fetch(fetch)
		}
		f.refreshEnds(parts)
		wait := time.Second
		switch {
		case err != nil:
			if f.ctx.Err() == nil {
				r.log.Debug("mirror fetch", "source_broker", f.key.broker, "err", err)
			}
			wait = r.p.cfg.Backoff
		case len(fetch) > 0:
			continue // the fetch waited at the source (replica.fetch.wait.max.ms)
		}
		select {
		case <-f.ctx.Done():
		case <-time.After(wait):
		}
	}
}

// fetch sends one Fetch for parts to the fetcher's broker and applies
// what comes back.
func (f *fetcher) fetch(parts []*ledPartition) (int, error) {
	r := f.r
	req, epochs := r.fetchRequest(parts)
	if len(req.Topics) == 0 {
		return 0, errors.New("no partition of this fetcher is open here yet") // nothing to wait for at the source
	}
	resp, err := f.request(req)
	f.stats.requests.Inc()
	if err != nil {
		err = r.sourceErr(fmt.Sprintf("a fetch from broker %d", f.key.broker), err)
		r.setTrouble(parts, err)
		r.markStale()
		return 0, err
	}
	r.contacted()
	fr := resp.(*kmsg.FetchResponse)
	if fr.ErrorCode != 0 {
		err := fmt.Errorf("fetch from source broker %d: %w", f.key.broker, kerr.ErrorForCode(fr.ErrorCode))
		r.setTrouble(parts, err)
		return 0, err
	}
	total := 0
	var errs []error
	var appended []func() error
	for _, t := range fr.Topics {
		for i := range t.Partitions {
			rp := &t.Partitions[i]
			j := slices.IndexFunc(parts, func(pt *ledPartition) bool {
				return (pt.id == t.TopicID || pt.topic == t.Topic) && pt.partition == rp.Partition
			})
			if j < 0 {
				continue
			}
			pt := parts[j]
			n, wait, err := r.applyPartition(pt, rp, epochs[j])
			total += n
			if err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", pt.topic, pt.partition, err))
			}
			if wait != nil {
				appended = append(appended, func() error {
					if err := wait(); err != nil {
						return fmt.Errorf("%s-%d: %w", pt.topic, pt.partition, err)
					}
					return nil
				})
			}
		}
	}
	// The partitions' appends were all written before any is waited
	// for: their fsyncs are one round of the engine's syncer, not one
	// each, and no other fetcher of the mirror waits behind them.
	for _, wait := range appended {
		errs = append(errs, wait())
	}
	f.stats.bytes.Add(total)
	r.throttle(total)
	return total, errors.Join(errs...)
}

// fetchRequest is a Fetch for parts from their log ends, with the source
// leader epoch as CurrentLeaderEpoch (the source fences a stale one, and
// applyPartition drops batches above it: KAFKA-18723). It returns the
// epochs sent, in the order of parts.
func (r *mirrorRun) fetchRequest(parts []*ledPartition) (*kmsg.FetchRequest, []int32) {
	cfg := r.p.cfg
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(cfg.FetchMaxWait.Milliseconds())
	req.MinBytes = cfg.FetchMinBytes
	req.MaxBytes = cfg.FetchRespMaxBytes
	req.SessionEpoch = -1
	epochs := make([]int32, len(parts))
	for i, pt := range parts {
		r.mu.Lock()
		epoch, logStartTo := pt.leaderEpoch, pt.logStartTo
		r.mu.Unlock()
		epochs[i] = epoch
		ep, err := r.partition(pt)
		if err != nil {
			continue
		}
		offs := ep.Offsets()
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = pt.partition
		rp.CurrentLeaderEpoch = epoch
		rp.FetchOffset = max(offs.LogEnd, logStartTo)
		rp.LastFetchedEpoch = -1
		if offs.LogEnd > offs.LogStart && logStartTo < 0 {
			rp.LastFetchedEpoch = ep.EpochAt(offs.LogEnd - 1)
		}
		rp.PartitionMaxBytes = cfg.FetchMaxBytes
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = pt.topic, pt.id
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	return req, epochs
}

// applyPartition applies one partition of a fetch response: truncation on
// a diverging epoch or a log start past our end, then the batches,
// appended unchanged. It works only on a partition still MIRRORING, with
// applyMu held. The append is written before it returns; wait (nil when
// nothing was appended) waits until it is durable and finishes the
// partition's bookkeeping, without applyMu, so that the fetch waits
// for its partitions' fsyncs together.
func (r *mirrorRun) applyPartition(pt *ledPartition, rp *kmsg.FetchResponseTopicPartition, reqEpoch int32) (n int, wait func() error, err error) {
	switch rp.ErrorCode {
	case 0:
	case kerr.OffsetOutOfRange.Code:
		return 0, nil, r.outOfRange(pt)
	default:
		err := fmt.Errorf("source partition: %w", kerr.ErrorForCode(rp.ErrorCode))
		r.setTrouble([]*ledPartition{pt}, err)
		r.markStale() // leadership or the topic changed on the source
		return 0, nil, err
	}
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
		return 0, nil, nil // taken from the fetcher meanwhile
	}
	ep, err := r.partition(pt)
	if err != nil {
		return 0, nil, err
	}
	r.learnedEnd(pt, rp.HighWatermark)
	if d := rp.DivergingEpoch; d.Epoch >= 0 || d.EndOffset >= 0 {
		// Epoch-based truncation: our last epoch ends earlier on the
		// source (an unclean election there, or a failback).
		_, end := ep.EndOffsetForEpoch(d.Epoch)
		to := min(d.EndOffset, end)
		if end < 0 {
			to = d.EndOffset
		}
		r.log.Info("mirror epoch truncation", "topic", pt.topic, "partition", pt.partition, "epoch", d.Epoch, "offset", to)
		if err := r.truncate(pt, ep, to, fmt.Sprintf("diverging epoch %d", d.Epoch)); err != nil {
			return 0, nil, r.fail(pt, fmt.Errorf("epoch truncation to %d: %w", to, err))
		}
		return 1, nil, nil
	}
	batches := notAbove(completeBatches(rp.RecordBatches), reqEpoch)
	if len(batches) == 0 {
		r.caughtUp(pt, ep)
		return 0, nil, nil
	}
	appended := ep.AppendAsync(r.ctx, &engine.AppendRequest{Topic: pt.topic, TopicID: pt.id, Partition: pt.partition,
		Origin: engine.OriginMirror, Records: batches, Acks: -1})
	return len(batches), func() error {
		_, err := appended()
		switch {
		case errors.Is(err, wire.ErrMirrorLeaderEpochExceeded):
			r.scheduleBump(pt.topic, pt.partition, maxBatchEpoch(batches))
			return r.setState(pt, mirrorstate.EpochFencing, "")
		case errors.Is(err, engine.ErrUnexpectedAppendOffset):
			return err // our log moved meanwhile: fetch again from its end
		case err != nil:
			if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
				return nil // the validator saw it taken away first
			}
			return r.fail(pt, fmt.Errorf("append mirrored batches: %w", err))
		}
		r.mu.Lock()
		logStartTo := pt.logStartTo
		pt.logStartTo = -1
		r.mu.Unlock()
		if logStartTo >= 0 {
			// The log changes only with applyMu held, and while
			// the partition is still MIRRORING.
			r.applyMu.Lock()
			if st, _ := r.state(pt.topicPartition); st == mirrorstate.Mirroring {
				if _, err := ep.DeleteRecords(logStartTo); err != nil {
					r.log.Warn("mirror: move log start", "topic", pt.topic, "partition", pt.partition, "err", err)
				}
			}
			r.applyMu.Unlock()
		}
		r.caughtUp(pt, ep)
		return nil
	}, nil
}

// caughtUp records the partition's log end after an apply, and whether it
// holds all of the source's end offset last learned.
func (r *mirrorRun) caughtUp(pt *ledPartition, ep *engine.Partition) {
	leo := ep.Offsets().LogEnd
	r.mu.Lock()
	defer r.mu.Unlock()
	pt.dstLEO = leo
	if leo >= pt.srcEnd {
		pt.lagMs, pt.caughtUpAt = 0, pt.srcEndAt
	}
}

// notAbove keeps the leading batches whose partition leader epoch is at
// most epoch (all of them for epoch -1): a late response must not append
// batches of an epoch newer than the one the fetch was sent for
// (KAFKA-18723).
func notAbove(b []byte, epoch int32) []byte {
	if epoch < 0 {
		return b
	}
	return b[:eachHeader(b, func(h engine.BatchHeader) bool { return h.PartitionLeaderEpoch <= epoch })]
}

// listOffsets asks a source broker for one timestamp's offsets of parts.
func (r *mirrorRun) listOffsets(broker int32, ts int64, parts []*ledPartition) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	idx := map[string]int{}
	for _, pt := range parts {
		i, ok := idx[pt.topic]
		if !ok {
			i = len(req.Topics)
			idx[pt.topic] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = pt.topic
			req.Topics = append(req.Topics, rt)
		}
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = pt.partition, ts, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, lp)
	}
	resp, err := r.request(broker, req)
	if err != nil {
		return nil, r.sourceErr(fmt.Sprintf("ListOffsets to broker %d", broker), err)
	}
	r.contacted()
	out := map[topicPartition]kmsg.ListOffsetsResponseTopicPartition{}
	for _, rt := range resp.(*kmsg.ListOffsetsResponse).Topics {
		for _, rp := range rt.Partitions {
			out[topicPartition{rt.Topic, rp.Partition}] = rp
		}
	}
	return out, nil
}

// outOfRange handles OFFSET_OUT_OF_RANGE: below the source's log start
// (retention moved it), the log is emptied and restarts at the source's
// start; above the source's end (an unclean election lost records), the
// log is cut to the source's end. The source is asked first, without
// applyMu: a failover never waits for the source.
func (r *mirrorRun) outOfRange(pt *ledPartition) error {
	r.mu.Lock()
	leader := pt.leader
	r.mu.Unlock()
	var start, end int64
	for _, ts := range []int64{-2, -1} {
		offs, err := r.listOffsets(leader, ts, []*ledPartition{pt})
		if err != nil {
			return err
		}
		lp, ok := offs[pt.topicPartition]
		if !ok {
			return fmt.Errorf("list offsets: malformed response")
		}
		if lp.ErrorCode != 0 {
			return fmt.Errorf("list offsets: %w", kerr.ErrorForCode(lp.ErrorCode))
		}
		if ts == -2 {
			start = lp.Offset
		} else {
			end = lp.Offset
		}
	}
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if st, _ := r.state(pt.topicPartition); st != mirrorstate.Mirroring {
		return nil
	}
	ep, err := r.partition(pt)
	if err != nil {
		return err
	}
	switch leo := ep.Offsets().LogEnd; {
	case leo < start:
		r.log.Info("mirror: source log start is past our end; restarting there", "topic", pt.topic, "partition", pt.partition, "start", start)
		if err := ep.Truncate(0); err != nil {
			return err
		}
		r.mu.Lock()
		pt.logStartTo = start
		r.mu.Unlock()
	case leo > end:
		if err := r.truncate(pt, ep, end, "the source's log ends earlier"); err != nil {
			return r.fail(pt, fmt.Errorf("truncation to the source's end %d: %w", end, err))
		}
	}
	return nil
}

// refreshEnds keeps the source end offsets of the fetcher's paused
// partitions fresh (they are not fetched) and measures the lag in
// milliseconds of those behind, at most once a second.
func (f *fetcher) refreshEnds(parts []*ledPartition) {
	if time.Since(f.endsAt) < time.Second {
		return
	}
	f.endsAt = time.Now()
	r := f.r
	var paused, behind []*ledPartition
	r.mu.Lock()
	for _, pt := range parts {
		switch {
		case pt.state == mirrorstate.Paused || pt.state == mirrorstate.Pausing:
			paused = append(paused, pt)
		case pt.srcEnd > pt.dstLEO:
			behind = append(behind, pt)
		}
	}
	r.mu.Unlock()
	if len(paused) > 0 {
		offs, err := r.listOffsets(f.key.broker, -1, paused)
		if err != nil {
			r.setTrouble(paused, err)
		}
		for _, pt := range paused {
			if lp, ok := offs[pt.topicPartition]; ok && lp.ErrorCode == 0 {
				if ep, err := r.partition(pt); err == nil {
					r.mu.Lock()
					pt.dstLEO = ep.Offsets().LogEnd
					r.mu.Unlock()
				}
				r.learnedEnd(pt, lp.Offset)
			}
		}
		behind = append(behind, paused...)
	}
	r.measureLagMs(f.key.broker, behind)
}

// measureLagMs sets the lag in milliseconds of the partitions that are
// behind their source: the source's newest record time (ListOffsets
// MAX_TIMESTAMP, KIP-734) minus the destination's (its log's max
// timestamp), that is how much newer the newest unmirrored record is
// than everything mirrored so far. Record time, not wall-clock time: a
// quiet source with a stalled mirror does not look worse by the minute,
// and a busy one that is seconds behind shows those seconds. A
// destination log still empty keeps the previous value.
func (r *mirrorRun) measureLagMs(broker int32, parts []*ledPartition) {
	r.mu.Lock()
	parts = slices.DeleteFunc(slices.Clone(parts), func(pt *ledPartition) bool { return pt.srcEnd <= pt.dstLEO })
	r.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	offs, err := r.listOffsets(broker, -3, parts)
	if err != nil {
		return // the fetches report the source's health
	}
	for _, pt := range parts {
		lp, ok := offs[pt.topicPartition]
		if !ok || lp.ErrorCode != 0 || lp.Offset < 0 {
			continue
		}
		ep, err := r.partition(pt)
		if err != nil {
			continue
		}
		if _, dstTs, _, ok := ep.MaxTimestamp(); ok {
			r.mu.Lock()
			if pt.srcEnd > pt.dstLEO {
				pt.lagMs = max(1, lp.Timestamp-dstTs)
			}
			r.mu.Unlock()
		}
	}
}

// completeBatches returns the leading complete record batches of b: a
// fetch response may end with a partial batch.
func completeBatches(b []byte) []byte {
	return b[:eachHeader(b, func(engine.BatchHeader) bool { return true })]
}

// throttle sleeps as long as n bytes take at mirror.replication.throttled.rate.
func (r *mirrorRun) throttle(n int) {
	rate := r.p.throttledRate()
	if rate <= 0 || n <= 0 {
		return
	}
	select {
	case <-r.ctx.Done():
	case <-time.After(time.Duration(float64(n) / float64(rate) * float64(time.Second))):
	}
}
