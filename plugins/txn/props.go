package txn

import "strings"

// OwnsProp implements server.PropsOwner: the transaction.* properties are
// this plugin's (it also reads offsets.topic.num.partitions, which the
// consumer-groups plugin owns).
func (p *Plugin) OwnsProp(key string) bool { return strings.HasPrefix(key, "transaction.") }
