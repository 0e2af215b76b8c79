package mirror

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tandem-kafka/tandem/plugins/mirror/fetch"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorview"
	"github.com/tandem-kafka/tandem/prom"
)

// mirrorFamilies are the mirror plugin's metric families, labelled with
// mirror, topic, partition and client_id (the KIP's fetcher client ID,
// MirrorFetcherThread-{source broker}-{fetcher}-{mirror}) as they apply.
// docs/metrics.md maps the KIP's metrics onto them: the KIP's per-second
// rates are rate() of the counters here, its broker-wide counts sums.
var mirrorFamilies = []prom.Family{
	{Name: "tandem_mirror_partitions", Type: prom.Gauge, Help: "Partitions of the mirror this broker leads, by state (label state)."},
	{Name: "tandem_mirror_lag_records", Type: prom.Gauge, Help: "Records the partition is behind the source's end offset as last learned; NaN while that is unknown."},
	{Name: "tandem_mirror_lag_seconds", Type: prom.Gauge, Help: "How far the partition is behind the source in record time, in seconds; NaN while unknown."},
	{Name: "tandem_mirror_max_lag_records", Type: prom.Gauge, Help: "The largest lag in records of the mirror's partitions on this broker; NaN while one is unknown."},
	{Name: "tandem_mirror_source_offset_age_seconds", Type: prom.Gauge, Help: "Seconds since the source end offset behind the partition's lag was learned; past the staleness bound the lag is a lower bound. NaN while unknown."},
	{Name: "tandem_mirror_destination_partitions", Type: prom.Gauge, Help: "Partitions of the mirror's topics in this cluster by health (label health: ok, no_leader, under_min_isr), from the metadata: the same on every broker."},
	{Name: "tandem_mirror_fetch_requests_total", Type: prom.Counter, Help: "Fetch requests a mirror fetcher sent to its source broker."},
	{Name: "tandem_mirror_fetch_bytes_total", Type: prom.Counter, Help: "Bytes of record batches a mirror fetcher appended."},
	{Name: "tandem_mirror_source_contact_age_seconds", Type: prom.Gauge, Help: "Seconds since the mirror's source cluster last answered; NaN if it never did."},
	{Name: "tandem_mirror_diverged_records", Type: prom.Gauge, Help: "Records truncations removed from the mirror's partitions (copied to <topic>.diverged first), per the divergence manifest."},
	{Name: "tandem_mirror_diverged_ranges", Type: prom.Gauge, Help: "Entries of the mirror's divergence manifest."},
	{Name: "tandem_mirror_metadata_refresh_errors_total", Type: prom.Counter, Help: "Metadata refreshes from the mirror's source that failed."},
	{Name: "tandem_mirror_topic_config_sync_errors_total", Type: prom.Counter, Help: "Topic config syncs of the mirror that failed."},
	{Name: "tandem_mirror_group_offset_sync_errors_total", Type: prom.Counter, Help: "Consumer and share group offset syncs of the mirror that failed."},
	{Name: "tandem_mirror_acl_sync_errors_total", Type: prom.Counter, Help: "ACL syncs of the mirror that failed."},
	{Name: "tandem_mirror_metadata_sync_duration_seconds", Type: prom.Histogram, Help: "Time one metadata sync cycle of the mirror took, in seconds."},
	{Name: "tandem_mirror_metadata_sync_last_success_timestamp_seconds", Type: prom.Gauge, Help: "When a metadata sync cycle of the mirror last succeeded, in seconds since the Unix epoch."},
	{Name: "tandem_mirror_source_cluster_id_mismatch", Type: prom.Gauge, Help: "1 when the mirror's source answers with another cluster ID than it first had (its sync is halted), else 0."},
}

// pluginMetrics are the mirror metrics on the broker's metrics set. A
// lag that is not known (the source's end offset never learned) is NaN,
// never 0.
type pluginMetrics struct {
	p   *Plugin
	set *prom.Set

	mu       sync.Mutex // taken after run.mu, never before
	parts    map[*mirrorRun]map[topicPartition]partMetrics
	runNames map[*mirrorRun][]string
	fetchers map[*mirrorRun]map[fetch.Key]*fetcherStats
}

type partMetrics struct {
	fetcher fetch.Key
	names   []string
}

func newPluginMetrics(p *Plugin, set *prom.Set) *pluginMetrics {
	set.Describe(mirrorFamilies...)
	return &pluginMetrics{p: p, set: set, parts: map[*mirrorRun]map[topicPartition]partMetrics{}, runNames: map[*mirrorRun][]string{},
		fetchers: map[*mirrorRun]map[fetch.Key]*fetcherStats{}}
}

// metricStates are the states tandem_mirror_partitions counts, each
// written (0 included) so that a query by state always finds a series.
var metricStates = []mirrorstate.State{mirrorstate.Preparing, mirrorstate.Mirroring, mirrorstate.EpochFencing, mirrorstate.Pausing, mirrorstate.Paused, mirrorstate.Stopping, mirrorstate.Stopped, mirrorstate.Failed}

