package mirror

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// pluginMetrics are the KIP's mirror metrics on the broker's metrics set,
// named domain_type_name after their JMX beans (as
// kafka_server_FetcherLagMetrics_ConsumerLag is):
//
//   - kafka_server_mirror_MirrorFetcherManager_{MaxLag,MinFetchRate,
//     DeadThreadCount,FailedPartitionsCount}{clientId="MirrorReplica"};
//   - kafka_server_FetcherLagMetrics_ConsumerLag per partition, labelled
//     with the fetcher's client ID MirrorFetcherThread-{source broker}-
//     {fetcher}-{mirror} (plus ConsumerLagMs, in record time);
//   - kafka_server_FetcherStats_{BytesPerSec,RequestsPerSec} per fetcher,
//     one-minute rates as Kafka's meters report them;
//   - kafka_server_mirror_MirrorMetadataManager_{State}PartitionState;
//   - kafka_server_MirrorReplication_byte_rate, the mirrored bytes/s;
//   - kafka_server_mirror_LastSourceContactAgeSeconds per mirror;
//   - kafka_server_mirror_Diverged{Records,Ranges} per mirror: the
//     divergence manifest (Tandem's).
//
// A lag that is not known (the source's end offset never learned) is NaN,
// never 0.
type pluginMetrics struct {
	p   *Plugin
	set *metrics.Set

	mu       sync.Mutex // taken after run.mu, never before
	parts    map[*run]map[tpKey]partMetrics
	runNames map[*run][]string
	fetchers map[*run]map[fetcherKey]*fetcherStats
	bytes    *meter // every mirror's bytes, for byte-rate
}

type partMetrics struct {
	fetcher fetcherKey
	names   []string
}

const mgrLabels = `{clientId="MirrorReplica"}`

func newPluginMetrics(p *Plugin, set *metrics.Set) *pluginMetrics {
	m := &pluginMetrics{p: p, set: set, parts: map[*run]map[tpKey]partMetrics{}, runNames: map[*run][]string{},
		fetchers: map[*run]map[fetcherKey]*fetcherStats{}, bytes: newMeter()}
	const mgr = "kafka_server_mirror_MirrorFetcherManager_"
	set.GetOrCreateGauge(mgr+"MaxLag"+mgrLabels, func() float64 {
		var lag int64
		m.eachPart(func(_ *run, pt *part) { lag = max(lag, pt.lag()) })
		return float64(lag)
	})
	set.GetOrCreateGauge(mgr+"MinFetchRate"+mgrLabels, m.minFetchRate)
	set.GetOrCreateGauge(mgr+"DeadThreadCount"+mgrLabels, func() float64 { return 0 }) // fetchers end only when stopped
	set.GetOrCreateGauge(mgr+"FailedPartitionsCount"+mgrLabels, m.stateCount(Failed))
	for _, s := range []State{Failed, Stopped, Stopping, Mirroring, Preparing, Paused, Pausing, EpochFencing} {
		set.GetOrCreateGauge(fmt.Sprintf("kafka_server_mirror_MirrorMetadataManager_%sPartitionState", pascal(s)), m.stateCount(s))
	}
	set.GetOrCreateGauge("kafka_server_MirrorReplication_byte_rate", m.bytes.rate)
	return m
}

func pascal(s State) string {
	if s == EpochFencing {
		return "EpochFencing"
	}
	n := s.String()
	return n[:1] + toLower(n[1:])
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func (p *Plugin) allRuns() []*run {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*run, 0, len(p.runs))
	for _, r := range p.runs {
		out = append(out, r)
	}
	return out
}

func (m *pluginMetrics) eachPart(fn func(*run, *part)) {
	for _, r := range m.p.allRuns() {
		r.mu.Lock()
		for _, pt := range r.parts {
			fn(r, pt)
		}
		r.mu.Unlock()
	}
}

func (m *pluginMetrics) stateCount(s State) func() float64 {
	return func() float64 {
		n := 0
		m.eachPart(func(_ *run, pt *part) {
			if pt.state == s {
				n++
			}
		})
		return float64(n)
	}
}

// minFetchRate is the lowest fetch request rate of the fetchers.
func (m *pluginMetrics) minFetchRate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	rate := math.NaN()
	for _, fs := range m.fetchers {
		for _, f := range fs {
			if r := f.requests.rate(); math.IsNaN(rate) || r < rate {
				rate = r
			}
		}
	}
	if math.IsNaN(rate) {
		return 0
	}
	return rate
}

func clientID(r *run, k fetcherKey) string {
	return fmt.Sprintf("MirrorFetcherThread-%d-%d-%s", k.broker, k.id, r.name)
}

