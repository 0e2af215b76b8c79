package server

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// configHandler returns the plugin serving configs of resource type typ,
// nil if none does.
func (b *Broker) configHandler(typ kmsg.ConfigResourceType) plugin.ConfigResourceHandler {
	for _, h := range plugin.All[plugin.ConfigResourceHandler](b.cfg.Plugins) {
		if h.ConfigResourceType() == typ {
			return h
		}
	}
	return nil
}
