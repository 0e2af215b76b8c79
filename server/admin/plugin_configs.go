package admin

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// configHandler returns the plugin serving configs of resource type typ,
// nil if none does.
func (a *Admin) configHandler(typ kmsg.ConfigResourceType) plugin.ConfigResourceHandler {
	for _, h := range plugin.All[plugin.ConfigResourceHandler](a.Plugins) {
		if h.ConfigResourceType() == typ {
			return h
		}
	}
	return nil
}