// trackRun registers a mirror's own gauges as its run starts.
func (m *pluginMetrics) trackRun(r *mirrorRun) {
	label := fmt.Sprintf("{mirror=%q}", r.name)
	gauges := map[string]func() float64{
		"tandem_mirror_max_lag_records" + label: func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			lag := int64(0)
			for _, pt := range r.parts {
				if !mirrorview.NeedsSource(pt.state) {
					continue
				}
				l := pt.lag()
				if l < 0 {
					return math.NaN()
				}
				lag = max(lag, l)
			}
			return float64(lag)
		},
		"tandem_mirror_source_contact_age_seconds" + label: func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.contact.IsZero() {
				return math.NaN()
			}
			return time.Since(r.contact).Seconds()
		},
		// The divergence manifest: what truncations took from the
		// mirror's partitions (copied to <topic>.diverged first).
		"tandem_mirror_diverged_records" + label: m.diverged(r, func(d mirrorproto.DivergedRange) float64 { return float64(d.Records) }),
		"tandem_mirror_diverged_ranges" + label:  m.diverged(r, func(mirrorproto.DivergedRange) float64 { return 1 }),
	}
	for _, h := range []string{mirrorview.HealthOK, mirrorview.HealthNoLeader, mirrorview.HealthUnderMinISR} {
		gauges[fmt.Sprintf("tandem_mirror_destination_partitions{mirror=%q,health=%q}", r.name, h)] = func() float64 {
			return float64(mirrorview.DestinationCounts(m.p.Image(), r.name, m.p.cfg.MinISR)[h])
		}
	}
	for _, s := range metricStates {
		gauges[fmt.Sprintf("tandem_mirror_partitions{mirror=%q,state=%q}", r.name, s)] = func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			n := 0
			for _, pt := range r.parts {
				if r.shownState(pt) == s { // cut off from the source: FAILED, as every view says
					n++
				}
			}
			return float64(n)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, f := range gauges {
		m.set.GetOrCreateGauge(name, f)
		m.runNames[r] = append(m.runNames[r], name)
	}
}

func (m *pluginMetrics) diverged(r *mirrorRun, of func(mirrorproto.DivergedRange) float64) func() float64 {
	return func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var n float64
		for _, d := range m.p.store.Manifest(ctx, r.name) {
			n += of(d)
		}
		return n
	}
}

func clientID(r *mirrorRun, k fetch.Key) string {
	return fmt.Sprintf("MirrorFetcherThread-%d-%d-%s", k.Broker, k.ID, r.name)
}

// trackPart registers a partition's lag gauges under its fetcher's client
// ID, again whenever the partition moves to another fetcher (its source
// leader changed); r.mu is held.
func (m *pluginMetrics) trackPart(r *mirrorRun, pt *ledPartition) {
	k := pt.fetchKey
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parts[r] == nil {
		m.parts[r] = map[topicPartition]partMetrics{}
	}
	if old, ok := m.parts[r][pt.topicPartition]; ok {
		if old.fetcher == k {
			return
		}
		m.unregister(old.names)
	}
	labels := fmt.Sprintf(`{mirror=%q,topic=%q,partition="%d",client_id=%q}`, r.name, pt.Topic, pt.Partition, clientID(r, k))
	if pt.src != pt.Topic { // a prefixed mirror: the source's name too
		labels = fmt.Sprintf(`{mirror=%q,topic=%q,source_topic=%q,partition="%d",client_id=%q}`, r.name, pt.Topic, pt.src, pt.Partition, clientID(r, k))
	}
	lag := "tandem_mirror_lag_records" + labels
	lagSeconds := "tandem_mirror_lag_seconds" + labels
	m.set.GetOrCreateGauge(lag, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if l := pt.lag(); l >= 0 {
			return float64(l)
		}
		return math.NaN()
	})
	m.set.GetOrCreateGauge(lagSeconds, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if pt.lagMs < 0 {
			return math.NaN()
		}
		return float64(pt.lagMs) / 1000
	})
	age := "tandem_mirror_source_offset_age_seconds" + labels
	m.set.GetOrCreateGauge(age, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if pt.srcEnd < 0 {
			return math.NaN()
		}
		return time.Since(pt.endAt()).Seconds()
	})
	m.parts[r][pt.topicPartition] = partMetrics{fetcher: k, names: []string{lag, lagSeconds, age}}
}

func (m *pluginMetrics) unregister(names []string) {
	for _, n := range names {
		m.set.UnregisterMetric(n)
	}
}

// forgetPart unregisters a partition's gauges; r.mu is held.
func (m *pluginMetrics) forgetPart(r *mirrorRun, k topicPartition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unregister(m.parts[r][k].names)
	delete(m.parts[r], k)
}

// fetcherStats registers a fetcher's counters; r.mu is held.
func (m *pluginMetrics) fetcherStats(r *mirrorRun, k fetch.Key, host string, port int32) *fetcherStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fetchers[r] == nil {
		m.fetchers[r] = map[fetch.Key]*fetcherStats{}
	}
	if f := m.fetchers[r][k]; f != nil {
		return f
	}
	labels := fmt.Sprintf(`{mirror=%q,client_id=%q,broker_host=%q,broker_port="%d"}`, r.name, clientID(r, k), host, port)
	f := &fetcherStats{names: []string{"tandem_mirror_fetch_requests_total" + labels, "tandem_mirror_fetch_bytes_total" + labels}}
	f.requests = m.set.GetOrCreateCounter(f.names[0])
	f.bytes = m.set.GetOrCreateCounter(f.names[1])
	m.fetchers[r][k] = f
	return f
}

// forget unregisters a stopped run's metrics.
func (m *pluginMetrics) forget(r *mirrorRun) {
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

// fetcherStats are one fetcher's counters.
type fetcherStats struct {
	names           []string
	requests, bytes *metrics.Counter
}
