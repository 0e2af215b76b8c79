package mirror

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta"
)

// aclRule is one mirror.acl.include rule:
// resourceType;resourceName;operation;permissionType;principal. A zero
// field (or a nil name) matches anything; the name is an anchored regular
// expression.
type aclRule struct {
	resourceType kmsg.ACLResourceType
	name         *regexp.Regexp
	operation    kmsg.ACLOperation
	permission   kmsg.ACLPermissionType
	principal    string
}

// parseACLRules parses mirror.acl.include: comma-separated rules whose
// trailing fields may be left out, "*" for any value.
func parseACLRules(s string) ([]aclRule, error) {
	var out []aclRule
	for _, rs := range strings.Split(s, ",") {
		if rs = strings.TrimSpace(rs); rs == "" {
			continue
		}
		f := strings.Split(rs, ";")
		if len(f) > 5 {
			return nil, fmt.Errorf("mirror.acl.include rule %q: more than 5 fields: %w", rs, kerr.InvalidConfig)
		}
		f = append(f, make([]string, 5-len(f))...)
		var r aclRule
		var err error
		field := func(i int) (string, bool) {
			v := strings.TrimSpace(f[i])
			return v, v != "" && v != "*"
		}
		if v, ok := field(0); ok {
			if r.resourceType, err = kmsg.ParseACLResourceType(v); err != nil || r.resourceType <= kmsg.ACLResourceTypeAny {
				return nil, fmt.Errorf("mirror.acl.include rule %q: resource type %q: %w", rs, v, kerr.InvalidConfig)
			}
		}
		if v, ok := field(1); ok {
			if r.name, err = regexp.Compile("^(?:" + v + ")$"); err != nil {
				return nil, fmt.Errorf("mirror.acl.include rule %q: resource name: %v: %w", rs, err, kerr.InvalidConfig)
			}
		}
		if v, ok := field(2); ok {
			if r.operation, err = kmsg.ParseACLOperation(v); err != nil || r.operation <= kmsg.ACLOperationAny {
				return nil, fmt.Errorf("mirror.acl.include rule %q: operation %q: %w", rs, v, kerr.InvalidConfig)
			}
		}
		if v, ok := field(3); ok {
			if r.permission, err = kmsg.ParseACLPermissionType(v); err != nil || r.permission <= kmsg.ACLPermissionTypeAny {
				return nil, fmt.Errorf("mirror.acl.include rule %q: permission type %q: %w", rs, v, kerr.InvalidConfig)
			}
		}
		r.principal, _ = field(4)
		if r.principal == "*" {
			r.principal = ""
		}
		out = append(out, r)
	}
	return out, nil
}

func (r aclRule) matches(a raftmeta.ACL) bool {
	return (r.resourceType == 0 || int8(r.resourceType) == a.ResourceType) &&
		(r.name == nil || r.name.MatchString(a.ResourceName)) &&
		(r.operation == 0 || int8(r.operation) == a.Operation) &&
		(r.permission == 0 || int8(r.permission) == a.Permission) &&
		(r.principal == "" || r.principal == a.Principal)
}

func aclIncluded(rules []aclRule, a raftmeta.ACL) bool {
	for _, r := range rules {
		if r.matches(a) {
			return true
		}
	}
	return false
}

// aclPlan is what one ACL sync does on the destination: create the
// included source bindings it lacks, then delete the bindings it created
// earlier that the source (or the rules) no longer have. Bindings created
// here by hand are never deleted. Creations come before deletions, so a
// DENY that moves (or an ALLOW replaced by a DENY) is never missing, and
// DENY bindings are copied like ALLOW ones (MirrorMaker 2 drops them).
type aclPlan struct {
	create  []raftmeta.ACL
	delete  []raftmeta.ACL
	managed []raftmeta.ACL // the managed set once both are done
}

func planACLs(source, dest, managed []raftmeta.ACL, rules []aclRule) aclPlan {
	want := map[raftmeta.ACL]bool{}
	for _, a := range source {
		if aclIncluded(rules, a) {
			want[a] = true
		}
	}
	have := map[raftmeta.ACL]bool{}
	for _, a := range dest {
		have[a] = true
	}
	var p aclPlan
	mine := map[raftmeta.ACL]bool{}
	for _, a := range managed {
		mine[a] = true
		if !want[a] && have[a] {
			p.delete = append(p.delete, a)
		}
	}
	for _, a := range source { // source order: stable plans
		if !want[a] {
			continue
		}
		if !have[a] {
			p.create = append(p.create, a)
			have[a] = true
			mine[a] = true
		}
		if mine[a] {
			p.managed = append(p.managed, a)
			delete(mine, a) // once, even if the source lists it twice
		}
	}
	return p
}

// sourceACLs converts a DescribeAcls response to bindings.
func sourceACLs(resp *kmsg.DescribeACLsResponse) []raftmeta.ACL {
	var out []raftmeta.ACL
	for _, r := range resp.Resources {
		for _, a := range r.ACLs {
			out = append(out, raftmeta.ACL{ResourceType: int8(r.ResourceType), ResourceName: r.ResourceName, PatternType: int8(r.ResourcePatternType),
				Principal: a.Principal, Host: a.Host, Operation: int8(a.Operation), Permission: int8(a.PermissionType)})
		}
	}
	return out
}

// exactFilter selects exactly one binding.
func exactFilter(a raftmeta.ACL) raftmeta.ACLFilter {
	return raftmeta.ACLFilter{ResourceType: a.ResourceType, ResourceName: &a.ResourceName, PatternType: a.PatternType,
		Principal: &a.Principal, Host: &a.Host, Operation: a.Operation, Permission: a.Permission}
}
