// Package acl is Tandem's security plugin: the authorizer with Apache
// Kafka's ACL semantics (StandardAuthorizer), the ACL APIs (CreateAcls,
// DescribeAcls, DeleteAcls), SCRAM credential management
// (DescribeUserScramCredentials, AlterUserScramCredentials) and client
// quota management (DescribeClientQuotas, AlterClientQuotas). ACLs,
// credentials and quotas live in the metadata quorum (raftmeta; their
// records and image in raftmeta/metadata); the broker's server package
// does SASL, TLS and quota enforcement.
package acl

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Plugin is the security plugin; pass it in server.Config.Plugins, and
// its Authorizer too to turn authorization on.
type Plugin struct {
	super        map[string]bool // super.users
	allowIfNoACL bool            // allow.everyone.if.no.acl.found
	meta         atomic.Value    // plugin.Metadata, from Start
}

// Interfaces the broker and other plugins find by type assertion.
var (
	_ plugin.Authorizer    = authorizer{}
	_ plugin.AnyAuthorizer = authorizer{}
	_ plugin.APIHandler    = (*Plugin)(nil)
	_ plugin.Lifecycle     = (*Plugin)(nil)
	_ plugin.ACLStore      = (*Plugin)(nil)
)

// New reads super.users (semicolon-separated principals, e.g.
// "User:admin;User:CN=broker") and allow.everyone.if.no.acl.found
// (default false) from the broker properties.
func New(props map[string]string) (*Plugin, error) {
	p := &Plugin{super: map[string]bool{}}
	for _, s := range strings.Split(props["super.users"], ";") {
		if s = strings.TrimSpace(s); s != "" {
			if !strings.Contains(s, ":") {
				return nil, fmt.Errorf("super.users: %q is not a principal (Type:name)", s)
			}
			p.super[s] = true
		}
	}
	switch v := strings.ToLower(strings.TrimSpace(props["allow.everyone.if.no.acl.found"])); v {
	case "", "false":
	case "true":
		p.allowIfNoACL = true
	default:
		return nil, fmt.Errorf("allow.everyone.if.no.acl.found: %q is not true or false", v)
	}
	return p, nil
}

// Start implements plugin.Lifecycle: the plugin reads ACLs from the
// controller's image, which reflects a CreateAcls as soon as it returns.
func (p *Plugin) Start(_ context.Context, h plugin.Host) error {
	p.meta.Store(h.Metadata())
	return nil
}

// Stop implements plugin.Lifecycle.
func (p *Plugin) Stop(context.Context) error { return nil }

// metadata is the host's metadata quorum, nil before Start.
func (p *Plugin) metadata() plugin.Metadata {
	m, _ := p.meta.Load().(plugin.Metadata)
	return m
}

func (p *Plugin) image() *metadata.Image {
	if m := p.metadata(); m != nil {
		return m.Image()
	}
	return nil
}

// Authorizer returns the plugin's authorizer. Passing it in
// Config.Plugins turns authorization on (Kafka's authorizer.class.name);
// without it the ACL APIs still store ACLs but nothing checks them.
func (p *Plugin) Authorizer() plugin.Authorizer { return authorizer{p} }

type authorizer struct{ p *Plugin }

// Authorize implements plugin.Authorizer with Kafka's rules: super users
// may do anything; a DENY binding for the operation (or ALL) wins; else an
// ALLOW binding for the operation, for ALL, or for one that implies it
// (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
// DESCRIBE_CONFIGS) allows; a resource with no binding at all is allowed
// only with allow.everyone.if.no.acl.found. Bindings apply when their
// resource is the literal name, the literal wildcard "*", or a prefix of
// the name (PREFIXED); their principal is the request's or "User:*"; their
// host is "*" or the client's IP.
func (a authorizer) Authorize(rc *plugin.RequestContext, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	p := a.p
	if p.super[rc.Principal] {
		return true
	}
	img := p.image()
	if img == nil {
		return false // not started yet: refuse rather than guess
	}
	host, _, err := net.SplitHostPort(rc.ClientAddr)
	if err != nil {
		host = rc.ClientAddr
	}
	found, allowed := false, false
	for _, b := range img.ACLs {
		if b.ResourceType != int8(typ) || !resourceMatches(b, name) {
			continue
		}
		found = true
		if b.Principal != rc.Principal && b.Principal != "User:*" || b.Host != "*" && b.Host != host {
			continue
		}
		aop := kmsg.ACLOperation(b.Operation)
		switch kmsg.ACLPermissionType(b.Permission) {
		case kmsg.ACLPermissionTypeDeny:
			if aop == op || aop == kmsg.ACLOperationAll {
				return false
			}
		case kmsg.ACLPermissionTypeAllow:
			allowed = allowed || implies(aop, op)
		}
	}
	if !found {
		return p.allowIfNoACL
	}
	return allowed
}

