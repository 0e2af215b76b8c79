package server

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// pluginNamespaces are the property prefixes only a plugin acts on, with
// what they ask for. A key there that no PropsOwner owns would be ignored.
var pluginNamespaces = []struct{ prefix, what string }{
	{"mirror.", "cluster mirroring (the mirror plugin)"},
	{"transaction.", "transactions (the txn plugin)"},
	{"offsets.", "consumer groups (the groups plugin)"},
	{"group.", "consumer groups (the groups plugin)"},
	{"offset.metadata.max.bytes", "consumer groups (the groups plugin)"},
}

// saslMechanismsKey is sasl.enabled.mechanisms, also per listener.
var saslMechanismsKey = regexp.MustCompile(`^(listener\.name\.[^.]+\.)?sasl\.enabled\.mechanisms$`)

// checkCapabilities refuses properties that ask for something no plugin
// provides: an authorizer, ACLs, SCRAM credentials (which only a plugin
// can create), or a plugin's own settings. Ignoring them would leave a
// broker running without what its operator asked for, such as an
// authorizer silently off. A property set to an empty value asks for
// nothing. The error is one line naming every such property.
func checkCapabilities(props map[string]string, plugins []any, apis *apiTable) error {
	scram := servedByPlugin(apis, kmsg.AlterUserSCRAMCredentials.Int16())
	var missing []string
	for _, k := range slices.Sorted(maps.Keys(props)) {
		v := strings.TrimSpace(props[k])
		if v == "" {
			continue
		}
		need := ""
		switch {
		case k == "authorizer.class.name":
			if !hasPlugin[plugin.Authorizer](plugins) {
				need = "an authorizer (the ACL plugin)"
			}
		case k == "super.users" || k == "allow.everyone.if.no.acl.found":
			if !hasPlugin[plugin.ACLStore](plugins) {
				need = "ACLs (the ACL plugin)"
			}
		case saslMechanismsKey.MatchString(k):
			if strings.Contains(strings.ToUpper(v), "SCRAM-") && !scram {
				need = "SCRAM credentials (the ACL plugin)"
			}
		default:
			for _, ns := range pluginNamespaces {
				if strings.HasPrefix(k, ns.prefix) && !ownedProp(plugins, k) {
					need = ns.what
					break
				}
			}
		}
		if need != "" {
			missing = append(missing, k+" needs "+need)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("no plugin of this broker provides what these properties ask for: %s", strings.Join(missing, "; "))
}

func hasPlugin[T any](plugins []any) bool {
	_, ok := plugin.Find[T](plugins)
	return ok
}

// ownedProp reports whether a plugin reads key (plugin.PropsOwner).
func ownedProp(plugins []any, key string) bool {
	return slices.ContainsFunc(plugin.All[plugin.PropsOwner](plugins), func(o plugin.PropsOwner) bool { return o.OwnsProp(key) })
}
