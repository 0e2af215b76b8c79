package mirror

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
)

// run is one mirror's work on this broker: a franz-go client to the
// source cluster and the loop that prepares, fetches, fences, pauses and
// stops the mirror partitions this broker leads.
type run struct {
	p       *Plugin
	name    string
	configs map[string]string
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}

	cl        *kgo.Client
	clusterID string // the source's, as first seen
	// sourceMirrors says whether the source serves LastMirroredOffsets
	// (nil: not asked yet).
	sourceMirrors *bool
	lagAt         time.Time // last measureLagMs
	meta          *kmsg.MetadataResponse
	metaAt        time.Time

	mu     sync.Mutex // guards what DescribeMirrors and metrics read
	failed string     // why the mirror as a whole fails ("" if it does not)
	code   int16
	parts  map[tpKey]*part
	bumps  map[tpKey]int32 // scheduled proactive bumps: source epoch seen
	stats  fetchStats
}

type tpKey struct {
	topic     string
	partition int32
}

// part is a mirror partition this broker leads.
type part struct {
	tpKey
	id         [16]byte
	state      State
	reason     string
	srcHWM     int64
	dstLEO     int64
	lagMs      int64 // lag in milliseconds (see measureLagMs); 0 when caught up
	logStartTo int64 // source log start to move to after the next append (-1: none)
	stopDone   bool  // STOPPING work done; waits for the topic's other partitions
}

type fetchStats struct {
	bytes, requests, errors int64
	srcBroker               int32
}

func newRun(p *Plugin, m *raftmeta.Mirror) *run {
	r := &run{p: p, name: m.Name, configs: maps.Clone(m.Configs), done: make(chan struct{}), wake: make(chan struct{}, 1),
		parts: map[tpKey]*part{}, bumps: map[tpKey]int32{}}
	r.ctx, r.cancel = context.WithCancel(p.ctx)
	return r
}

func (r *run) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *run) stop() {
	r.cancel()
	<-r.done
}

func (r *run) scheduleBump(topic string, partition int32, sle int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := tpKey{topic, partition}
	r.bumps[k] = max(r.bumps[k], sle)
}

func (r *run) setFailed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.failed, r.code = "", 0
		return
	}
	r.code, r.failed = code(err)
	if r.code == kerr.UnknownServerError.Code {
		r.code = ErrMirrorSourceUnavailable.Code
	}
}

func (r *run) loop() {
	defer close(r.done)
	defer func() {
		if r.cl != nil {
			r.cl.Close()
		}
		r.p.metrics.forget(r)
	}()
	for r.ctx.Err() == nil {
		busy, err := r.step()
		if err != nil && r.ctx.Err() == nil {
			r.p.log.Debug("mirror step failed", "mirror", r.name, "err", err)
		}
		if busy && err == nil {
			continue
		}
		wait := time.Second
		if err != nil {
			wait = r.p.cfg.Backoff
		}
		select {
		case <-r.ctx.Done():
		case <-r.wake:
		case <-time.After(wait):
		}
	}
}

// client returns the franz-go client to the source, built from the
// mirror's configs (bootstrap.servers, security.protocol, SASL, TLS).
func (r *run) client() (*kgo.Client, error) {
	if r.cl != nil {
		return r.cl, nil
	}
	opts, err := clientOpts(r.configs, r.p.cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.ClientID("mirror-"+r.name))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: source client: %w", r.name, err)
	}
	r.cl = cl
	return cl, nil
}

var jaasField = regexp.MustCompile(`(\w+)\s*=\s*"([^"]*)"`)

