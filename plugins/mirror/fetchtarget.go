package mirror

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/kafkaclient"
	"github.com/tandem-kafka/tandem/plugins/mirror/fetch"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorview"
)

// The fetch itself (KIP-1279's MirrorFetcherThread: the Fetch request,
// the fetcher's own client, the trim of each answer, the throttle) is
// the fetch package's. Here is the run's side of it: which fetchers run
// and the partitions each fetches (fetchTarget); what an answer does to
// a partition is the apply package's (applytarget.go).

// fetcherOf is the fetcher of pt given its source leader; r.mu is held.
func (r *mirrorRun) fetcherOf(pt *ledPartition) fetch.Key {
	return fetch.KeyOf(pt.Topic, pt.Partition, pt.leader, r.fetcherCount())
}

// Fetchers of a source broker over a long link. One Fetch is in flight
// per fetcher, over one TCP connection, which carries at most its
// window per round trip: Linux grows a sender's window to
// net.ipv4.tcp_wmem's maximum, 4 MiB by default, so one connection
// carries at most 40 MB/s over 100 ms. Unless mirror.num.replica.fetchers
// is set, a source broker therefore gets a fetcher (and a connection,
// and a fetch session) per fetchRTTStep of round trip, up to maxFetchers,
// and a topic's partitions are spread over them (fetch.KeyOf).
const (
	fetchRTTStep = 20 * time.Millisecond
	maxFetchers  = 8
)

// fetcherCount is how many fetchers each source broker gets; r.mu is
// held.
func (r *mirrorRun) fetcherCount() int {
	if n := r.p.cfg.Fetchers; n > 0 {
		return n
	}
	return fetchersFor(r.src.rtt)
}

// fetchersFor is the fetchers per source broker for a round trip rtt.
func fetchersFor(rtt time.Duration) int {
	return max(1, min(maxFetchers, int((rtt+fetchRTTStep-1)/fetchRTTStep)))
}

// changed tells the fetchers that their partitions or positions changed
// other than by their own appends (fetch.Target.Generation).
func (r *mirrorRun) changed() {
	r.gen.Add(1)
	r.mu.Lock()
	fs := slices.Collect(maps.Values(r.fetchers))
	r.mu.Unlock()
	for _, f := range fs {
		f.Poke()
	}
}

// syncFetchers runs one fetcher for each source broker and fetcher id
// that leads some of parts, and stops the others.
func (r *mirrorRun) syncFetchers(parts []*ledPartition) {
	want := map[fetch.Key]bool{}
	r.mu.Lock()
	for _, pt := range parts {
		if pt.leader >= 0 {
			want[pt.fetchKey] = true
		}
	}
	var stale []*fetch.Fetcher
	for k, f := range r.fetchers {
		if !want[k] {
			stale = append(stale, f)
			delete(r.fetchers, k)
		}
	}
	for k := range want {
		if r.fetchers[k] == nil {
			f := r.newFetcher(k)
			r.fetchers[k] = f
			go r.p.Contain(f.Run)
		}
	}
	r.mu.Unlock()
	for _, f := range stale {
		f.Stop()
	}
	if len(stale) > 0 {
		r.mu.Lock()
		for _, pt := range r.parts { // rare: a source broker left
			if pt.fetcher != nil && r.fetchers[pt.fetcher.key] == nil {
				pt.fetcher = nil
			}
		}
		r.mu.Unlock()
	}
}

