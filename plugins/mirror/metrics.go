package mirror

import (
	"fmt"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// pluginMetrics are the KIP's mirror metrics, in Prometheus form on the
// broker's metrics set: kafka_server_mirror_<Name>{clientId="MirrorReplica"}
// for the fetcher manager, kafka_server_FetcherLagMetrics_ConsumerLag per
// partition (plus ConsumerLagMs, in record time: see run.measureLagMs),
// kafka_server_FetcherStats_{BytesPerSec,RequestsPerSec} per mirror as
// counters, and kafka_server_mirror_<State>PartitionState gauges.
type pluginMetrics struct {
	p   *Plugin
	set *metrics.Set

	mu        sync.Mutex
	partNames map[*run]map[tpKey][]string
	runNames  map[*run][]string
	lastReqs  map[*run]int64
	lastAt    time.Time
	minRate   float64
}

func newPluginMetrics(p *Plugin, set *metrics.Set) *pluginMetrics {
	m := &pluginMetrics{p: p, set: set, partNames: map[*run]map[tpKey][]string{}, runNames: map[*run][]string{}, lastReqs: map[*run]int64{}}
	const mgr = `{clientId="MirrorReplica"}`
	set.GetOrCreateGauge("kafka_server_mirror_MaxLag"+mgr, func() float64 {
		var lag int64
		m.eachPart(func(_ *run, pt *part) {
			if pt.srcHWM >= 0 {
				lag = max(lag, pt.srcHWM-pt.dstLEO)
			}
		})
		return float64(lag)
	})
	set.GetOrCreateGauge("kafka_server_mirror_MinFetchRate"+mgr, m.minFetchRate)
	set.GetOrCreateGauge("kafka_server_mirror_DeadThreadCount"+mgr, func() float64 {
		dead := 0
		for _, r := range p.allRuns() {
			select {
			case <-r.done:
				dead++
			default:
			}
		}
		return float64(dead)
	})
	set.GetOrCreateGauge("kafka_server_mirror_FailedPartitionsCount"+mgr, m.stateCount(Failed))
	for _, s := range []State{Failed, Stopped, Stopping, Mirroring, Preparing, Paused, Pausing, EpochFencing} {
		set.GetOrCreateGauge(fmt.Sprintf("kafka_server_mirror_%sPartitionState", pascal(s)), m.stateCount(s))
	}
	set.GetOrCreateGauge("kafka_server_mirror_MetadataRefreshError", func() float64 {
		n := 0
		for _, r := range p.allRuns() {
			r.mu.Lock()
			if r.failed != "" {
				n++
			}
			r.mu.Unlock()
		}
		return float64(n)
	})
	return m
}

func pascal(s State) string {
	switch s {
	case EpochFencing:
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

// minFetchRate is the lowest fetch request rate of the mirrors' fetchers
// since the previous scrape.
func (m *pluginMetrics) minFetchRate() float64 {
	counts := map[*run]int64{}
	for _, r := range m.p.allRuns() {
		r.mu.Lock()
		counts[r] = r.stats.requests
		r.mu.Unlock()
	}
	m.mu.Lock() // after r.mu: trackPart takes r.mu, then m.mu
	defer m.mu.Unlock()
	now := time.Now()
	secs := now.Sub(m.lastAt).Seconds()
	rate := -1.0
	for r, reqs := range counts {
		if secs > 0 && !m.lastAt.IsZero() {
			rr := float64(reqs-m.lastReqs[r]) / secs
			if rate < 0 || rr < rate {
				rate = rr
			}
		}
		m.lastReqs[r] = reqs
	}
	m.lastAt = now
	if rate < 0 {
		return m.minRate
	}
	m.minRate = rate
	return rate
}

// trackPart registers a partition's lag gauges; r.mu is held.
func (m *pluginMetrics) trackPart(r *run, pt *part) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.partNames[r] == nil {
		m.partNames[r] = map[tpKey][]string{}
		id := fmt.Sprintf(`clientId="MirrorFetcherThread-0-%s",mirror_name=%q`, r.name, r.name)
		names := []string{"kafka_server_FetcherStats_BytesPerSec{" + id + "}", "kafka_server_FetcherStats_RequestsPerSec{" + id + "}"}
		m.set.GetOrCreateGauge(names[0], func() float64 { r.mu.Lock(); defer r.mu.Unlock(); return float64(r.stats.bytes) })
		m.set.GetOrCreateGauge(names[1], func() float64 { r.mu.Lock(); defer r.mu.Unlock(); return float64(r.stats.requests) })
		m.runNames[r] = names
	}
	labels := fmt.Sprintf(`{clientId="MirrorFetcherThread-0-%s",topic=%q,partition="%d"}`, r.name, pt.topic, pt.partition)
	lag := "kafka_server_FetcherLagMetrics_ConsumerLag" + labels
	lagMs := "kafka_server_FetcherLagMetrics_ConsumerLagMs" + labels
	m.set.GetOrCreateGauge(lag, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if pt.srcHWM < 0 {
			return 0
		}
		return float64(max(0, pt.srcHWM-pt.dstLEO))
	})
	m.set.GetOrCreateGauge(lagMs, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(pt.lagMs)
	})
	m.partNames[r][pt.tpKey] = []string{lag, lagMs}
}

// forgetPart unregisters a partition's gauges; r.mu is held.
func (m *pluginMetrics) forgetPart(r *run, k tpKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.partNames[r][k] {
		m.set.UnregisterMetric(n)
	}
	delete(m.partNames[r], k)
}

// forget unregisters a stopped run's gauges.
func (m *pluginMetrics) forget(r *run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, names := range m.partNames[r] {
		for _, n := range names {
			m.set.UnregisterMetric(n)
		}
	}
	for _, n := range m.runNames[r] {
		m.set.UnregisterMetric(n)
	}
	delete(m.partNames, r)
	delete(m.runNames, r)
	delete(m.lastReqs, r)
}
