package groups

import (
	"strings"
)

// OwnsProp implements plugin.PropsOwner: the offsets.* and group.*
// properties (and offset.metadata.max.bytes) are this plugin's.
func (p *Plugin) OwnsProp(key string) bool {
	return strings.HasPrefix(key, "offsets.") || strings.HasPrefix(key, "group.") || key == "offset.metadata.max.bytes"
}
