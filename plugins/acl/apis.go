package acl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// APIs implements plugin.APIHandler.
func (p *Plugin) APIs() []plugin.API {
	return []plugin.API{
		withMetadata(p, kmsg.DescribeACLs, 0, 3, func(_ context.Context, _ plugin.Metadata, rc *plugin.RequestContext, req *kmsg.DescribeACLsRequest) kmsg.Response {
			return p.describeACLs(rc, req)
		}),
		withMetadata(p, kmsg.CreateACLs, 0, 3, p.createACLs),
		withMetadata(p, kmsg.DeleteACLs, 0, 3, p.deleteACLs),
		withMetadata(p, kmsg.DescribeClientQuotas, 0, 1, func(_ context.Context, m plugin.Metadata, rc *plugin.RequestContext, req *kmsg.DescribeClientQuotasRequest) kmsg.Response {
			return describeQuotas(m.Image(), rc, req)
		}),
		withMetadata(p, kmsg.AlterClientQuotas, 0, 1, alterQuotas),
		withMetadata(p, kmsg.DescribeUserSCRAMCredentials, 0, 0, func(_ context.Context, m plugin.Metadata, rc *plugin.RequestContext, req *kmsg.DescribeUserSCRAMCredentialsRequest) kmsg.Response {
			return describeScram(m.Image(), rc, req)
		}),
		withMetadata(p, kmsg.AlterUserSCRAMCredentials, 0, 0, alterScram),
	}
}

// withMetadata serves key at versions min to max with h, given the host's
// metadata quorum; a request before Start (no quorum yet) is an error,
// which closes the connection.
func withMetadata[R kmsg.Request](p *Plugin, key kmsg.Key, min, max int16, h func(context.Context, plugin.Metadata, *plugin.RequestContext, R) kmsg.Response) plugin.API {
	return plugin.Handle(key, min, max, func(ctx context.Context, rc *plugin.RequestContext, req R) (kmsg.Response, error) {
		m := p.metadata()
		if m == nil {
			return nil, errors.New("acl plugin: request before Start")
		}
		return h(ctx, m, rc, req), nil
	})
}

func errMsg(err error) *string {
	s := err.Error()
	return &s
}

// validACL checks a binding to create as Kafka's controller does.
func validACL(a metadata.ACL) error {
	bad := func(why string) error { return fmt.Errorf("invalid ACL binding: %s: %w", why, kerr.InvalidRequest) }
	switch {
	case a.ResourceType <= int8(kmsg.ACLResourceTypeAny) || a.ResourceType > int8(plugin.ACLResourceMirror):
		return bad("unknown resource type")
	case a.PatternType != int8(kmsg.ACLResourcePatternTypeLiteral) && a.PatternType != int8(kmsg.ACLResourcePatternTypePrefixed):
		return bad("pattern type must be LITERAL or PREFIXED")
	case a.Operation <= int8(kmsg.ACLOperationAny) || a.Operation > int8(kmsg.ACLOperationDescribeTokens):
		return bad("unknown operation")
	case a.Permission != int8(kmsg.ACLPermissionTypeAllow) && a.Permission != int8(kmsg.ACLPermissionTypeDeny):
		return bad("permission must be ALLOW or DENY")
	case !strings.Contains(a.Principal, ":") || strings.HasPrefix(a.Principal, ":"):
		return bad(fmt.Sprintf("principal %q is not Type:name", a.Principal))
	case a.ResourceName == "":
		return bad("empty resource name")
	case a.Host == "":
		return bad("empty host")
	case a.ResourceType == int8(kmsg.ACLResourceTypeCluster) && a.ResourceName != plugin.ClusterResource:
		return bad("the CLUSTER resource is named " + plugin.ClusterResource)
	}
	return nil
}

