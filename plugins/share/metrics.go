package share

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// shareFamilies are the share groups' metric families (KIP-932 and
// KIP-1103's broker metrics, as docs/metrics.md maps them): Kafka's
// per-second meters are counters here, rate() makes them rates.
var shareFamilies = []prom.Family{
	{Name: "tandem_share_groups", Type: prom.Gauge, Help: "Share groups this broker coordinates, by state (label state: Empty, Stable, Dead)."},
	{Name: "tandem_share_partitions", Type: prom.Gauge, Help: "Share-partitions (a share group's view of a partition) loaded on this broker, the partitions' leader."},
	{Name: "tandem_share_sessions", Type: prom.Gauge, Help: "Open share sessions on this broker."},
	{Name: "tandem_share_fetch_requests_total", Type: prom.Counter, Help: "ShareFetch requests handled."},
	{Name: "tandem_share_fetch_errors_total", Type: prom.Counter, Help: "Partitions of ShareFetch requests answered with an error; a request refused as a whole counts once."},
	{Name: "tandem_share_acknowledge_requests_total", Type: prom.Counter, Help: "ShareAcknowledge requests handled."},
	{Name: "tandem_share_acknowledge_errors_total", Type: prom.Counter, Help: "Partitions of ShareAcknowledge requests, and of ShareFetch requests carrying acknowledgements, whose acknowledgements failed; a request refused as a whole counts once."},
	{Name: "tandem_share_acknowledged_records_total", Type: prom.Counter, Help: "Records acknowledged by share consumers, by acknowledgement type (label ack_type: accept, release, reject, renew)."},
	{Name: "tandem_share_acquired_records_total", Type: prom.Counter, Help: "Records acquired by share consumers (each delivery counts)."},
	{Name: "tandem_share_lock_expired_records_total", Type: prom.Counter, Help: "Acquired records whose acquisition lock expired before they were acknowledged."},
	{Name: "tandem_share_delivery_limit_archived_records_total", Type: prom.Counter, Help: "Records archived because they reached the delivery count limit (group.share.delivery.count.limit) when released or their lock expired."},
	{Name: "tandem_share_partition_load_seconds", Type: prom.Histogram, Help: "Time a share-partition took to load its state from the share coordinator, in seconds."},
	{Name: "tandem_share_state_writes_total", Type: prom.Counter, Help: "Share-partition state writes to __share_group_state."},
}

// ackTypes name the acknowledgement types in ack_type.
var ackTypes = map[int8]string{ackAccept: "accept", ackRelease: "release", ackReject: "reject", ackRenew: "renew"}

// shareMetrics are the plugin's counters. Before Start they live in a set
// of their own, so that nothing needs a nil check.
type shareMetrics struct {
	fetches, fetchErrs, acks, ackErrs *metrics.Counter
	acked                             map[int8]*metrics.Counter
	acquired, expired, limitArchived  *metrics.Counter
	writes                            *metrics.Counter
	loads                             *metrics.PrometheusHistogram
}

func newShareMetrics(set *prom.Set) *shareMetrics {
	m := &shareMetrics{
		fetches:       set.GetOrCreateCounter("tandem_share_fetch_requests_total"),
		fetchErrs:     set.GetOrCreateCounter("tandem_share_fetch_errors_total"),
		acks:          set.GetOrCreateCounter("tandem_share_acknowledge_requests_total"),
		ackErrs:       set.GetOrCreateCounter("tandem_share_acknowledge_errors_total"),
		acked:         map[int8]*metrics.Counter{},
		acquired:      set.GetOrCreateCounter("tandem_share_acquired_records_total"),
		expired:       set.GetOrCreateCounter("tandem_share_lock_expired_records_total"),
		limitArchived: set.GetOrCreateCounter("tandem_share_delivery_limit_archived_records_total"),
		writes:        set.GetOrCreateCounter("tandem_share_state_writes_total"),
		loads:         set.GetOrCreatePrometheusHistogram("tandem_share_partition_load_seconds"),
	}
	for t, name := range ackTypes {
		m.acked[t] = set.GetOrCreateCounter(fmt.Sprintf("tandem_share_acknowledged_records_total{ack_type=%q}", name))
	}
	return m
}

// startMetrics registers the plugin's metrics on the broker's set; the
// gauges are computed at scrape time.
func (p *Plugin) startMetrics(set *prom.Set) {
	set.Describe(shareFamilies...)
	m := newShareMetrics(set)
	p.m.Store(m)
	set.RegisterMetricsWriter(p.writeGauges)
}

// stats returns the plugin's counters. It takes no lock: share-partitions
// count under their own.
func (p *Plugin) stats() *shareMetrics { return p.m.Load() }

// groupStates are the share group states tandem_share_groups writes, each
// (0 included) so that a query by state always finds a series. A deleted
// group is gone at once here, so Dead is 0.
var groupStates = []string{"Empty", "Stable", "Dead"}

// groupCountTimeout bounds what a scrape waits for the group coordinators.
const groupCountTimeout = 2 * time.Second

func (p *Plugin) writeGauges(w io.Writer) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	parts, sessions := len(p.parts), len(p.sessions)
	p.mu.Unlock()
	fmt.Fprintf(w, "tandem_share_partitions %d\n", parts)
	fmt.Fprintf(w, "tandem_share_sessions %d\n", sessions)
	counts := map[string]int{}
	if h := p.Host(); h != nil {
		if d, ok := plugin.Find[plugin.GroupDescriber](h.Plugins()); ok {
			ctx, cancel := context.WithTimeout(context.Background(), groupCountTimeout)
			for _, g := range d.DescribeGroups(ctx) {
				if g.ProtocolType == "share" {
					counts[g.State]++
				}
			}
			cancel()
		}
	}
	for _, st := range groupStates {
		fmt.Fprintf(w, "tandem_share_groups{state=%q} %d\n", st, counts[st])
	}
}

// countFetch counts a ShareFetch request and the partitions it answered
// with an error.
func (m *shareMetrics) countFetch(resp *kmsg.ShareFetchResponse) {
	m.fetches.Inc()
	if resp.ErrorCode != 0 {
		m.fetchErrs.Inc()
		return
	}
	for _, t := range resp.Topics {
		for _, pt := range t.Partitions {
			if pt.ErrorCode != 0 {
				m.fetchErrs.Inc()
			}
			if pt.AcknowledgeErrorCode != 0 {
				m.ackErrs.Inc()
			}
		}
	}
}

// countAcknowledge counts a ShareAcknowledge request and the partitions
// whose acknowledgements failed.
func (m *shareMetrics) countAcknowledge(resp *kmsg.ShareAcknowledgeResponse) {
	m.acks.Inc()
	if resp.ErrorCode != 0 {
		m.ackErrs.Inc()
		return
	}
	for _, t := range resp.Topics {
		for _, pt := range t.Partitions {
			if pt.ErrorCode != 0 {
				m.ackErrs.Inc()
			}
		}
	}
}
