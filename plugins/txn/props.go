package txn

import "strings"

// OwnsProp implements plugin.PropsOwner: the transaction.* properties are
// this plugin's.
func (p *Plugin) OwnsProp(key string) bool { return strings.HasPrefix(key, "transaction.") }
