package mirrorcfg

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Regexps parses a comma-separated list of anchored regular
// expressions (nil for an empty list): mirror.topics.include and the
// other include/exclude lists.
func Regexps(key, s string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		re, err := regexp.Compile("^(?:" + p + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s pattern %q: %v: %w", key, p, err, kerr.InvalidConfig)
		}
		out = append(out, re)
	}
	return out, nil
}

// ACLRule is one mirror.acl.include rule:
// resourceType;resourceName;operation;permissionType;principal. A zero
// field (or a nil name) matches anything; the name is an anchored regular
// expression.
type ACLRule struct {
	ResourceType kmsg.ACLResourceType
	Name         *regexp.Regexp
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType
	Principal    string
}

// ParseACLRules parses mirror.acl.include: comma-separated rules whose
// trailing fields may be left out, "*" for any value.
func ParseACLRules(s string) ([]ACLRule, error) {
	var out []ACLRule
	for _, rs := range strings.Split(s, ",") {
		if rs = strings.TrimSpace(rs); rs == "" {
			continue
		}
		f := strings.Split(rs, ";")
		if len(f) > 5 {
			return nil, fmt.Errorf("mirror.acl.include rule %q: more than 5 fields: %w", rs, kerr.InvalidConfig)
		}
		f = append(f, make([]string, 5-len(f))...)
		var r ACLRule
		var err error
		field := func(i int) (string, bool) {
			v := strings.TrimSpace(f[i])
			return v, v != "" && v != "*"
		}
		if v, ok := field(0); ok {
			if r.ResourceType, err = kmsg.ParseACLResourceType(v); err != nil || r.ResourceType <= kmsg.ACLResourceTypeAny {
				return nil, fmt.Errorf("mirror.acl.include rule %q: resource type %q: %w", rs, v, kerr.InvalidConfig)
			}
		}
		if v, ok := field(1); ok {
			if r.Name, err = regexp.Compile("^(?:" + v + ")$"); err != nil {
				return nil, fmt.Errorf("mirror.acl.include rule %q: resource name: %v: %w", rs, err, kerr.InvalidConfig)
			}
		}
		if v, ok := field(2); ok {
			if r.Operation, err = kmsg.ParseACLOperation(v); err != nil || r.Operation <= kmsg.ACLOperationAny {
				return nil, fmt.Errorf("mirror.acl.include rule %q: operation %q: %w", rs, v, kerr.InvalidConfig)
			}
		}
		if v, ok := field(3); ok {
			if r.Permission, err = kmsg.ParseACLPermissionType(v); err != nil || r.Permission <= kmsg.ACLPermissionTypeAny {
				return nil, fmt.Errorf("mirror.acl.include rule %q: permission type %q: %w", rs, v, kerr.InvalidConfig)
			}
		}
		r.Principal, _ = field(4)
		if r.Principal == "*" {
			r.Principal = ""
		}
		out = append(out, r)
	}
	return out, nil
}