func clientOpts(c map[string]string, cfg Config) ([]kgo.Opt, error) {
	var seeds []string
	for _, s := range strings.Split(c["bootstrap.servers"], ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("mirror config bootstrap.servers is empty: %w", kerr.InvalidConfig)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MaxVersions(ClientVersions()), kgo.DialTimeout(cfg.ConnectTimeout), kgo.RequestRetries(0),
		kgo.RetryTimeout(cfg.RequestTimeout), kgo.MetadataMinAge(100 * time.Millisecond)}
	proto := strings.ToUpper(c["security.protocol"])
	if strings.HasPrefix(proto, "SASL") {
		jaas := map[string]string{}
		for _, m := range jaasField.FindAllStringSubmatch(c["sasl.jaas.config"], -1) {
			jaas[m[1]] = m[2]
		}
		user, pass := jaas["username"], jaas["password"]
		switch mech := strings.ToUpper(c["sasl.mechanism"]); mech {
		case "", "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		default:
			return nil, fmt.Errorf("mirror config sasl.mechanism=%s is not supported: %w", mech, kerr.InvalidConfig)
		}
	}
	if strings.HasSuffix(proto, "SSL") {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		pem := []byte(c["ssl.truststore.certificates"])
		if loc := c["ssl.truststore.location"]; len(pem) == 0 && loc != "" {
			var err error
			if pem, err = os.ReadFile(loc); err != nil {
				return nil, fmt.Errorf("mirror config ssl.truststore.location: %v: %w", err, kerr.InvalidConfig)
			}
		}
		if len(pem) > 0 {
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("mirror config: no certificate in the truststore: %w", kerr.InvalidConfig)
			}
		}
		if alg, set := c["ssl.endpoint.identification.algorithm"]; set && alg == "" {
			tc.InsecureSkipVerify = true // the operator disabled hostname verification, as Kafka allows
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}

// request sends req to the source (to broker id, or any broker if id <
// 0) with the request timeout.
func (r *run) request(id int32, req kmsg.Request) (kmsg.Response, error) {
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

// refresh fetches the source's metadata for the mirror's topics, checks
// its cluster ID, and records the mirror's health.
func (r *run) refresh(topics []string) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	if req.Topics == nil {
		req.Topics = []kmsg.MetadataRequestTopic{}
	}
	resp, err := r.request(-1, req)
	if err != nil {
		// The source answered with a Kafka error (wrong credentials,
		// missing ACLs) or could not be reached at all.
		if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
			err = fmt.Errorf("source cluster %s refused the mirror: %w", r.configs["bootstrap.servers"], err)
		} else {
			err = fmt.Errorf("source cluster %s unreachable: %v: %w", r.configs["bootstrap.servers"], err, ErrMirrorSourceUnavailable)
		}
		r.setFailed(err)
		if r.cl != nil { // a fresh client (and fresh credentials) next time
			r.cl.Close()
			r.cl = nil
		}
		return err
	}
	m := resp.(*kmsg.MetadataResponse)
	id := ""
	if m.ClusterID != nil {
		id = *m.ClusterID
	}
	if want := r.p.image().Mirrors[r.name]; want != nil && want.SourceClusterID != "" {
		r.clusterID = want.SourceClusterID // recorded by the metadata sync: survives restarts and config changes
	}
	if r.clusterID != "" && id != r.clusterID {
		err := fmt.Errorf("source cluster ID changed from %s to %s: mirroring halted: %w", r.clusterID, id, kerr.InconsistentClusterID)
		r.setFailed(err)
		return err
	}
	r.clusterID = id
	r.meta, r.metaAt = m, time.Now()
	r.setFailed(nil)
	return nil
}

// sourceLeader returns the source leader of a partition, -1 if unknown.
func (r *run) sourceLeader(topic string, partition int32) int32 {
	if r.meta == nil {
		return -1
	}
	for _, t := range r.meta.Topics {
		if t.Topic != nil && *t.Topic == topic {
			for _, p := range t.Partitions {
				if p.Partition == partition && p.ErrorCode == 0 {
					return p.Leader
				}
			}
		}
	}
	return -1
}

