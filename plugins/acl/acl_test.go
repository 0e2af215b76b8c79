package acl

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// start runs a broker with the plugin and its authorizer.
type authz interface {
	plugin.Authorizer
	plugin.AnyAuthorizer
}

func start(t *testing.T, props map[string]string) (*Plugin, authz) {
	t.Helper()
	p, err := New(props)
	if err != nil {
		t.Fatal(err)
	}
	b, err := server.New(server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Props: props,
		Plugins: []any{p, p.Authorizer()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return p, p.Authorizer().(authz)
}

func binding(typ kmsg.ACLResourceType, name string, pat kmsg.ACLResourcePatternType, principal, host string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) metadata.ACL {
	return metadata.ACL{ResourceType: int8(typ), ResourceName: name, PatternType: int8(pat), Principal: principal, Host: host, Operation: int8(op), Permission: int8(perm)}
}

const (
	topic   = kmsg.ACLResourceTypeTopic
	cluster = kmsg.ACLResourceTypeCluster
	lit     = kmsg.ACLResourcePatternTypeLiteral
	pre     = kmsg.ACLResourcePatternTypePrefixed
	allow   = kmsg.ACLPermissionTypeAllow
	deny    = kmsg.ACLPermissionTypeDeny
)

func TestAuthorize(t *testing.T) {
	p, a := start(t, map[string]string{"super.users": "User:root; User:CN=ops,O=corp"})
	ctx := context.Background()
	err := p.CreateACLs(ctx, []metadata.ACL{
		binding(topic, "orders", lit, "User:alice", "*", kmsg.ACLOperationRead, allow),
		binding(topic, "billing-", pre, "User:alice", "*", kmsg.ACLOperationWrite, allow),
		binding(topic, "billing-secret", lit, "User:alice", "*", kmsg.ACLOperationAll, deny),
		binding(topic, "*", lit, "User:*", "10.0.0.7", kmsg.ACLOperationDescribe, allow),
		binding(topic, "cfg", lit, "User:bob", "*", kmsg.ACLOperationAlterConfigs, allow),
		binding(topic, "cfg", lit, "User:bob", "*", kmsg.ACLOperationRead, deny),
		binding(cluster, "kafka-cluster", lit, "User:carol", "127.0.0.1", kmsg.ACLOperationIdempotentWrite, allow),
	})
	if err != nil {
		t.Fatal(err)
	}
	rc := func(principal, host string) *plugin.RequestContext {
		return &plugin.RequestContext{Principal: principal, ClientAddr: host + ":5555"}
	}
	for _, c := range []struct {
		what      string
		principal string
		host      string
		op        kmsg.ACLOperation
		typ       kmsg.ACLResourceType
		name      string
		want      bool
	}{
		{"literal allow", "User:alice", "127.0.0.1", kmsg.ACLOperationRead, topic, "orders", true},
		{"READ implies DESCRIBE", "User:alice", "127.0.0.1", kmsg.ACLOperationDescribe, topic, "orders", true},
		{"READ does not imply WRITE", "User:alice", "127.0.0.1", kmsg.ACLOperationWrite, topic, "orders", false},
		{"prefixed allow", "User:alice", "127.0.0.1", kmsg.ACLOperationWrite, topic, "billing-eu", true},
		{"WRITE implies DESCRIBE", "User:alice", "127.0.0.1", kmsg.ACLOperationDescribe, topic, "billing-eu", true},
		{"DENY ALL over prefixed allow", "User:alice", "127.0.0.1", kmsg.ACLOperationWrite, topic, "billing-secret", false},
		{"no binding for the principal", "User:bob", "127.0.0.1", kmsg.ACLOperationRead, topic, "orders", false},
		{"wildcard principal and resource, matching host", "User:dave", "10.0.0.7", kmsg.ACLOperationDescribe, topic, "anything", true},
		{"wildcard, other host", "User:dave", "10.0.0.8", kmsg.ACLOperationDescribe, topic, "anything", false},
		{"ALTER_CONFIGS implies DESCRIBE_CONFIGS", "User:bob", "127.0.0.1", kmsg.ACLOperationDescribeConfigs, topic, "cfg", true},
		{"DENY READ leaves DESCRIBE_CONFIGS", "User:bob", "127.0.0.1", kmsg.ACLOperationRead, topic, "cfg", false},
		{"cluster op, host match", "User:carol", "127.0.0.1", kmsg.ACLOperationIdempotentWrite, cluster, "kafka-cluster", true},
		{"cluster op, host mismatch", "User:carol", "10.0.0.1", kmsg.ACLOperationIdempotentWrite, cluster, "kafka-cluster", false},
		{"no ACL on the resource: denied by default", "User:alice", "127.0.0.1", kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, "g", false},
		{"super user", "User:root", "127.0.0.1", kmsg.ACLOperationAlter, cluster, "kafka-cluster", true},
		{"super user by certificate DN", "User:CN=ops,O=corp", "127.0.0.1", kmsg.ACLOperationDelete, topic, "orders", true},
	} {
		if got := a.Authorize(rc(c.principal, c.host), c.op, c.typ, c.name); got != c.want {
			t.Errorf("%s: Authorize = %v, want %v", c.what, got, c.want)
		}
	}

	// KIP-679's "WRITE on any topic".
	if !a.AuthorizeAny(rc("User:alice", "127.0.0.1"), kmsg.ACLOperationWrite, topic) {
		t.Error("alice has WRITE on billing-*: AuthorizeAny = false")
	}
	if a.AuthorizeAny(rc("User:bob", "127.0.0.1"), kmsg.ACLOperationWrite, topic) {
		t.Error("bob has no WRITE binding: AuthorizeAny = true")
	}
	if err := p.CreateACLs(ctx, []metadata.ACL{binding(topic, "*", lit, "User:alice", "*", kmsg.ACLOperationWrite, deny)}); err != nil {
		t.Fatal(err)
	}
	if a.AuthorizeAny(rc("User:alice", "127.0.0.1"), kmsg.ACLOperationWrite, topic) {
		t.Error("a wildcard DENY covers every WRITE: AuthorizeAny = true")
	}

	// The ACLStore view: MATCH finds what applies to a name; delete.
	name := "billing-secret"
	f := metadata.ACLFilter{ResourceType: int8(topic), ResourceName: &name, PatternType: int8(kmsg.ACLResourcePatternTypeMatch), Operation: 1, Permission: 1}
	if got := p.DescribeACLs(f); len(got) != 4 { // billing- prefix, billing-secret, the two "*" bindings
		t.Fatalf("MATCH billing-secret: %+v", got)
	}
	principal := "User:alice"
	gone, err := p.DeleteACLs(ctx, []metadata.ACLFilter{{ResourceType: 1, PatternType: 1, Principal: &principal, Operation: 1, Permission: 1}})
	if err != nil || len(gone) != 4 {
		t.Fatalf("delete alice's bindings: %d, %v", len(gone), err)
	}
	if a.Authorize(rc("User:alice", "127.0.0.1"), kmsg.ACLOperationRead, topic, "orders") {
		t.Error("alice still reads after her bindings were deleted")
	}
}

func TestAllowEveryoneIfNoACL(t *testing.T) {
	p, a := start(t, map[string]string{"allow.everyone.if.no.acl.found": "true"})
	rc := &plugin.RequestContext{Principal: "User:anyone", ClientAddr: "127.0.0.1:1"}
	if !a.Authorize(rc, kmsg.ACLOperationWrite, topic, "free") {
		t.Fatal("no ACL and allow.everyone.if.no.acl.found: refused")
	}
	if err := p.CreateACLs(context.Background(), []metadata.ACL{binding(topic, "fre", pre, "User:other", "*", kmsg.ACLOperationRead, allow)}); err != nil {
		t.Fatal(err)
	}
	if a.Authorize(rc, kmsg.ACLOperationWrite, topic, "free") {
		t.Fatal("a binding now applies to the topic: allowed anyway")
	}
	if _, err := New(map[string]string{"super.users": "root"}); err == nil {
		t.Fatal("super.users entry without a type accepted")
	}
}
