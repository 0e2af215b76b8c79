package server

import "github.com/twmb/franz-go/pkg/kmsg"

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