// newFetcher returns fetcher k, with its counters labelled with its
// source broker's address; r.mu is held.
func (r *mirrorRun) newFetcher(k fetch.Key) *fetch.Fetcher {
	host, port := r.brokerAddr(k.Broker)
	stats := r.p.metrics.FetcherStats(runMetrics{r}, k, host, port)
	cfg := r.p.cfg
	sec, err := kafkaclient.Security(r.configs)
	if err != nil { // validated when the mirror was created or altered
		r.log.Warn("mirror fetcher security settings", "err", err)
	}
	return fetch.New(r.ctx, k, fetch.Config{
		Mirror:            r.name,
		NodeID:            r.p.Host().NodeID(),
		Addr:              r.sourceBrokerAddr,
		TLS:               sec.TLS,
		SASL:              sec.SASL,
		ConnectTimeout:    cfg.ConnectTimeout,
		RequestTimeout:    cfg.RequestTimeout,
		MaxWait:           cfg.FetchMaxWait,
		MinBytes:          cfg.FetchMinBytes,
		MaxBytes:          r.startAnswer(),
		PartitionMaxBytes: cfg.FetchMaxBytes,
		FixedSizes:        cfg.FetchSizesFixed,
		Budget:            r.p.fetchBudget,
		Backoff:           cfg.Backoff,
		Rate:              r.p.throttledRate,
		Log:               r.log,
		Requests:          stats.Requests,
		Bytes:             stats.Bytes,
	}, &fetchTarget{r: r, key: k})
}

// startAnswer is where a fetcher's answer limit starts: the configured
// replica.fetch.response.max.bytes when it is fixed, else Kafka's default
// shared by the source broker's fetchers (they grow from there); r.mu is
// held.
func (r *mirrorRun) startAnswer() int32 {
	if r.p.cfg.FetchSizesFixed {
		return r.p.cfg.FetchRespMaxBytes
	}
	return max(r.p.cfg.FetchMaxBytes, r.p.cfg.FetchRespMaxBytes/int32(r.fetcherCount()))
}

// brokerAddr is a source broker's host and port in the source's
// metadata; r.mu is held.
func (r *mirrorRun) brokerAddr(id int32) (string, int32) {
	if m := r.src.meta; m != nil {
		for _, b := range m.Brokers {
			if b.NodeID == id {
				return b.Host, b.Port
			}
		}
	}
	return "", 0
}

