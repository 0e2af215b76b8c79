package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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
		pt.cutOff = errors.Is(err, wire.ErrMirrorSourceUnavailable)
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
			// The source cannot serve it: cut off from its source.
			pt.trouble, pt.troubleAt, pt.cutOff = trouble, time.Now(), true
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
