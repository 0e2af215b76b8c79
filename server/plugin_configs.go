package server

import (
	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// configHandler returns the plugin serving configs of resource type typ,
// nil if none does.
func (b *Broker) configHandler(typ kmsg.ConfigResourceType) ConfigResourceHandler {
	for _, p := range b.cfg.Plugins {
		if h, ok := p.(ConfigResourceHandler); ok && h.ConfigResourceType() == typ {
			return h
		}
	}
	return nil
}

// MetricsSet is the broker's metrics set (served at /metrics): plugins
// that find it on their Host by type assertion register their metrics
// there, so that each broker of a process has its own.
func (b *Broker) MetricsSet() *metrics.Set { return b.metrics }