// sourceBrokerAddr is fetch.Config.Addr: where source broker id is now.
func (r *mirrorRun) sourceBrokerAddr(id int32) (string, error) {
	r.mu.Lock()
	host, port := r.brokerAddr(id)
	r.mu.Unlock()
	if host == "" {
		return "", fmt.Errorf("source broker %d is not in the source's metadata: %w", id, kerr.BrokerNotAvailable)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// fetchTarget is the run as fetcher key sees it: it fetches the MIRRORING
// partitions whose source leader is key's broker and that hash to it, and
// keeps the source end offsets of those it does not fetch (paused ones)
// fresh. The fetcher calls it from its goroutine only.
type fetchTarget struct {
	r   *mirrorRun
	key fetch.Key
	// Guarded by r.mu: what the fetcher's session last told of all its
	// partitions (ledPartition.endAt).
	answeredAt time.Time // when the last answer's Fetch was sent
	trouble    string    // why the fetcher cannot fetch now ("" when it can)
	troubleAt  time.Time
	cutOff     bool // trouble is the source's (ledPartition.cutOff)
	// From Partitions: the fetcher's partitions (paused ones too), set
	// under r.mu for Refresh, which runs beside the fetcher; and those it
	// fetches, the fetcher goroutine's own.
	parts     []*ledPartition
	mirroring map[topicPartition]*ledPartition // by source name (fetch.Partition.Topic)
}

var _ fetch.Refresher = (*fetchTarget)(nil)

// mine reports whether pt is this fetcher's; r.mu is held.
func (t *fetchTarget) mine(pt *ledPartition) bool {
	return pt.leader >= 0 && pt.fetchKey == t.key && mirrorview.NeedsSource(pt.state)
}

// Generation implements fetch.Target.
func (t *fetchTarget) Generation() uint64 { return t.r.gen.Load() }

// Partitions implements fetch.Target: the MIRRORING partitions open
// here, from their log ends (or the source's log start to move to), with
// the source leader epoch as CurrentLeaderEpoch (the source fences a
// stale one, and the fetcher drops batches above it: KAFKA-18723). It
// walks every partition of the run, which it does only when they
// changed.
func (t *fetchTarget) Partitions() ([]fetch.Partition, error) {
	r := t.r
	now := time.Now()
	parts := make([]*ledPartition, 0, len(t.parts))
	t.mirroring = map[topicPartition]*ledPartition{}
	type want struct {
		pt         *ledPartition
		epoch      int32
		logStartTo int64
	}
	var wants []want
	r.mu.Lock()
	for _, pt := range r.parts {
		mine := t.mine(pt)
		if mine {
			parts = append(parts, pt)
		}
		if !mine || pt.state != mirrorstate.Mirroring {
			if pt.fetcher == t {
				pt.fetcher = nil
			}
			continue
		}
		if pt.fetcher != t {
			pt.fetcher, pt.fetchedSince = t, now
		}
		t.mirroring[topicPartition{Topic: pt.src, Partition: pt.Partition}] = pt
		wants = append(wants, want{pt, pt.leaderEpoch, pt.progress.LogStartTo})
	}
	t.parts = parts // a new slice: a Refresh under way keeps the one it took
	r.mu.Unlock()
	if len(wants) == 0 {
		return nil, nil
	}
	out := make([]fetch.Partition, 0, len(wants))
	for _, w := range wants {
		pt := w.pt
		ep, err := r.partition(pt)
		if err != nil {
			continue
		}
		offs := ep.Offsets()
		p := fetch.Partition{Topic: pt.src, TopicID: pt.id, Partition: pt.Partition,
			FetchOffset: max(offs.LogEnd, w.logStartTo), LeaderEpoch: w.epoch, LastFetchedEpoch: -1}
		if offs.LogEnd > offs.LogStart && w.logStartTo < 0 {
			p.LastFetchedEpoch = ep.EpochAt(offs.LogEnd - 1)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("no partition of this fetcher is open here yet") // nothing to wait for at the source
	}
	return out, nil
}

// Unreachable implements fetch.Target: the source broker may be gone, so
// its partitions' leaders are asked again.
func (t *fetchTarget) Unreachable(err error) error {
	r := t.r
	err = r.src.conn.Err(fmt.Sprintf("a fetch from broker %d", t.key.Broker), err)
	t.setTrouble(err)
	r.markStale()
	return err
}

// Answered implements fetch.Target.
func (t *fetchTarget) Answered(sent time.Time, err error) {
	t.r.contacted()
	t.setTrouble(err)
	if err == nil {
		t.r.mu.Lock()
		t.answeredAt = sent
		t.r.mu.Unlock()
	}
}

// setTrouble records why the fetcher cannot fetch now (nil: it can).
func (t *fetchTarget) setTrouble(err error) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	switch {
	case err == nil:
		t.trouble = ""
	case t.trouble == "":
		t.trouble, t.troubleAt = err.Error(), time.Now()
	default:
		t.trouble = err.Error()
	}
	t.cutOff = errors.Is(err, mirrorproto.ErrMirrorSourceUnavailable)
}

// Apply implements fetch.Target with the apply stage.
func (t *fetchTarget) Apply(p fetch.Partition, rp *kmsg.FetchResponseTopicPartition) (int, func() error, error) {
	pt := t.mirroring[topicPartition{Topic: p.Topic, Partition: p.Partition}]
	if pt == nil {
		return 0, nil, nil
	}
	return t.r.applier().Apply(t.r.ctx, pt, p.FetchOffset, rp)
}

// Refresh implements fetch.Refresher with refreshEnds.
// It runs beside the fetcher's rounds, so it takes the partitions under
// r.mu.
func (t *fetchTarget) Refresh() {
	t.r.mu.Lock()
	parts := t.parts
	t.r.mu.Unlock()
	t.r.refreshEnds(t.key.Broker, parts)
}

// throttledRate is mirror.replication.throttled.rate: this broker's
// dynamic value, the cluster default, or the static property.
func (p *Plugin) throttledRate() int64 {
	img := p.Image()
	if img == nil {
		return p.cfg.ThrottledRate
	}
	const key = "mirror.replication.throttled.rate"
	v, ok := img.NodeConfigs[p.Host().NodeID()][key]
	if !ok {
		v, ok = img.BrokerConfigs[key]
	}
	if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
		return n
	}
	return p.cfg.ThrottledRate
}
