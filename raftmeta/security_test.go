package raftmeta

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

func TestSecurityRecords(t *testing.T) {
	n := newNode(t)
	c, ctx := n.c, ctxT(t)
	alice := metadata.ACL{ResourceType: 2, ResourceName: "orders", PatternType: 3, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3}
	pre := metadata.ACL{ResourceType: 2, ResourceName: "ord", PatternType: 4, Principal: "User:bob", Host: "*", Operation: 4, Permission: 3}
	star := metadata.ACL{ResourceType: 2, ResourceName: "*", PatternType: 3, Principal: "User:carol", Host: "*", Operation: 2, Permission: 2}
	if err := c.CreateACLs(ctx, []metadata.ACL{alice, pre, star, alice}); err != nil {
		t.Fatal(err)
	}
	if got := c.Image().ACLs; len(got) != 3 {
		t.Fatalf("ACLs = %+v, want 3 without duplicates", got)
	}
	bad := alice
	bad.PatternType = 2 // MATCH is a filter, never a binding
	wantCode(t, c.CreateACLs(ctx, []metadata.ACL{bad}), kerr.InvalidRequest)

	// MATCH finds the literal, the wildcard and the prefix binding.
	name := "orders"
	f := metadata.ACLFilter{ResourceType: 1, ResourceName: &name, PatternType: 2, Operation: 1, Permission: 1}
	var n1 int
	for _, a := range c.Image().ACLs {
		if f.Matches(a) {
			n1++
		}
	}
	if n1 != 3 {
		t.Fatalf("MATCH filter matched %d bindings, want 3", n1)
	}
	lit := metadata.ACLFilter{ResourceType: 2, ResourceName: &name, PatternType: 3, Operation: 1, Permission: 1}
	got, err := c.DeleteACLs(ctx, []metadata.ACLFilter{lit})
	if err != nil || len(got) != 1 || len(got[0]) != 1 || got[0][0] != alice {
		t.Fatalf("DeleteACLs = %+v, %v; want [[alice]]", got, err)
	}

	cred := metadata.ScramCredential{User: "alice", Mechanism: "SCRAM-SHA-256", Salt: []byte("s"), StoredKey: []byte("k"), ServerKey: []byte("v"), Iterations: 4096}
	if err := c.AlterScram(ctx, []metadata.ScramChange{{Credential: cred}}); err != nil {
		t.Fatal(err)
	}
	weak := cred
	weak.Iterations = 10
	wantCode(t, c.AlterScram(ctx, []metadata.ScramChange{{Credential: weak}}), kerr.UnacceptableCredential)
	wantCode(t, c.AlterScram(ctx, []metadata.ScramChange{{Credential: metadata.ScramCredential{User: "bob", Mechanism: "SCRAM-SHA-512"}, Delete: true}}), kerr.ResourceNotFound)

	client, rate := "slow", 1e6
	if err := c.AlterClientQuotas(ctx, []metadata.ClientQuotaRecord{{Entity: metadata.QuotaEntity{ClientID: &client}, Key: "producer_byte_rate", Value: &rate}}); err != nil {
		t.Fatal(err)
	}
	before := c.Image()
	if q := before.ClientQuotas["client-id=slow;"]; q.Values["producer_byte_rate"] != 1e6 {
		t.Fatalf("quota = %+v", before.ClientQuotas)
	}
	n.restart()
	after := n.c.Image()
	security := func(img *metadata.Image) []any { return []any{img.ACLs, img.Scram, img.ClientQuotas} }
	if !reflect.DeepEqual(security(before), security(after)) {
		t.Fatalf("restart lost security state:\n%+v\n%+v", security(before), security(after))
	}
	if d := metadata.Diff(before, after); d.SecurityChanged {
		t.Fatal("Diff reports a security change between equal images")
	}
	if err := n.c.AlterScram(ctx, []metadata.ScramChange{{Credential: cred, Delete: true}}); err != nil {
		t.Fatal(err)
	}
	if d := metadata.Diff(after, n.c.Image()); !d.SecurityChanged || n.c.Image().Scram != nil {
		t.Fatalf("delete credential: delta %+v, scram %+v", d, n.c.Image().Scram)
	}
}