// step does one round of work; busy reports that it moved data (so the
// loop goes on at once).
func (r *run) step() (busy bool, err error) {
	img := r.p.image()
	m := img.Mirrors[r.name]
	if m == nil {
		return false, nil
	}
	var topics []string
	for t, mt := range m.Topics {
		if !mt.Stopped {
			topics = append(topics, t)
		}
	}
	slices.Sort(topics)
	if r.meta == nil || time.Since(r.metaAt) > r.p.cfg.RefreshInterval || len(r.meta.Topics) != len(topics) {
		if err := r.refresh(topics); err != nil {
			return false, err
		}
	}
	if err := r.syncParts(img, m); err != nil {
		return false, err
	}
	r.mu.Lock()
	parts := slices.Collect(maps.Values(r.parts))
	bumps := r.bumps
	r.bumps = map[tpKey]int32{}
	r.mu.Unlock()
	slices.SortFunc(parts, func(a, b *part) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})

	var fetch []*part
	for _, pt := range parts {
		var err error
		switch pt.state {
		case Preparing:
			err = r.prepare(pt)
		case EpochFencing:
			err = r.bump(img, pt, bumps[pt.tpKey])
		case Pausing:
			err = r.setState(pt, Paused, "")
		case Stopping:
			err = r.stopPartition(pt)
		case Mirroring:
			if sle, ok := bumps[pt.tpKey]; ok {
				err = r.bumpEpoch(pt, bumpMinEpoch(sle))
			}
			fetch = append(fetch, pt)
		}
		if err != nil && r.ctx.Err() == nil {
			r.p.log.Warn("mirror partition", "mirror", r.name, "topic", pt.topic, "partition", pt.partition, "state", pt.state, "err", err)
		}
	}
	if err := r.finishStops(parts); err != nil {
		return false, err
	}
	if len(fetch) == 0 {
		return false, nil
	}
	busy, err = r.fetch(fetch)
	r.measureLagMs(fetch)
	return busy, err
}

// measureLagMs sets the lag in milliseconds of the partitions that are
// behind their source: the source's newest record time (ListOffsets
// MAX_TIMESTAMP, KIP-734) minus the destination's (its log's max
// timestamp), that is how much newer the newest unmirrored record is
// than everything mirrored so far. Record time, not wall-clock time: a
// quiet source with a stalled mirror does not look worse by the minute,
// and a busy one that is seconds behind shows those seconds. It costs a
// ListOffsets per source leader, so it runs at most once a second; a
// destination log still empty keeps the previous value.
func (r *run) measureLagMs(parts []*part) {
	if time.Since(r.lagAt) < time.Second {
		return
	}
	r.lagAt = time.Now()
	byLeader := map[int32][]*part{}
	r.mu.Lock()
	for _, pt := range parts {
		if pt.srcHWM > pt.dstLEO {
			if l := r.sourceLeader(pt.topic, pt.partition); l >= 0 {
				byLeader[l] = append(byLeader[l], pt)
			}
		}
	}
	r.mu.Unlock()
	for leader, pts := range byLeader {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		idx := map[string]int{}
		for _, pt := range pts {
			i, ok := idx[pt.topic]
			if !ok {
				i = len(req.Topics)
				idx[pt.topic] = i
				rt := kmsg.NewListOffsetsRequestTopic()
				rt.Topic = pt.topic
				req.Topics = append(req.Topics, rt)
			}
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = pt.partition, -3, -1
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, lp)
		}
		resp, err := r.request(leader, req)
		if err != nil {
			continue // the fetch path reports the source's health
		}
		for _, rt := range resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, rp := range rt.Partitions {
				i := slices.IndexFunc(pts, func(pt *part) bool { return pt.topic == rt.Topic && pt.partition == rp.Partition })
				if i < 0 || rp.ErrorCode != 0 || rp.Offset < 0 {
					continue
				}
				ep, err := r.partition(pts[i])
				if err != nil {
					continue
				}
				if _, dstTs, _, ok := ep.MaxTimestamp(); ok {
					r.mu.Lock()
					if pts[i].srcHWM > pts[i].dstLEO {
						pts[i].lagMs = max(1, rp.Timestamp-dstTs)
					}
					r.mu.Unlock()
				}
			}
		}
	}
}

