// Package mirrormetrics is the mirror plugin's metrics on the broker's
// metrics set: the families, each run's gauges (partitions by state, the
// largest lag, the source's last answer, the divergence manifest, the
// destination's health), each partition's lag gauges under its
// fetcher's client ID, each fetcher's counters, and their removal when
// a partition moves or a run stops. A lag that is not known (the
// source's end offset never learned) is NaN, never 0. What each gauge
// reads is the run's, through Run and Partition.
package mirrormetrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tandem-kafka/tandem/plugins/mirror/fetch"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorview"
	"github.com/tandem-kafka/tandem/prom"
)

// Families are the mirror plugin's metric families, labelled with
// mirror, topic, partition and client_id (the KIP's fetcher client ID,
// MirrorFetcherThread-{source broker}-{fetcher}-{mirror}) as they apply.
// docs/metrics.md maps the KIP's metrics onto them: the KIP's per-second
// rates are rate() of the counters here, its broker-wide counts sums.
var Families = []prom.Family{
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

// Run is a mirror's run as its gauges read it; each method takes the
// run's lock itself.
type Run interface {
	// Name is the mirror's name.
	Name() string
	// MaxLagRecords is the largest lag in records of the run's
	// partitions that need the source; NaN while one is unknown.
	MaxLagRecords() float64
	// SourceContactAge is the seconds since the source last answered;
	// NaN if it never did.
	SourceContactAge() float64
	// PartitionsIn counts the run's partitions shown in state s.
	PartitionsIn(s mirrorstate.State) float64
	// Manifest is the mirror's divergence manifest on this broker.
	Manifest(ctx context.Context) []mirrorproto.DivergedRange
	// DestinationCounts counts the partitions of the mirror's topics
	// here by destination health (mirrorview.DestinationCounts).
	DestinationCounts() map[string]int
}

// Partition is a partition's lag as its gauges read it; each method
// takes the run's lock itself. NaN while unknown.
type Partition interface {
	LagRecords() float64
	LagSeconds() float64
	SourceOffsetAge() float64
}

// Set is the mirror metrics on the broker's metrics set.
type Set struct {
	set *prom.Set

	mu sync.Mutex // taken after the run's lock, never before
	// Each run's series are on a set of its own (prom.Set.Add), dropped
	// whole when the run stops.
	runs     map[Run]*metrics.Set
	parts    map[Run]map[mirrorstate.TopicPartition]partMetrics
	fetchers map[Run]map[fetch.Key]*FetcherStats
}

type partMetrics struct {
	fetcher fetch.Key
	names   []string
}

// New describes the families on set and returns the mirror metrics on
// it.
func New(set *prom.Set) *Set {
	set.Describe(Families...)
	return &Set{set: set, runs: map[Run]*metrics.Set{}, parts: map[Run]map[mirrorstate.TopicPartition]partMetrics{},
		fetchers: map[Run]map[fetch.Key]*FetcherStats{}}
}

// run is r's own set, added to the broker's on first use; m.mu is held.
func (m *Set) run(r Run) *metrics.Set {
	rs := m.runs[r]
	if rs == nil {
		rs = metrics.NewSet()
		m.runs[r] = rs
		m.set.Add(rs)
	}
	return rs
}

// States are the states tandem_mirror_partitions counts, each
// written (0 included) so that a query by state always finds a series.
var States = []mirrorstate.State{mirrorstate.Preparing, mirrorstate.Mirroring, mirrorstate.EpochFencing, mirrorstate.Pausing, mirrorstate.Paused, mirrorstate.Stopping, mirrorstate.Stopped, mirrorstate.Failed}

// TrackRun registers a mirror's own gauges as its run starts.
func (m *Set) TrackRun(r Run) {
	label := fmt.Sprintf("{mirror=%q}", r.Name())
	gauges := map[string]func() float64{
		"tandem_mirror_max_lag_records" + label:            r.MaxLagRecords,
		"tandem_mirror_source_contact_age_seconds" + label: r.SourceContactAge,
		// The divergence manifest: what truncations took from the
		// mirror's partitions (copied to <topic>.diverged first).
		"tandem_mirror_diverged_records" + label: m.diverged(r, func(d mirrorproto.DivergedRange) float64 { return float64(d.Records) }),
		"tandem_mirror_diverged_ranges" + label:  m.diverged(r, func(mirrorproto.DivergedRange) float64 { return 1 }),
	}
	for _, h := range []string{mirrorview.HealthOK, mirrorview.HealthNoLeader, mirrorview.HealthUnderMinISR} {
		gauges[fmt.Sprintf("tandem_mirror_destination_partitions{mirror=%q,health=%q}", r.Name(), h)] = func() float64 {
			return float64(r.DestinationCounts()[h])
		}
	}
	for _, s := range States {
		gauges[fmt.Sprintf("tandem_mirror_partitions{mirror=%q,state=%q}", r.Name(), s)] = func() float64 {
			return r.PartitionsIn(s) // cut off from the source: FAILED, as every view says
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := m.run(r)
	for name, f := range gauges {
		rs.GetOrCreateGauge(name, f)
	}
}

func (m *Set) diverged(r Run, of func(mirrorproto.DivergedRange) float64) func() float64 {
	return func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var n float64
		for _, d := range r.Manifest(ctx) {
			n += of(d)
		}
		return n
	}
}

// ClientID is the KIP's client ID of mirror's fetcher k.
func ClientID(mirror string, k fetch.Key) string {
	return fmt.Sprintf("MirrorFetcherThread-%d-%d-%s", k.Broker, k.ID, mirror)
}

// TrackPart registers a partition's lag gauges (tp here, src on the
// source) under its fetcher k's client ID, again whenever the partition
// moves to another fetcher (its source leader changed); the run's lock
// is held.
func (m *Set) TrackPart(r Run, tp mirrorstate.TopicPartition, src string, k fetch.Key, pt Partition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parts[r] == nil {
		m.parts[r] = map[mirrorstate.TopicPartition]partMetrics{}
	}
	rs := m.run(r)
	if old, ok := m.parts[r][tp]; ok {
		if old.fetcher == k {
			return
		}
		unregister(rs, old.names)
	}
	name := r.Name()
	// source_topic on every series, the same name as topic unless the
	// mirror has a prefix: one label set per family, as Prometheus expects.
	labels := fmt.Sprintf(`{mirror=%q,topic=%q,source_topic=%q,partition="%d",client_id=%q}`, name, tp.Topic, src, tp.Partition, ClientID(name, k))
	lag := "tandem_mirror_lag_records" + labels
	lagSeconds := "tandem_mirror_lag_seconds" + labels
	rs.GetOrCreateGauge(lag, pt.LagRecords)
	rs.GetOrCreateGauge(lagSeconds, pt.LagSeconds)
	age := "tandem_mirror_source_offset_age_seconds" + labels
	rs.GetOrCreateGauge(age, pt.SourceOffsetAge)
	m.parts[r][tp] = partMetrics{fetcher: k, names: []string{lag, lagSeconds, age}}
}

func unregister(s *metrics.Set, names []string) {
	for _, n := range names {
		s.UnregisterMetric(n)
	}
}

// ForgetPart unregisters a partition's gauges; the run's lock is held.
func (m *Set) ForgetPart(r Run, k mirrorstate.TopicPartition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rs := m.runs[r]; rs != nil {
		unregister(rs, m.parts[r][k].names)
	}
	delete(m.parts[r], k)
}

// FetcherStats registers fetcher k's counters, labelled with its source
// broker's address; the run's lock is held.
func (m *Set) FetcherStats(r Run, k fetch.Key, host string, port int32) *FetcherStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fetchers[r] == nil {
		m.fetchers[r] = map[fetch.Key]*FetcherStats{}
	}
	if f := m.fetchers[r][k]; f != nil {
		return f
	}
	labels := fmt.Sprintf(`{mirror=%q,client_id=%q,broker_host=%q,broker_port="%d"}`, r.Name(), ClientID(r.Name(), k), host, port)
	f := &FetcherStats{names: []string{"tandem_mirror_fetch_requests_total" + labels, "tandem_mirror_fetch_bytes_total" + labels}}
	rs := m.run(r)
	f.Requests = rs.GetOrCreateCounter(f.names[0])
	f.Bytes = rs.GetOrCreateCounter(f.names[1])
	m.fetchers[r][k] = f
	return f
}

// Forget drops a stopped run's metrics, its set whole.
func (m *Set) Forget(r Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rs := m.runs[r]; rs != nil {
		m.set.Remove(rs)
	}
	delete(m.runs, r)
	delete(m.parts, r)
	delete(m.fetchers, r)
}

// FetcherStats are one fetcher's counters.
type FetcherStats struct {
	names           []string
	Requests, Bytes *metrics.Counter
}
