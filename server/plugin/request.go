package plugin

import (
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RequestContext is what a handler knows of the request it serves and of
// the client that sent it.
type RequestContext struct {
	ClientID      string
	Version       int16
	CorrelationID int32
	ClientAddr    string
	// Principal is "User:<name>" from SASL or the TLS client
	// certificate, "User:ANONYMOUS" without either.
	Principal string
	Listener  string // the name of the listener the client connected to
	// Authorizer is the broker's, set by the broker; nil when none is
	// installed, and then everything is allowed.
	Authorizer Authorizer
}

// Allowed reports whether the request may perform op on the resource.
// Handlers, the broker's and plugins', call it exactly where Apache Kafka
// checks the same operation, so that ACL scripts work unchanged.
func (rc *RequestContext) Allowed(op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	if rc.Authorizer == nil {
		return true
	}
	return rc.Authorizer.Authorize(rc, op, typ, name)
}

// AllowedAny reports whether the request may perform op on some resource
// of the type (AnyAuthorizer); without such an authorizer only when no
// authorizer is installed.
func (rc *RequestContext) AllowedAny(op kmsg.ACLOperation, typ kmsg.ACLResourceType) bool {
	if rc.Authorizer == nil {
		return true
	}
	if a, ok := rc.Authorizer.(AnyAuthorizer); ok {
		return a.AuthorizeAny(rc, op, typ)
	}
	return false
}

// AuthorizedOps is the bit field of ops (Kafka's AclOperation codes) the
// request may perform on the resource, as the AuthorizedOperations fields
// of responses report it.
func (rc *RequestContext) AuthorizedOps(typ kmsg.ACLResourceType, name string, ops ...kmsg.ACLOperation) int32 {
	var bits int32
	for _, op := range ops {
		if rc.Allowed(op, typ, name) {
			bits |= 1 << op
		}
	}
	return bits
}

// ErrorCode is the Kafka error code of err for a response field: a kerr
// error (wrapped or not) keeps its code, any other error is
// UNKNOWN_SERVER_ERROR, and nil is 0. It is the one mapping from errors
// to codes, for the broker's handlers and the plugins'.
func ErrorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}

// ErrorMessage is err's text for a response's ErrorMessage field, nil for
// nil. An error wrapped as "context: %w" around a kerr error keeps the
// context only, which is what a client wants to read.
func ErrorMessage(err error) *string {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var ke *kerr.Error
	if errors.As(err, &ke) {
		if m := strings.TrimSuffix(msg, ": "+ke.Error()); m != "" {
			msg = m
		}
	}
	return &msg
}