// syncParts brings r.parts in line with the mirror's topics and the
// partitions this broker leads, and reads each one's persisted state.
func (r *run) syncParts(img *raftmeta.Image, m *raftmeta.Mirror) error {
	host := r.p.host
	want := map[tpKey][16]byte{}
	for name, mt := range m.Topics {
		t := img.Topics[name]
		if t == nil || t.ID != mt.ID {
			continue
		}
		for i, pp := range t.Partitions {
			if pp.Leader == host.NodeID() {
				want[tpKey{name, int32(i)}] = t.ID
			}
		}
	}
	r.mu.Lock()
	for k := range r.parts {
		if _, ok := want[k]; !ok {
			delete(r.parts, k)
			r.p.metrics.forgetPart(r, k)
		}
	}
	r.mu.Unlock()
	if len(want) == 0 {
		return nil
	}
	if err := r.p.ensureStateTopic(r.ctx); err != nil {
		return err
	}
	for k, id := range want {
		st, err := r.p.readState(r.ctx, pkey{r.name, k.topic, k.partition}, id)
		if err != nil {
			return err
		}
		stopped := m.Topics[k.topic].Stopped
		if st.State == Unknown && !stopped || st.State == Stopped && !stopped {
			// A new mirror partition, or one added again (failback).
			if st, err = r.p.writeState(r.ctx, pkey{r.name, k.topic, k.partition}, id, func(s *pstate) error {
				s.State, s.Reason = Preparing, ""
				return nil
			}); err != nil {
				return err
			}
		}
		r.mu.Lock()
		pt := r.parts[k]
		if pt == nil {
			pt = &part{tpKey: k, id: id, srcHWM: -1, logStartTo: -1}
			r.parts[k] = pt
			r.p.metrics.trackPart(r, pt)
		}
		if pt.state != st.State {
			pt.stopDone = false
		}
		pt.state, pt.reason = st.State, st.Reason
		if ep := host.Engine().Partition(engine.TopicID(id), k.partition); ep != nil {
			pt.dstLEO = ep.Offsets().LogEnd
		}
		r.mu.Unlock()
	}
	return nil
}

