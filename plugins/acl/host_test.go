package acl

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// fakeHost is a plugin.Host whose metadata quorum is fakeMetadata; any
// other Host method the plugin calls panics on the nil embedded Host.
type fakeHost struct {
	plugin.Host
	md *fakeMetadata
}

func (h fakeHost) Metadata() plugin.Metadata { return h.md }

// fakeMetadata answers Image with a fixed image and records the ACL
// decisions asked of it; refuse is the error they return.
type fakeMetadata struct {
	plugin.Metadata
	img     *metadata.Image
	created []metadata.ACL
	refuse  error
}

func (m *fakeMetadata) Image() *metadata.Image { return m.img }

func (m *fakeMetadata) CreateACLs(_ context.Context, acls []metadata.ACL) error {
	m.created = append(m.created, acls...)
	return m.refuse
}

// TestCreateACLsFakeHost runs CreateAcls against a fake host: a binding
// Kafka refuses is answered INVALID_REQUEST per binding and never reaches
// the controller, a valid one reaches it once, a controller refusal is
// answered with its code, and a principal without ALTER on the cluster
// sends nothing.
func TestCreateACLsFakeHost(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	md := &fakeMetadata{img: &metadata.Image{}}
	if err := p.Start(context.Background(), fakeHost{md: md}); err != nil {
		t.Fatal(err)
	}
	creation := func(name, principal string, op kmsg.ACLOperation) kmsg.CreateACLsRequestCreation {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = topic, name, lit
		c.Principal, c.Host, c.Operation, c.PermissionType = principal, "*", op, allow
		return c
	}
	req := kmsg.NewPtrCreateACLsRequest()
	req.Creations = []kmsg.CreateACLsRequestCreation{
		creation("orders", "User:alice", kmsg.ACLOperationRead),
		creation("orders", "alice", kmsg.ACLOperationRead), // not Type:name
		creation("", "User:bob", kmsg.ACLOperationWrite),   // no resource name
		creation("payments", "User:bob", kmsg.ACLOperationWrite),
	}
	rc := &plugin.RequestContext{Principal: "User:admin"}
	codes := func() []int16 {
		resp, err := handle(p, context.Background(), rc, req)
		if err != nil {
			t.Fatal(err)
		}
		var out []int16
		for _, r := range resp.(*kmsg.CreateACLsResponse).Results {
			out = append(out, r.ErrorCode)
		}
		return out
	}
	bad := kerr.InvalidRequest.Code
	if got := codes(); len(got) != 4 || got[0] != 0 || got[1] != bad || got[2] != bad || got[3] != 0 {
		t.Fatalf("codes %v, want [0 %d %d 0]", got, bad, bad)
	}
	if len(md.created) != 2 || md.created[0].ResourceName != "orders" || md.created[1].ResourceName != "payments" {
		t.Fatalf("the controller was asked for %+v, want the two valid bindings", md.created)
	}

	md.created, md.refuse = nil, kerr.NotController
	if got := codes(); got[0] != kerr.NotController.Code || got[3] != kerr.NotController.Code || len(md.created) != 2 {
		t.Fatalf("codes %v with the controller refusing, %d asked", got, len(md.created))
	}

	md.created, md.refuse = nil, nil
	rc.Authorizer = denyAll{}
	if got := codes(); got[0] != kerr.ClusterAuthorizationFailed.Code || len(md.created) != 0 {
		t.Fatalf("codes %v without ALTER on the cluster, %d asked", got, len(md.created))
	}
}

type denyAll struct{}

func (denyAll) Authorize(*plugin.RequestContext, kmsg.ACLOperation, kmsg.ACLResourceType, string) bool {
	return false
}

// handle serves req as the broker does: with its key's entry in p.APIs.
func handle(p *Plugin, ctx context.Context, rc *plugin.RequestContext, req kmsg.Request) (kmsg.Response, error) {
	for _, a := range p.APIs() {
		if a.Versions.ApiKey == req.Key() {
			return a.Handle(ctx, rc, req)
		}
	}
	return nil, fmt.Errorf("api key %d is not served", req.Key())
}
