package metasync

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// TestDiscoverable: what a mirror's discovery adds, by source name.
func TestDiscoverable(t *testing.T) {
	candidates := []string{"a.orders", "b.orders", "orders", "payments", "taken"}
	held := map[string]string{"payments": "b.payments"}
	sourceMirrors := map[string]string{"a.orders": "from-a"}
	taken := func(dest string) bool { return dest == "b.taken" || dest == "taken" }
	// With a prefix: never a mirror topic of the source (a copy of a
	// copy), whatever the patterns say.
	if got, want := discoverable(candidates, "b.", held, sourceMirrors, taken), []string{"b.orders", "orders"}; !slices.Equal(got, want) {
		t.Errorf("prefix b.: %v, want %v", got, want)
	}
	// Without one: as always, the source's mirror topics are candidates
	// (a chain A→B→C).
	if got, want := discoverable(candidates, "", held, sourceMirrors, taken), []string{"a.orders", "b.orders", "orders"}; !slices.Equal(got, want) {
		t.Errorf("no prefix: %v, want %v", got, want)
	}
}

// TestNeedSourceMirrors: a prefixed mirror asks the source for its
// mirror topics whenever its patterns select a topic it does not hold,
// also when it holds as many others (one the patterns no longer select).
func TestNeedSourceMirrors(t *testing.T) {
	held := map[string]string{"old": "b.old"}
	for _, c := range []struct {
		prefix     string
		candidates []string
		want       bool
	}{
		{"b.", []string{"a.orders"}, true},
		{"b.", []string{"a.orders", "old"}, true},
		{"b.", []string{"old"}, false},
		{"b.", nil, false},
		{"", []string{"a.orders"}, false},
	} {
		if got := needSourceMirrors(c.prefix, c.candidates, held); got != c.want {
			t.Errorf("prefix %q, candidates %v, held %v: %v, want %v", c.prefix, c.candidates, held, got, c.want)
		}
	}
}

func TestFailedOver(t *testing.T) {
	parts := func(states ...string) mirrorproto.DescribedTopic {
		var dt mirrorproto.DescribedTopic
		for i, s := range states {
			dt.Partitions = append(dt.Partitions, mirrorproto.PartitionDetail{PartitionIndex: int32(i), State: s})
		}
		return dt
	}
	for _, tc := range []struct {
		t    mirrorproto.DescribedTopic
		want bool
	}{
		{parts("STOPPED", "STOPPED"), true},
		{parts("STOPPED", "STOPPING"), false},
		{parts("MIRRORING"), false},
		{parts(), false},
	} {
		if got := failedOver(tc.t); got != tc.want {
			t.Errorf("%+v: failed over %v, want %v", tc.t.Partitions, got, tc.want)
		}
	}
}

// TestOwnCopies: the source's copies of this cluster's own topics are
// found by topic ID; a topic here that a mirror writes is not ours.
func TestOwnCopies(t *testing.T) {
	orders, audit, mirrored := uuid.Random(), uuid.Random(), uuid.Random()
	img := &metadata.Image{
		Topics:     map[string]*metadata.Topic{"orders": {Name: "orders", ID: orders}, "audit": {Name: "audit", ID: audit}, "a.x": {Name: "a.x", ID: mirrored}},
		TopicsByID: map[metadata.UUID]*metadata.Topic{},
	}
	for _, tp := range img.Topics {
		img.TopicsByID[tp.ID] = tp
	}
	img.Mirrors = map[string]*metadata.Mirror{"from-a": {Name: "from-a", Topics: map[string]metadata.MirrorTopic{"a.x": {ID: mirrored, Source: "x"}}}}
	src := map[string]srcTopic{
		"b.orders": {id: orders},           // the source's copy of our orders
		"audit":    {id: audit},            // the same name: not a copy under another name
		"x":        {id: mirrored},         // what we mirror from it
		"b.gone":   {id: uuid.Random()},    // nothing here
		"b.err":    {id: orders, err: 100}, // an error: not trusted
	}
	got := ownCopies(img, src)
	if len(got) != 1 || got["b.orders"] == nil || got["b.orders"].Name != "orders" {
		t.Fatalf("own copies %v, want b.orders → orders", got)
	}
}

// TestPrefixACLs: topic bindings move under the prefix (the wildcard
// becomes the prefix as a prefixed pattern); other resources keep their
// names; bindings under a prefix of the source's own mirrors are left
// out (no echo between two clusters mirroring each other); the rules
// select by the source's names.
func TestPrefixACLs(t *testing.T) {
	read, allow := kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
	lit := topicACL("orders", "User:a", read, allow)
	pre := topicACL("pay", "User:a", read, allow)
	pre.PatternType = int8(kmsg.ACLResourcePatternTypePrefixed)
	all := topicACL("*", "User:a", read, allow)
	group := topicACL("g", "User:a", read, allow)
	group.ResourceType = int8(kmsg.ACLResourceTypeGroup)
	theirs := topicACL("a.orders", "User:a", read, allow) // on the source's copy of ours
	theirsPre := topicACL("a.", "User:a", read, allow)
	theirsPre.PatternType = int8(kmsg.ACLResourcePatternTypePrefixed)
	rules, err := mirrorcfg.ParseACLRules("*")
	if err != nil {
		t.Fatal(err)
	}
	got := prefixACLs([]metadata.ACL{lit, pre, all, group, theirs, theirsPre}, rules, "b.", []string{"a."})
	wantLit, wantPre, wantAll := lit, pre, all
	wantLit.ResourceName, wantPre.ResourceName = "b.orders", "b.pay"
	wantAll.ResourceName, wantAll.PatternType = "b.", int8(kmsg.ACLResourcePatternTypePrefixed)
	if want := []metadata.ACL{wantLit, wantPre, wantAll, group}; !slices.Equal(got, want) {
		t.Fatalf("prefixed bindings:\n got %+v\nwant %+v", got, want)
	}
	narrow, err := mirrorcfg.ParseACLRules("TOPIC;orders;*;*;*")
	if err != nil {
		t.Fatal(err)
	}
	if got := prefixACLs([]metadata.ACL{lit, pre}, narrow, "b.", nil); !slices.Equal(got, []metadata.ACL{wantLit}) {
		t.Fatalf("rules on the source's names: %+v, want only b.orders", got)
	}
}

func TestRenameShareOffsets(t *testing.T) {
	src := kadm.ShareOffsets{"orders": {0: {StartOffset: 5}}, "other": {0: {StartOffset: 1}}}
	got := renameShareOffsets(src, map[string]string{"orders": "a.orders"})
	if len(got) != 1 || got["a.orders"][0].StartOffset != 5 {
		t.Fatalf("renamed %v, want a.orders only", got)
	}
}
