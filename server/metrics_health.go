package server

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Consumer group lag, read by the alert rules and the dashboard of deploy/
// (docs/metrics.md); partition health is in clusterFamilies.
var healthFamilies = []prom.Family{
	{Name: "tandem_group_lag_records", Type: prom.Gauge, Help: "Records between a consumer group's committed offset and the partition's high watermark, for the groups this broker coordinates and the partitions it hosts."},
}

// groupLagTimeout bounds what a scrape waits for the group coordinators.
const groupLagTimeout = 2 * time.Second

func registerHealthMetrics(b *Broker) {
	s := b.metrics
	s.Describe(healthFamilies...)
	// The engine and the metadata quorum are opened by Start: read at
	// each scrape.
	s.RegisterMetricsWriter(func(w io.Writer) { writeGroupLag(w, b.cfg.Plugins, b.meta, b.engine) })
}

var labelValue = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// writeGroupLag writes tandem_group_lag_records, asking the groups
// plugin (plugin.GroupDescriber) at scrape time: group names come and go,
// and a scrape every few seconds costs one pass over the coordinators.
func writeGroupLag(w io.Writer, plugins []any, meta *raftmeta.Controller, eng *engine.Engine) {
	d, ok := plugin.Find[plugin.GroupDescriber](plugins)
	if !ok || meta == nil || eng == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupLagTimeout)
	defer cancel()
	img := meta.Image()
	for _, g := range d.DescribeGroups(ctx) {
		for tp, o := range g.Offsets {
			t := img.Topics[tp.Topic]
			if t == nil {
				continue
			}
			ep := eng.Partition(engine.TopicID(t.ID), tp.Partition)
			if ep == nil {
				continue
			}
			fmt.Fprintf(w, "tandem_group_lag_records{group=\"%s\",topic=\"%s\",partition=\"%d\"} %d\n",
				labelValue.Replace(g.Name), tp.Topic, tp.Partition, max(0, ep.Offsets().HighWatermark-o.Offset))
		}
	}
}