func (r *run) setState(pt *part, s State, reason string) error {
	st, err := r.p.writeState(r.ctx, pkey{r.name, pt.topic, pt.partition}, pt.id, func(st *pstate) error {
		st.State, st.Reason = s, reason
		return nil
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	pt.state, pt.reason = st.State, st.Reason
	r.mu.Unlock()
	return nil
}

func (r *run) fail(pt *part, err error) error {
	if r.ctx.Err() != nil {
		return err // shutting down: not the partition's fault
	}
	r.p.log.Warn("mirror partition failed", "mirror", r.name, "topic", pt.topic, "partition", pt.partition, "err", err)
	if serr := r.setState(pt, Failed, err.Error()); serr != nil {
		return serr
	}
	return err
}

func (r *run) partition(pt *part) (*engine.Partition, error) {
	ep := r.p.host.Engine().Partition(engine.TopicID(pt.id), pt.partition)
	if ep == nil {
		return nil, fmt.Errorf("%s-%d is not hosted here: %w", pt.topic, pt.partition, kerr.NotLeaderForPartition)
	}
	return ep, nil
}

// lastMirrorEpoch asks the source for the partition's last mirror epoch:
// the epoch its own mirroring of the topic stopped at, -1 if it never
// mirrored it (KIP-1279 "Log Convergence").
func (r *run) lastMirrorEpoch(pt *part) (int32, error) {
	if r.sourceMirrors == nil {
		resp, err := r.request(-1, kmsg.NewPtrApiVersionsRequest())
		if err != nil {
			return -1, fmt.Errorf("source api versions: %w", err)
		}
		serves := slices.ContainsFunc(resp.(*kmsg.ApiVersionsResponse).ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool {
			return k.ApiKey == KeyLastMirroredOffsets
		})
		r.sourceMirrors = &serves
	}
	if !*r.sourceMirrors {
		return -1, nil // a source without mirroring (e.g. Apache Kafka) never mirrored the partition
	}
	req := &LastMirroredOffsetsRequest{MirrorName: r.name, Topics: []PartitionsTopic{{Name: pt.topic, Partitions: []int32{pt.partition}}}}
	resp, err := r.request(-1, req)
	if err != nil {
		return -1, fmt.Errorf("last mirror epoch of %s-%d: %w", pt.topic, pt.partition, err)
	}
	lr := resp.(*LastMirroredOffsetsResponse)
	if lr.ErrorCode != 0 {
		return -1, fmt.Errorf("last mirror epoch of %s-%d: %w", pt.topic, pt.partition, ErrorForCode(lr.ErrorCode))
	}
	for _, t := range lr.Topics {
		for _, p := range t.Partitions {
			if t.Name == pt.topic && p.PartitionIndex == pt.partition {
				if p.ErrorCode != 0 {
					return -1, fmt.Errorf("last mirror epoch of %s-%d: %w", pt.topic, pt.partition, ErrorForCode(p.ErrorCode))
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
func (r *run) prepare(pt *part) error {
	lme, err := r.lastMirrorEpoch(pt)
	if err != nil {
		return err
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
		r.p.log.Info("mirror LME truncation", "mirror", r.name, "topic", pt.topic, "partition", pt.partition, "lme", lme, "offset", to)
		if err := ep.Truncate(to); err != nil {
			return r.fail(pt, fmt.Errorf("LME truncation to %d: %w", to, err))
		}
	}
	return r.setState(pt, Mirroring, "")
}

// bump is EPOCH_FENCING: raise the destination epoch above the source's,
// then mirror again.
func (r *run) bump(img *raftmeta.Image, pt *part, sle int32) error {
	ep, err := r.partition(pt)
	if err != nil {
		return err
	}
	sle = max(sle, r.maxSeenEpoch(pt), ep.EpochAt(ep.Offsets().LogEnd-1))
	if err := r.bumpEpoch(pt, bumpMinEpoch(sle)); err != nil {
		return err
	}
	return r.setState(pt, Mirroring, "")
}

// maxSeenEpoch is the latest source epoch the fetcher was refused for.
func (r *run) maxSeenEpoch(pt *part) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bumps[pt.tpKey]
}

// bumpEpoch asks the controller for a leader epoch above minEpoch and
// waits until the local partition has it.
func (r *run) bumpEpoch(pt *part, minEpoch int32) error {
	epoch, err := r.p.bumpLeaderEpoch(r.ctx, pt.id, pt.partition, minEpoch)
	if err != nil {
		return err
	}
	ep, err := r.partition(pt)
	if err != nil {
		return err
	}
	for ep.Offsets().LeaderEpoch < epoch {
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// stopPartition is STOPPING (failover): the fetcher has already let go of
// the partition; bump the epoch above every mirrored batch, abort the
// transactions the source left open, persist the last mirror epoch, and
// write the producer-state barrier.
func (r *run) stopPartition(pt *part) error {
	if pt.stopDone {
		return nil
	}
	ep, err := r.partition(pt)
	if err != nil {
		return err
	}
	offs := ep.Offsets()
	lme := int32(-1)
	if offs.LogEnd > offs.LogStart {
		lme = ep.EpochAt(offs.LogEnd - 1)
	}
	// Persisted twice: for the mirror, and for the topic alone (mirror
	// name ""), which outlives the mirror's deletion so that a later
	// failback still finds the last mirror epoch.
	for _, k := range []pkey{{r.name, pt.topic, pt.partition}, {"", pt.topic, pt.partition}} {
		if _, err := r.p.writeState(r.ctx, k, pt.id, func(s *pstate) error {
			s.LME, s.LMO = lme, offs.LogEnd-1
			if k.mirror == "" {
				s.State = Stopped
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if err := r.bumpEpoch(pt, max(offs.LeaderEpoch, lme)); err != nil {
		return err
	}
	if _, err := ep.AbortOpenTransactions(r.ctx); err != nil {
		return r.fail(pt, err)
	}
	if _, err := ep.WriteProducerBarrier(r.ctx); err != nil {
		return r.fail(pt, err)
	}
	r.mu.Lock()
	pt.stopDone = true
	r.mu.Unlock()
	return nil
}

// finishStops makes topics whose partitions all finished STOPPING
// writable (the mirror membership is marked stopped in the metadata
// quorum), then records STOPPED.
func (r *run) finishStops(parts []*part) error {
	byTopic := map[string][]*part{}
	for _, pt := range parts {
		if pt.state == Stopping {
			byTopic[pt.topic] = append(byTopic[pt.topic], pt)
		}
	}
	img := r.p.image()
	for topic, pts := range byTopic {
		t := img.Topics[topic]
		if t == nil || len(pts) != len(t.Partitions) || slices.ContainsFunc(pts, func(pt *part) bool { return !pt.stopDone }) {
			continue
		}
		if err := r.p.host.Metadata().StopMirrorTopic(r.ctx, r.name, topic); err != nil {
			return err
		}
		for _, pt := range pts {
			if err := r.setState(pt, Stopped, ""); err != nil {
				return err
			}
		}
		r.p.log.Info("mirror topic stopped: now writable", "mirror", r.name, "topic", topic)
	}
	return nil
}

// fetch sends one Fetch to each source leader of the partitions and
// appends what comes back.
func (r *run) fetch(parts []*part) (busy bool, err error) {
	byLeader := map[int32][]*part{}
	for _, pt := range parts {
		l := r.sourceLeader(pt.topic, pt.partition)
		if l < 0 {
			r.meta = nil // refresh next step
			continue
		}
		byLeader[l] = append(byLeader[l], pt)
	}
	type result struct {
		leader int32
		parts  []*part
		resp   *kmsg.FetchResponse
		err    error
	}
	results := make(chan result, len(byLeader))
	for leader, pts := range byLeader {
		req := r.fetchRequest(pts)
		go func() {
			resp, err := r.request(leader, req)
			res := result{leader: leader, parts: pts, err: err}
			if err == nil {
				res.resp = resp.(*kmsg.FetchResponse)
			}
			results <- res
		}()
	}
	var errs []error
	for range byLeader {
		res := <-results
		r.mu.Lock()
		r.stats.requests++
		r.stats.srcBroker = res.leader
		r.mu.Unlock()
		if res.err != nil {
			r.mu.Lock()
			r.stats.errors++
			r.mu.Unlock()
			r.meta = nil
			errs = append(errs, fmt.Errorf("fetch from source broker %d: %w", res.leader, res.err))
			continue
		}
		if res.resp.ErrorCode != 0 {
			errs = append(errs, fmt.Errorf("fetch from source broker %d: %w", res.leader, kerr.ErrorForCode(res.resp.ErrorCode)))
			continue
		}
		n, err := r.handleFetch(res.parts, res.resp)
		busy = busy || n > 0
		if err != nil {
			errs = append(errs, err)
		}
		r.throttle(n)
	}
	return busy, errors.Join(errs...)
}

func (r *run) fetchRequest(pts []*part) *kmsg.FetchRequest {
	cfg := r.p.cfg
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(cfg.FetchMaxWait.Milliseconds())
	req.MinBytes = cfg.FetchMinBytes
	req.MaxBytes = cfg.FetchRespMaxBytes
	req.SessionEpoch = -1
	for _, pt := range pts {
		ep, err := r.partition(pt)
		if err != nil {
			continue
		}
		offs := ep.Offsets()
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = pt.partition
		rp.FetchOffset = max(offs.LogEnd, pt.logStartTo)
		rp.LastFetchedEpoch = -1
		if offs.LogEnd > offs.LogStart && pt.logStartTo < 0 {
			rp.LastFetchedEpoch = ep.EpochAt(offs.LogEnd - 1)
		}
		rp.PartitionMaxBytes = cfg.FetchMaxBytes
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = pt.topic, pt.id
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// handleFetch applies a fetch response: truncation on a diverging epoch
// or a log start past our end, then the batches, appended unchanged.
func (r *run) handleFetch(pts []*part, resp *kmsg.FetchResponse) (int, error) {
	byKey := map[tpKey]*part{}
	for _, pt := range pts {
		byKey[pt.tpKey] = pt
	}
	total := 0
	var errs []error
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			name := t.Topic
			for _, pt := range pts {
				if pt.id == t.TopicID {
					name = pt.topic
				}
			}
			pt := byKey[tpKey{name, rp.Partition}]
			if pt == nil {
				continue
			}
			n, err := r.handlePartition(pt, &rp)
			total += n
			if err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", pt.topic, pt.partition, err))
			}
		}
	}
	r.mu.Lock()
	r.stats.bytes += int64(total)
	r.mu.Unlock()
	return total, errors.Join(errs...)
}

func (r *run) handlePartition(pt *part, rp *kmsg.FetchResponseTopicPartition) (int, error) {
	ep, err := r.partition(pt)
	if err != nil {
		return 0, err
	}
	switch rp.ErrorCode {
	case 0:
	case kerr.OffsetOutOfRange.Code:
		return 0, r.outOfRange(pt, ep)
	default:
		r.meta = nil // leadership or topic changed on the source: refresh
		return 0, kerr.ErrorForCode(rp.ErrorCode)
	}
	if d := rp.DivergingEpoch; d.Epoch >= 0 || d.EndOffset >= 0 {
		// Epoch-based truncation: our last epoch ends earlier on the
		// source (an unclean election there, or a failback).
		_, end := ep.EndOffsetForEpoch(d.Epoch)
		to := min(d.EndOffset, end)
		if end < 0 {
			to = d.EndOffset
		}
		r.p.log.Info("mirror epoch truncation", "mirror", r.name, "topic", pt.topic, "partition", pt.partition, "epoch", d.Epoch, "offset", to)
		if err := ep.Truncate(max(to, 0)); err != nil {
			return 0, r.fail(pt, fmt.Errorf("epoch truncation to %d: %w", to, err))
		}
		return 1, nil
	}
	batches := completeBatches(rp.RecordBatches)
	n := len(batches)
	if n > 0 {
		_, err := ep.Append(r.ctx, &engine.AppendRequest{Topic: pt.topic, TopicID: engine.TopicID(pt.id), Partition: pt.partition,
			Origin: engine.OriginMirror, Records: batches, Acks: -1})
		switch {
		case errors.Is(err, ErrMirrorLeaderEpochExceeded):
			r.scheduleBump(pt.topic, pt.partition, maxBatchEpoch(batches))
			return 0, r.setState(pt, EpochFencing, "")
		case errors.Is(err, engine.ErrUnexpectedAppendOffset):
			return 0, err // our log moved meanwhile: fetch again from its end
		case err != nil:
			return 0, r.fail(pt, fmt.Errorf("append mirrored batches: %w", err))
		}
		if pt.logStartTo >= 0 {
			if _, err := ep.DeleteRecords(pt.logStartTo); err != nil {
				r.p.log.Warn("mirror: move log start", "topic", pt.topic, "partition", pt.partition, "err", err)
			}
			pt.logStartTo = -1
		}
	}
	leo := ep.Offsets().LogEnd
	r.mu.Lock()
	pt.srcHWM, pt.dstLEO = rp.HighWatermark, leo
	if leo >= rp.HighWatermark {
		pt.lagMs = 0
	}
	r.mu.Unlock()
	return n, nil
}

// outOfRange handles OFFSET_OUT_OF_RANGE: below the source's log start
// (retention moved it), the log is emptied and restarts at the source's
// start; above the source's end (an unclean election lost records), the
// log is cut to the source's end.
func (r *run) outOfRange(pt *part, ep *engine.Partition) error {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = pt.topic
	for _, ts := range []int64{-2, -1} {
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition, p.Timestamp, p.CurrentLeaderEpoch = pt.partition, ts, -1
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	// Two partitions entries with one index each: send them one by one.
	var start, end int64 = -1, -1
	for i, ts := range []int64{-2, -1} {
		one := *req
		t := rt
		t.Partitions = []kmsg.ListOffsetsRequestTopicPartition{rt.Partitions[i]}
		one.Topics = []kmsg.ListOffsetsRequestTopic{t}
		resp, err := r.request(r.sourceLeader(pt.topic, pt.partition), &one)
		if err != nil {
			return err
		}
		lr := resp.(*kmsg.ListOffsetsResponse)
		if len(lr.Topics) != 1 || len(lr.Topics[0].Partitions) != 1 {
			return fmt.Errorf("list offsets: malformed response")
		}
		lp := lr.Topics[0].Partitions[0]
		if lp.ErrorCode != 0 {
			return fmt.Errorf("list offsets: %w", kerr.ErrorForCode(lp.ErrorCode))
		}
		if ts == -2 {
			start = lp.Offset
		} else {
			end = lp.Offset
		}
	}
	leo := ep.Offsets().LogEnd
	switch {
	case leo < start:
		r.p.log.Info("mirror: source log start is past our end; restarting there", "topic", pt.topic, "partition", pt.partition, "start", start)
		if err := ep.Truncate(0); err != nil {
			return err
		}
		pt.logStartTo = start
	case leo > end:
		if err := ep.Truncate(end); err != nil {
			return err
		}
	}
	return nil
}

// completeBatches returns the leading complete record batches of b: a
// fetch response may end with a partial batch.
func completeBatches(b []byte) []byte {
	n := 0
	for n+12 <= len(b) {
		size := int(binary.BigEndian.Uint32(b[n+8:])) + 12
		if size < 61 || n+size > len(b) {
			break
		}
		n += size
	}
	return b[:n]
}

// throttle sleeps as long as n bytes take at mirror.replication.throttled.rate.
func (r *run) throttle(n int) {
	rate := r.p.throttledRate()
	if rate <= 0 || n <= 0 {
		return
	}
	select {
	case <-r.ctx.Done():
	case <-time.After(time.Duration(float64(n) / float64(rate) * float64(time.Second))):
	}
}
