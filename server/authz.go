package server

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta"
)

// ACLResourceMirror is the ACL resource type of KIP-1279's mirrors
// (operations on a named mirror: CREATE, DESCRIBE, ALTER, DELETE). Kafka
// has not numbered it; Tandem uses 8, the next code after USER (7).
const ACLResourceMirror kmsg.ACLResourceType = 8

// ACLStore is registered by the security plugin so that other plugins (the
// mirror's ACL sync) can list and apply ACL bindings without importing it;
// find it among Host.Plugins() by type assertion.
type ACLStore interface {
	DescribeACLs(filter raftmeta.ACLFilter) []raftmeta.ACL
	CreateACLs(ctx context.Context, acls []raftmeta.ACL) error
	// DeleteACLs removes every binding a filter matches and returns them.
	DeleteACLs(ctx context.Context, filters []raftmeta.ACLFilter) ([]raftmeta.ACL, error)
}

// Authorizer decides whether the principal of a request may perform an
// operation on a resource, with Apache Kafka's semantics (ACL resource
// types and operations as kmsg numbers them). The security plugin installs
// one through Config.Plugins; without one every request is allowed.
type Authorizer interface {
	Authorize(rc *RequestContext, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool
}

// Allowed reports whether the request may perform op on the resource.
// Handlers, the broker's and plugins', call it exactly where Apache Kafka
// checks the same operation, so that ACL scripts work unchanged.
func (rc *RequestContext) Allowed(op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	if rc.authz == nil {
		return true
	}
	return rc.authz.Authorize(rc, op, typ, name)
}

// authorizedOps is the bit field of ops (Kafka's AclOperation codes) the
// request may perform on the resource, as Metadata and DescribeCluster
// report it.
func (rc *RequestContext) authorizedOps(typ kmsg.ACLResourceType, name string, ops ...kmsg.ACLOperation) int32 {
	var bits int32
	for _, op := range ops {
		if rc.Allowed(op, typ, name) {
			bits |= 1 << op
		}
	}
	return bits
}

// The operations that apply to each resource type, as Kafka lists them.
var (
	topicOps = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate, kmsg.ACLOperationDelete,
		kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs}
	clusterOps = []kmsg.ACLOperation{kmsg.ACLOperationCreate, kmsg.ACLOperationClusterAction, kmsg.ACLOperationDescribe, kmsg.ACLOperationAlter,
		kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs, kmsg.ACLOperationIdempotentWrite}
)

// clusterName is the name of the one CLUSTER resource.
const clusterName = "kafka-cluster"

// AnyAuthorizer is implemented by authorizers that can answer Kafka's
// authorizeByResourceType: may the principal perform op on at least one
// resource of the type (KIP-679: an idempotent producer needs WRITE on
// some topic)?
type AnyAuthorizer interface {
	AuthorizeAny(rc *RequestContext, op kmsg.ACLOperation, typ kmsg.ACLResourceType) bool
}

// AllowedAny reports whether the request may perform op on some resource
// of the type.
func (rc *RequestContext) AllowedAny(op kmsg.ACLOperation, typ kmsg.ACLResourceType) bool {
	if rc.authz == nil {
		return true
	}
	if a, ok := rc.authz.(AnyAuthorizer); ok {
		return a.AuthorizeAny(rc, op, typ)
	}
	return false
}
