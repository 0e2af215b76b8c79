package metasync

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// ruleMatches reports whether a mirror.acl.include rule (parsed by
// mirrorcfg.ParseACLRules) matches a binding.
func ruleMatches(r mirrorcfg.ACLRule, a metadata.ACL) bool {
	return (r.ResourceType == 0 || int8(r.ResourceType) == a.ResourceType) &&
		(r.Name == nil || r.Name.MatchString(a.ResourceName)) &&
		(r.Operation == 0 || int8(r.Operation) == a.Operation) &&
		(r.Permission == 0 || int8(r.Permission) == a.Permission) &&
		(r.Principal == "" || r.Principal == a.Principal)
}

func aclIncluded(rules []mirrorcfg.ACLRule, a metadata.ACL) bool {
	for _, r := range rules {
		if ruleMatches(r, a) {
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
	create  []metadata.ACL
	delete  []metadata.ACL
	managed []metadata.ACL // the managed set once both are done
}

func planACLs(source, dest, managed []metadata.ACL, rules []mirrorcfg.ACLRule) aclPlan {
	want := map[metadata.ACL]bool{}
	for _, a := range source {
		if aclIncluded(rules, a) {
			want[a] = true
		}
	}
	have := map[metadata.ACL]bool{}
	for _, a := range dest {
		have[a] = true
	}
	var p aclPlan
	mine := map[metadata.ACL]bool{}
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
func sourceACLs(resp *kmsg.DescribeACLsResponse) []metadata.ACL {
	var out []metadata.ACL
	for _, r := range resp.Resources {
		for _, a := range r.ACLs {
			out = append(out, metadata.ACL{ResourceType: int8(r.ResourceType), ResourceName: r.ResourceName, PatternType: int8(r.ResourcePatternType),
				Principal: a.Principal, Host: a.Host, Operation: int8(a.Operation), Permission: int8(a.PermissionType)})
		}
	}
	return out
}

// exactFilter selects exactly one binding.
func exactFilter(a metadata.ACL) metadata.ACLFilter {
	return metadata.ACLFilter{ResourceType: a.ResourceType, ResourceName: &a.ResourceName, PatternType: a.PatternType,
		Principal: &a.Principal, Host: &a.Host, Operation: a.Operation, Permission: a.Permission}
}