func (p *Plugin) createACLs(ctx context.Context, m plugin.Metadata, rc *plugin.RequestContext, req *kmsg.CreateACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	allowed := rc.Allowed(kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, plugin.ClusterResource)
	for i, c := range req.Creations {
		r := &resp.Results[i]
		*r = kmsg.NewCreateACLsResponseResult()
		if !allowed {
			r.ErrorCode = kerr.ClusterAuthorizationFailed.Code
			continue
		}
		a := metadata.ACL{ResourceType: int8(c.ResourceType), ResourceName: c.ResourceName, PatternType: int8(c.ResourcePatternType),
			Principal: c.Principal, Host: c.Host, Operation: int8(c.Operation), Permission: int8(c.PermissionType)}
		err := validACL(a)
		if err == nil {
			err = m.CreateACLs(ctx, []metadata.ACL{a})
		}
		if err != nil {
			r.ErrorCode, r.ErrorMessage = plugin.ErrorCode(err), errMsg(err)
		}
	}
	return resp
}

func describeFilter(typ kmsg.ACLResourceType, name *string, pat kmsg.ACLResourcePatternType, principal, host *string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) metadata.ACLFilter {
	return metadata.ACLFilter{ResourceType: int8(typ), ResourceName: name, PatternType: int8(pat), Principal: principal, Host: host, Operation: int8(op), Permission: int8(perm)}
}

func (p *Plugin) describeACLs(rc *plugin.RequestContext, req *kmsg.DescribeACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, plugin.ClusterResource) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	}
	f := describeFilter(req.ResourceType, req.ResourceName, req.ResourcePatternType, req.Principal, req.Host, req.Operation, req.PermissionType)
	type res struct {
		typ  int8
		name string
		pat  int8
	}
	byRes := map[res]*kmsg.DescribeACLsResponseResource{}
	var order []res
	for _, a := range p.DescribeACLs(f) {
		k := res{a.ResourceType, a.ResourceName, a.PatternType}
		r := byRes[k]
		if r == nil {
			nr := kmsg.NewDescribeACLsResponseResource()
			nr.ResourceType, nr.ResourceName, nr.ResourcePatternType = kmsg.ACLResourceType(k.typ), k.name, kmsg.ACLResourcePatternType(k.pat)
			r = &nr
			byRes[k] = r
			order = append(order, k)
		}
		ra := kmsg.NewDescribeACLsResponseResourceACL()
		ra.Principal, ra.Host, ra.Operation, ra.PermissionType = a.Principal, a.Host, kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
		r.ACLs = append(r.ACLs, ra)
	}
	for _, k := range order {
		resp.Resources = append(resp.Resources, *byRes[k])
	}
	return resp
}

func (p *Plugin) deleteACLs(ctx context.Context, m plugin.Metadata, rc *plugin.RequestContext, req *kmsg.DeleteACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	for i := range resp.Results {
		resp.Results[i] = kmsg.NewDeleteACLsResponseResult()
	}
	if !rc.Allowed(kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, plugin.ClusterResource) {
		for i := range resp.Results {
			resp.Results[i].ErrorCode = kerr.ClusterAuthorizationFailed.Code
		}
		return resp
	}
	filters := make([]metadata.ACLFilter, len(req.Filters))
	for i, f := range req.Filters {
		filters[i] = describeFilter(f.ResourceType, f.ResourceName, f.ResourcePatternType, f.Principal, f.Host, f.Operation, f.PermissionType)
	}
	per, err := m.DeleteACLs(ctx, filters)
	for i := range resp.Results {
		r := &resp.Results[i]
		if err != nil {
			r.ErrorCode, r.ErrorMessage = plugin.ErrorCode(err), errMsg(err)
			continue
		}
		for _, a := range per[i] {
			ma := kmsg.NewDeleteACLsResponseResultMatchingACL()
			ma.ResourceType, ma.ResourceName, ma.ResourcePatternType = kmsg.ACLResourceType(a.ResourceType), a.ResourceName, kmsg.ACLResourcePatternType(a.PatternType)
			ma.Principal, ma.Host, ma.Operation, ma.PermissionType = a.Principal, a.Host, kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
			r.MatchingACLs = append(r.MatchingACLs, ma)
		}
	}
	return resp
}

