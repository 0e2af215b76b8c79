package server

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Partition health and consumer group lag, the families the alert rules
// and the dashboard of deploy/ read besides the others (docs/metrics.md).
var healthFamilies = []prom.Family{
	{Name: "tandem_server_under_replicated_partitions", Type: prom.Gauge, Help: "Partitions this broker leads whose in-sync replicas are fewer than their replicas."},
	{Name: "tandem_server_offline_partitions", Type: prom.Gauge, Help: "Partitions without a leader in the metadata image this broker has (every broker reports the cluster's)."},
	{Name: "tandem_group_lag_records", Type: prom.Gauge, Help: "Records between a consumer group's committed offset and the partition's high watermark, for the groups this broker coordinates and the partitions it hosts."},
}

// groupLagTimeout bounds what a scrape waits for the group coordinators.
const groupLagTimeout = 2 * time.Second

func registerHealthMetrics(b *Broker) {
	s := b.metrics
	s.Describe(healthFamilies...)
	s.NewGauge("tandem_server_under_replicated_partitions", func() float64 {
		return float64(b.countPartitions(func(p leaderISR) bool { return p.leader == b.cfg.NodeID && p.isr < p.replicas }))
	})
	s.NewGauge("tandem_server_offline_partitions", func() float64 {
		return float64(b.countPartitions(func(p leaderISR) bool { return p.leader < 0 }))
	})
	s.RegisterMetricsWriter(b.writeGroupLag)
}

type leaderISR struct {
	leader        int32
	isr, replicas int
}

// countPartitions counts the partitions of the metadata image that match.
func (b *Broker) countPartitions(match func(leaderISR) bool) int {
	if b.meta == nil {
		return 0
	}
	n := 0
	for _, t := range b.meta.Image().Topics {
		for _, p := range t.Partitions {
			if match(leaderISR{p.Leader, len(p.ISR), len(p.Replicas)}) {
				n++
			}
		}
	}
	return n
}

var labelValue = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// writeGroupLag writes tandem_group_lag_records, asking the groups
// plugin (plugin.GroupDescriber) at scrape time: group names come and go,
// and a scrape every few seconds costs one pass over the coordinators.
func (b *Broker) writeGroupLag(w io.Writer) {
	d, ok := plugin.Find[plugin.GroupDescriber](b.cfg.Plugins)
	if !ok || b.meta == nil || b.engine == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupLagTimeout)
	defer cancel()
	img := b.meta.Image()
	for _, g := range d.DescribeGroups(ctx) {
		for tp, o := range g.Offsets {
			t := img.Topics[tp.Topic]
			if t == nil {
				continue
			}
			ep := b.engine.Partition(engine.TopicID(t.ID), tp.Partition)
			if ep == nil {
				continue
			}
			fmt.Fprintf(w, "tandem_group_lag_records{group=\"%s\",topic=\"%s\",partition=\"%d\"} %d\n",
				labelValue.Replace(g.Name), tp.Topic, tp.Partition, max(0, ep.Offsets().HighWatermark-o.Offset))
		}
	}
}
