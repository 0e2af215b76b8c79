package metasync

import (
	"maps"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

func topicACL(name, principal string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) metadata.ACL {
	return metadata.ACL{ResourceType: int8(kmsg.ACLResourceTypeTopic), ResourceName: name, PatternType: int8(kmsg.ACLResourcePatternTypeLiteral),
		Principal: principal, Host: "*", Operation: int8(op), Permission: int8(perm)}
}

func TestACLRules(t *testing.T) {
	read, write := kmsg.ACLOperationRead, kmsg.ACLOperationWrite
	allow, deny := kmsg.ACLPermissionTypeAllow, kmsg.ACLPermissionTypeDeny
	group := topicACL("g1", "User:bob", read, allow)
	group.ResourceType = int8(kmsg.ACLResourceTypeGroup)
	for _, tc := range []struct {
		rules string
		acl   metadata.ACL
		want  bool
	}{
		{"*", topicACL("t", "User:a", read, allow), true},
		{"", topicACL("t", "User:a", read, allow), false},
		{"TOPIC", topicACL("t", "User:a", read, deny), true},
		{"TOPIC", group, false},
		{"topic;orders.*", topicACL("orders-eu", "User:a", read, allow), true},
		{"TOPIC;orders.*", topicACL("xorders", "User:a", read, allow), false}, // anchored
		{"TOPIC;*;WRITE", topicACL("t", "User:a", read, allow), false},
		{"TOPIC;*;WRITE", topicACL("t", "User:a", write, allow), true},
		{"*;*;*;DENY", topicACL("t", "User:a", write, deny), true},
		{"*;*;*;DENY", topicACL("t", "User:a", write, allow), false},
		{"*;*;*;*;User:bob", topicACL("t", "User:a", read, allow), false},
		{"*;*;*;*;User:bob", group, true},
		{"TOPIC;nomatch, GROUP;g.;READ;ALLOW;User:bob", group, true},
	} {
		rules, err := mirrorcfg.ParseACLRules(tc.rules)
		if err != nil {
			t.Fatalf("%q: %v", tc.rules, err)
		}
		if got := aclIncluded(rules, tc.acl); got != tc.want {
			t.Errorf("rules %q on %+v: %v, want %v", tc.rules, tc.acl, got, tc.want)
		}
	}
	for _, bad := range []string{"NOTATYPE", "TOPIC;(", "TOPIC;*;FLY", "TOPIC;*;READ;MAYBE", "a;b;c;d;e;f"} {
		if _, err := mirrorcfg.ParseACLRules(bad); err == nil {
			t.Errorf("rules %q parsed", bad)
		}
	}
}

func TestPlanACLs(t *testing.T) {
	read := kmsg.ACLOperationRead
	allow, deny := kmsg.ACLPermissionTypeAllow, kmsg.ACLPermissionTypeDeny
	a := topicACL("a", "User:x", read, allow)
	b := topicACL("b", "User:x", read, deny)
	c := topicACL("c", "User:x", read, allow) // made by hand on the destination
	d := topicACL("d", "User:x", read, allow) // copied earlier, gone from the source
	e := topicACL("e", "User:x", read, allow) // on the source, not included
	rules, _ := mirrorcfg.ParseACLRules("TOPIC;[abcd]")
	p := planACLs([]metadata.ACL{a, b, c, e}, []metadata.ACL{c, d}, []metadata.ACL{d}, rules)
	if !slices.Equal(p.create, []metadata.ACL{a, b}) {
		t.Errorf("create %v", p.create)
	}
	if !slices.Equal(p.delete, []metadata.ACL{d}) {
		t.Errorf("delete %v", p.delete)
	}
	if !slices.Equal(p.managed, []metadata.ACL{a, b}) { // c stays the operator's
		t.Errorf("managed %v", p.managed)
	}
	// Steady state: nothing to do.
	p = planACLs([]metadata.ACL{a, b, c}, []metadata.ACL{a, b, c}, []metadata.ACL{a, b}, rules)
	if len(p.create)+len(p.delete) != 0 || !slices.Equal(p.managed, []metadata.ACL{a, b}) {
		t.Errorf("steady state plan %+v", p)
	}
	// Rules narrowed: a managed binding no longer included is deleted,
	// a hand-made one is not.
	narrow, _ := mirrorcfg.ParseACLRules("TOPIC;b")
	p = planACLs([]metadata.ACL{a, b, c}, []metadata.ACL{a, b, c}, []metadata.ACL{a, b}, narrow)
	if !slices.Equal(p.delete, []metadata.ACL{a}) || !slices.Equal(p.managed, []metadata.ACL{b}) || len(p.create) != 0 {
		t.Errorf("narrowed plan %+v", p)
	}
}

func TestConfigChanges(t *testing.T) {
	ex := ExcludedProps(map[string]string{})
	if !ex["min.insync.replicas"] || !ex["mirror.name"] || ex["retention.ms"] {
		t.Fatalf("default exclusions %v", ex)
	}
	if ex := ExcludedProps(map[string]string{"mirror.topic.properties.exclude": "segment.bytes"}); !ex["mirror.name"] || !ex["segment.bytes"] || !ex["min.insync.replicas"] || ex["retention.ms"] {
		t.Fatalf("configured exclusions %v", ex)
	}
	dest := map[string]string{"retention.ms": "1000", "cleanup.policy": "compact", "min.insync.replicas": "2", "segment.ms": "5"}
	src := map[string]string{"retention.ms": "7200000", "cleanup.policy": "compact", "max.message.bytes": "100"}
	got := map[string]*string{}
	for _, c := range configChanges("t", dest, src, ex) {
		if c.Name != "t" || c.Resource != metadata.ConfigResourceTopic {
			t.Fatalf("change %+v", c)
		}
		got[c.Key] = c.Value
	}
	want := map[string]string{"retention.ms": "7200000", "max.message.bytes": "100", "segment.ms": "<deleted>"}
	flat := map[string]string{}
	for k, v := range got {
		flat[k] = "<deleted>"
		if v != nil {
			flat[k] = *v
		}
	}
	if !maps.Equal(flat, want) { // min.insync.replicas is excluded: left alone
		t.Fatalf("changes %v, want %v", flat, want)
	}
}

func TestParseFilters(t *testing.T) {
	f, err := parseFilters(map[string]string{"mirror.topics.include": `orders\..*, payments`, "mirror.topics.exclude": `orders\.tmp`})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"orders.eu": true, "payments": true, "payments2": false, "xorders.eu": false} {
		if anyMatch(f.topicsIn, name) != want {
			t.Errorf("include %s: %v", name, !want)
		}
	}
	if !anyMatch(f.topicsEx, "orders.tmp") || !anyMatch(f.groupsIn, "any-group") || len(f.acls) != 1 {
		t.Errorf("defaults: %+v", f)
	}
	if _, err := parseFilters(map[string]string{"mirror.groups.include": "("}); err == nil {
		t.Error("bad group pattern accepted")
	}
}