// describeScram lists users' mechanisms and iterations (never the keys);
// DESCRIBE on CLUSTER is required.
func describeScram(img *metadata.Image, rc *plugin.RequestContext, req *kmsg.DescribeUserSCRAMCredentialsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, plugin.ClusterResource) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	}
	users := slices.Sorted(maps.Keys(img.Scram))
	explicit := req.Users != nil && len(req.Users) > 0
	if explicit {
		users = users[:0]
		seen := map[string]int{}
		for _, u := range req.Users {
			seen[u.Name]++
		}
		for _, u := range req.Users {
			if seen[u.Name] > 1 {
				r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
				r.User, r.ErrorCode = u.Name, kerr.DuplicateResource.Code
				resp.Results = append(resp.Results, r)
				seen[u.Name] = -1
				continue
			}
			if seen[u.Name] == 1 {
				users = append(users, u.Name)
			}
		}
	}
	for _, u := range users {
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = u
		creds := img.Scram[u]
		if len(creds) == 0 {
			r.ErrorCode, r.ErrorMessage = kerr.ResourceNotFound.Code, errMsg(fmt.Errorf("attempt to describe a user credential that does not exist: %s", u))
		}
		for _, mech := range []int8{1, 2} {
			if c, ok := creds[metadata.ScramMechanisms[mech]]; ok {
				ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				ci.Mechanism, ci.Iterations = mech, c.Iterations
				r.CredentialInfos = append(r.CredentialInfos, ci)
			}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}

// alterScram upserts and deletes credentials, per user; ALTER on CLUSTER
// is required. Iterations must be 4096..16384, as Kafka requires.
func alterScram(ctx context.Context, m plugin.Metadata, rc *plugin.RequestContext, req *kmsg.AlterUserSCRAMCredentialsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	allowed := rc.Allowed(kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, plugin.ClusterResource)
	changes := map[string][]metadata.ScramChange{}
	errs := map[string]error{}
	var order []string
	add := func(user string, ch metadata.ScramChange, err error) {
		if _, ok := changes[user]; !ok {
			order = append(order, user)
			changes[user] = nil
		}
		if err != nil && errs[user] == nil {
			errs[user] = err
		}
		if err == nil {
			for _, prev := range changes[user] {
				if prev.Credential.Mechanism == ch.Credential.Mechanism {
					errs[user] = fmt.Errorf("a user credential cannot be altered twice in the same request: %w", kerr.DuplicateResource)
				}
			}
			changes[user] = append(changes[user], ch)
		}
	}
	for _, d := range req.Deletions {
		mech, ok := metadata.ScramMechanisms[d.Mechanism]
		var err error
		if !ok {
			err = fmt.Errorf("unknown SCRAM mechanism %d: %w", d.Mechanism, kerr.UnsupportedSaslMechanism)
		}
		add(d.Name, metadata.ScramChange{Credential: metadata.ScramCredential{User: d.Name, Mechanism: mech}, Delete: true}, err)
	}
	for _, u := range req.Upsertions {
		mech, ok := metadata.ScramMechanisms[u.Mechanism]
		var err error
		var cred metadata.ScramCredential
		switch {
		case !ok:
			err = fmt.Errorf("unknown SCRAM mechanism %d: %w", u.Mechanism, kerr.UnsupportedSaslMechanism)
		case u.Iterations < 4096 || u.Iterations > 16384:
			err = fmt.Errorf("iterations %d outside [4096, 16384]: %w", u.Iterations, kerr.UnacceptableCredential)
		case u.Name == "":
			err = fmt.Errorf("empty user name: %w", kerr.UnacceptableCredential)
		default:
			cred, err = metadata.NewScramCredential(u.Name, mech, u.Salt, u.SaltedPassword, u.Iterations)
		}
		add(u.Name, metadata.ScramChange{Credential: cred}, err)
	}
	for _, user := range order {
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User = user
		err := errs[user]
		if !allowed {
			err = kerr.ClusterAuthorizationFailed
		}
		if err == nil {
			err = m.AlterScram(ctx, changes[user])
		}
		if err != nil {
			r.ErrorCode, r.ErrorMessage = plugin.ErrorCode(err), errMsg(err)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}

// Quota entity types.
const (
	entityUser     = "user"
	entityClientID = "client-id"
)

func entityParts(e metadata.QuotaEntity) map[string]*string {
	out := map[string]*string{}
	if e.User != nil {
		out[entityUser] = e.User
	}
	if e.ClientID != nil {
		out[entityClientID] = e.ClientID
	}
	return out
}

// describeQuotas filters the stored entities as Kafka does: each
// component matches its type exactly (a name), the default entity, or any
// entity of the type; Strict excludes entities with other components.
// DESCRIBE_CONFIGS on CLUSTER is required.
func describeQuotas(img *metadata.Image, rc *plugin.RequestContext, req *kmsg.DescribeClientQuotasRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	if !rc.Allowed(kmsg.ACLOperationDescribeConfigs, kmsg.ACLResourceTypeCluster, plugin.ClusterResource) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	}
	for _, c := range req.Components {
		if c.EntityType != entityUser && c.EntityType != entityClientID {
			resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, errMsg(fmt.Errorf("unknown quota entity type %q", c.EntityType))
			return resp
		}
	}
	for _, k := range slices.Sorted(maps.Keys(img.ClientQuotas)) {
		q := img.ClientQuotas[k]
		parts := entityParts(q.Entity)
		ok := !req.Strict || len(parts) == len(req.Components)
		for _, c := range req.Components {
			name, has := parts[c.EntityType]
			switch c.MatchType {
			case 0: // exact
				ok = ok && has && c.Match != nil && *name == *c.Match && *name != ""
			case 1: // default
				ok = ok && has && *name == ""
			default: // any
				ok = ok && has
			}
		}
		if !ok {
			continue
		}
		e := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, typ := range []string{entityUser, entityClientID} {
			if name, has := parts[typ]; has {
				ee := kmsg.NewDescribeClientQuotasResponseEntryEntity()
				ee.Type = typ
				if *name != "" {
					ee.Name = name
				}
				e.Entity = append(e.Entity, ee)
			}
		}
		for _, key := range slices.Sorted(maps.Keys(q.Values)) {
			v := kmsg.NewDescribeClientQuotasResponseEntryValue()
			v.Key, v.Value = key, q.Values[key]
			e.Values = append(e.Values, v)
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp
}

var quotaKeys = map[string]bool{
	"producer_byte_rate": true, "consumer_byte_rate": true, "request_percentage": true,
	"controller_mutation_rate": true, "connection_creation_rate": true,
}

// alterQuotas applies each entry's operations atomically; ALTER_CONFIGS on
// CLUSTER is required.
func alterQuotas(ctx context.Context, m plugin.Metadata, rc *plugin.RequestContext, req *kmsg.AlterClientQuotasRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	allowed := rc.Allowed(kmsg.ACLOperationAlterConfigs, kmsg.ACLResourceTypeCluster, plugin.ClusterResource)
	for _, e := range req.Entries {
		r := kmsg.NewAlterClientQuotasResponseEntry()
		var ent metadata.QuotaEntity
		err := error(nil)
		for _, c := range e.Entity {
			re := kmsg.NewAlterClientQuotasResponseEntryEntity()
			re.Type, re.Name = c.Type, c.Name
			r.Entity = append(r.Entity, re)
			name := ""
			if c.Name != nil {
				if *c.Name == "" {
					err = fmt.Errorf("empty %s name: %w", c.Type, kerr.InvalidRequest)
				}
				name = *c.Name
			}
			switch {
			case c.Type == entityUser && ent.User == nil:
				ent.User = &name
			case c.Type == entityClientID && ent.ClientID == nil:
				ent.ClientID = &name
			default:
				err = fmt.Errorf("unknown or repeated quota entity type %q: %w", c.Type, kerr.InvalidRequest)
			}
		}
		var changes []metadata.ClientQuotaRecord
		for _, op := range e.Ops {
			if !quotaKeys[op.Key] {
				err = fmt.Errorf("unknown quota key %q: %w", op.Key, kerr.InvalidRequest)
				break
			}
			ch := metadata.ClientQuotaRecord{Entity: ent, Key: op.Key}
			if !op.Remove {
				v := op.Value
				ch.Value = &v
			}
			changes = append(changes, ch)
		}
		if !allowed {
			err = kerr.ClusterAuthorizationFailed
		}
		if err == nil && !req.ValidateOnly {
			err = m.AlterClientQuotas(ctx, changes)
		}
		if err != nil {
			r.ErrorCode, r.ErrorMessage = plugin.ErrorCode(err), errMsg(err)
		}
		resp.Entries = append(resp.Entries, r)
	}
	return resp
}