func resourceMatches(a metadata.ACL, name string) bool {
	switch kmsg.ACLResourcePatternType(a.PatternType) {
	case kmsg.ACLResourcePatternTypeLiteral:
		return a.ResourceName == name || a.ResourceName == "*"
	case kmsg.ACLResourcePatternTypePrefixed:
		return strings.HasPrefix(name, a.ResourceName)
	}
	return false
}

// implies reports whether an ALLOW of granted allows op.
func implies(granted, op kmsg.ACLOperation) bool {
	switch {
	case granted == op, granted == kmsg.ACLOperationAll:
		return true
	case op == kmsg.ACLOperationDescribe:
		return granted == kmsg.ACLOperationRead || granted == kmsg.ACLOperationWrite ||
			granted == kmsg.ACLOperationDelete || granted == kmsg.ACLOperationAlter
	case op == kmsg.ACLOperationDescribeConfigs:
		return granted == kmsg.ACLOperationAlterConfigs
	}
	return false
}

// DescribeACLs implements plugin.ACLStore.
func (p *Plugin) DescribeACLs(f metadata.ACLFilter) []metadata.ACL {
	img := p.image()
	if img == nil {
		return nil
	}
	var out []metadata.ACL
	for _, a := range img.ACLs {
		if f.Matches(a) {
			out = append(out, a)
		}
	}
	return out
}

// CreateACLs implements plugin.ACLStore.
func (p *Plugin) CreateACLs(ctx context.Context, acls []metadata.ACL) error {
	m := p.metadata()
	if m == nil {
		return fmt.Errorf("acl plugin not started")
	}
	return m.CreateACLs(ctx, acls)
}

// DeleteACLs implements plugin.ACLStore.
func (p *Plugin) DeleteACLs(ctx context.Context, filters []metadata.ACLFilter) ([]metadata.ACL, error) {
	m := p.metadata()
	if m == nil {
		return nil, fmt.Errorf("acl plugin not started")
	}
	per, err := m.DeleteACLs(ctx, filters)
	var out []metadata.ACL
	for _, acls := range per {
		out = append(out, acls...)
	}
	return out, err
}

// AuthorizeAny implements plugin.AnyAuthorizer like Kafka's
// authorizeByResourceType: true if some ALLOW binding of the principal for
// op (or ALL) on the type is not covered by a DENY binding (the wildcard,
// the same literal name, or a prefix of its name).
func (a authorizer) AuthorizeAny(rc *plugin.RequestContext, op kmsg.ACLOperation, typ kmsg.ACLResourceType) bool {
	p := a.p
	if p.super[rc.Principal] {
		return true
	}
	img := p.image()
	if img == nil {
		return false
	}
	host, _, err := net.SplitHostPort(rc.ClientAddr)
	if err != nil {
		host = rc.ClientAddr
	}
	var allows, denies []metadata.ACL
	anyOfType := false
	for _, b := range img.ACLs {
		if b.ResourceType != int8(typ) {
			continue
		}
		anyOfType = true
		bop := kmsg.ACLOperation(b.Operation)
		if b.Principal != rc.Principal && b.Principal != "User:*" || b.Host != "*" && b.Host != host ||
			bop != op && bop != kmsg.ACLOperationAll {
			continue
		}
		if b.Permission == int8(kmsg.ACLPermissionTypeDeny) {
			denies = append(denies, b)
		} else {
			allows = append(allows, b)
		}
	}
	if !anyOfType {
		return p.allowIfNoACL
	}
	covered := func(al metadata.ACL) bool {
		for _, d := range denies {
			lit := d.PatternType == int8(kmsg.ACLResourcePatternTypeLiteral)
			if lit && (d.ResourceName == "*" || al.PatternType == d.PatternType && d.ResourceName == al.ResourceName) ||
				!lit && strings.HasPrefix(al.ResourceName, d.ResourceName) {
				return true
			}
		}
		return false
	}
	for _, al := range allows {
		if !covered(al) {
			return true
		}
	}
	return false
}