// trackPart registers a partition's lag gauges under its fetcher's client
// ID, again whenever the partition moves to another fetcher (its source
// leader changed); r.mu is held.
func (m *pluginMetrics) trackPart(r *run, pt *part) {
	k := r.fetcherOf(pt)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parts[r] == nil {
		m.parts[r] = map[tpKey]partMetrics{}
		name := fmt.Sprintf("kafka_server_mirror_LastSourceContactAgeSeconds{mirror=%q}", r.name)
		m.set.GetOrCreateGauge(name, func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.contact.IsZero() {
				return math.NaN()
			}
			return time.Since(r.contact).Seconds()
		})
		m.runNames[r] = []string{name}
		// The divergence manifest: what truncations took from the
		// mirror's partitions (copied to <topic>.diverged first).
		for _, g := range []struct {
			name string
			of   func(DivergedRange) float64
		}{
			{"kafka_server_mirror_DivergedRecords", func(d DivergedRange) float64 { return float64(d.Records) }},
			{"kafka_server_mirror_DivergedRanges", func(DivergedRange) float64 { return 1 }},
		} {
			name := fmt.Sprintf("%s{mirror=%q}", g.name, r.name)
			m.set.GetOrCreateGauge(name, func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				var n float64
				for _, d := range m.p.manifest(ctx, r.name) {
					n += g.of(d)
				}
				return n
			})
			m.runNames[r] = append(m.runNames[r], name)
		}
	}
	if old, ok := m.parts[r][pt.tpKey]; ok {
		if old.fetcher == k {
			return
		}
		m.unregister(old.names)
	}
	labels := fmt.Sprintf(`{clientId=%q,topic=%q,partition="%d"}`, clientID(r, k), pt.topic, pt.partition)
	lag := "kafka_server_FetcherLagMetrics_ConsumerLag" + labels
	lagMs := "kafka_server_FetcherLagMetrics_ConsumerLagMs" + labels
	m.set.GetOrCreateGauge(lag, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if l := pt.lag(); l >= 0 {
			return float64(l)
		}
		return math.NaN()
	})
	m.set.GetOrCreateGauge(lagMs, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if pt.lagMs < 0 {
			return math.NaN()
		}
		return float64(pt.lagMs)
	})
	m.parts[r][pt.tpKey] = partMetrics{fetcher: k, names: []string{lag, lagMs}}
}

func (m *pluginMetrics) unregister(names []string) {
	for _, n := range names {
		m.set.UnregisterMetric(n)
	}
}

// forgetPart unregisters a partition's gauges; r.mu is held.
func (m *pluginMetrics) forgetPart(r *run, k tpKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unregister(m.parts[r][k].names)
	delete(m.parts[r], k)
}

// fetcherStats registers a fetcher's rates; r.mu is held.
func (m *pluginMetrics) fetcherStats(r *run, k fetcherKey, host string, port int32) *fetcherStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fetchers[r] == nil {
		m.fetchers[r] = map[fetcherKey]*fetcherStats{}
	}
	if f := m.fetchers[r][k]; f != nil {
		return f
	}
	f := &fetcherStats{all: m.bytes, byteRate: newMeter(), requests: newMeter()}
	labels := fmt.Sprintf(`{clientId=%q,brokerHost=%q,brokerPort="%d",mirror_name=%q}`, clientID(r, k), host, port, r.name)
	f.names = []string{"kafka_server_FetcherStats_BytesPerSec" + labels, "kafka_server_FetcherStats_RequestsPerSec" + labels}
	m.set.GetOrCreateGauge(f.names[0], f.byteRate.rate)
	m.set.GetOrCreateGauge(f.names[1], f.requests.rate)
	m.fetchers[r][k] = f
	return f
}

// forget unregisters a stopped run's gauges.
func (m *pluginMetrics) forget(r *run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pm := range m.parts[r] {
		m.unregister(pm.names)
	}
	for _, f := range m.fetchers[r] {
		m.unregister(f.names)
	}
	m.unregister(m.runNames[r])
	delete(m.parts, r)
	delete(m.fetchers, r)
	delete(m.runNames, r)
}

// fetcherStats are one fetcher's rates.
type fetcherStats struct {
	names              []string
	all                *meter
	byteRate, requests *meter
}

func (f *fetcherStats) request() { f.requests.mark(1) }

func (f *fetcherStats) bytes(n int) {
	f.byteRate.mark(int64(n))
	f.all.mark(int64(n))
}

// meter is a one-minute exponentially weighted moving rate, ticked every
// five seconds, as the Yammer meters behind Kafka's *PerSec metrics.
type meter struct {
	mu      sync.Mutex
	pending int64
	ewma    float64
	started bool
	last    time.Time
}

const meterTick = 5 * time.Second

var meterAlpha = 1 - math.Exp(-meterTick.Seconds()/60)

func newMeter() *meter { return &meter{last: time.Now()} }

func (m *meter) mark(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tickLocked()
	m.pending += n
}

func (m *meter) tickLocked() {
	if time.Since(m.last) > time.Hour { // idle for long: nothing left of the average
		m.pending, m.ewma, m.last = 0, 0, time.Now()
	}
	for time.Since(m.last) >= meterTick {
		inst := float64(m.pending) / meterTick.Seconds()
		m.pending = 0
		if m.started {
			m.ewma += meterAlpha * (inst - m.ewma)
		} else {
			m.ewma, m.started = inst, true
		}
		m.last = m.last.Add(meterTick)
	}
}

func (m *meter) rate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tickLocked()
	return m.ewma
}
