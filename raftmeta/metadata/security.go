package metadata

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Security metadata: ACLs, SCRAM credentials and client quotas, stored in
// the quorum as Kafka's KRaft controller stores them (AccessControlEntry-,
// UserScramCredential- and ClientQuotaRecord). The records are:
//
//   - ACL {acl}: adds an ACL binding (a duplicate is a no-op);
//     RemoveACL {acl}: removes one (absent is a no-op).
//   - Scram {scram}: sets a user's credential for one mechanism;
//     RemoveScram {scram}: deletes it (only User and Mechanism are read).
//   - ClientQuota {quota}: sets (value non-nil) or deletes one quota key
//     of a client-quota entity.
//
// They are the core's, not the ACL plugin's: the broker itself checks a
// SCRAM login and applies client quotas before any plugin sees a
// request, and Kafka's metadata log keeps the same records. The ACL
// plugin decides on them through plugin.SecurityDecisions.

const (
	RecordACL         RecordType = "ACL"
	RecordRemoveACL   RecordType = "RemoveACL"
	RecordScram       RecordType = "Scram"
	RecordRemoveScram RecordType = "RemoveScram"
	RecordClientQuota RecordType = "ClientQuota"
)

// ACL is one ACL binding. The numbers are Kafka's (kmsg.ACLResourceType,
// kmsg.ACLResourcePatternType, kmsg.ACLOperation, kmsg.ACLPermissionType);
// a stored binding never holds the filter-only values ANY or MATCH.
type ACL struct {
	ResourceType int8   `json:"resourceType"`
	ResourceName string `json:"resourceName"`
	PatternType  int8   `json:"patternType"` // 3 LITERAL, 4 PREFIXED
	Principal    string `json:"principal"`   // e.g. "User:alice", "User:*"
	Host         string `json:"host"`        // "*" or an IP address
	Operation    int8   `json:"operation"`
	Permission   int8   `json:"permission"` // 2 DENY, 3 ALLOW
}

// Kafka's ACL codes used by the filter logic.
const (
	aclAny      = 1
	patLiteral  = 3
	patPrefixed = 4
	patMatch    = 2
)

// Valid reports whether a may be stored: it holds no filter-only value
// (ANY, MATCH), its pattern is LITERAL or PREFIXED, and it names a
// resource, a principal and a host.
func (a ACL) Valid() bool {
	return !(a.ResourceType <= aclAny || a.Operation <= aclAny || a.Permission <= aclAny ||
		a.PatternType != patLiteral && a.PatternType != patPrefixed || a.Principal == "" || a.Host == "" || a.ResourceName == "")
}

func compareACL(a, b ACL) int {
	return cmp.Or(cmp.Compare(a.ResourceType, b.ResourceType), strings.Compare(a.ResourceName, b.ResourceName),
		cmp.Compare(a.PatternType, b.PatternType), strings.Compare(a.Principal, b.Principal),
		strings.Compare(a.Host, b.Host), cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Permission, b.Permission))
}

// ACLFilter selects ACL bindings the way DescribeAcls and DeleteAcls do:
// a nil string matches anything, the ANY code (1) matches any value, and
// the pattern type MATCH (2) selects every binding that would apply to
// ResourceName: the literal one, the literal wildcard "*", and the
// prefixed ones that are a prefix of it.
type ACLFilter struct {
	ResourceType int8
	ResourceName *string
	PatternType  int8
	Principal    *string
	Host         *string
	Operation    int8
	Permission   int8
}

// Matches reports whether the filter selects a.
func (f ACLFilter) Matches(a ACL) bool {
	if f.ResourceType != aclAny && f.ResourceType != a.ResourceType ||
		f.Operation != aclAny && f.Operation != a.Operation ||
		f.Permission != aclAny && f.Permission != a.Permission ||
		f.Principal != nil && *f.Principal != a.Principal ||
		f.Host != nil && *f.Host != a.Host {
		return false
	}
	switch f.PatternType {
	case aclAny:
		return f.ResourceName == nil || *f.ResourceName == a.ResourceName
	case patMatch:
		if f.ResourceName == nil {
			return true
		}
		n := *f.ResourceName
		if a.PatternType == patLiteral {
			return a.ResourceName == n || a.ResourceName == "*"
		}
		return a.PatternType == patPrefixed && strings.HasPrefix(n, a.ResourceName)
	default:
		return f.PatternType == a.PatternType && (f.ResourceName == nil || *f.ResourceName == a.ResourceName)
	}
}

// ScramCredential is a user's salted SCRAM credential for one mechanism
// (RFC 5802): the password itself is never stored.
type ScramCredential struct {
	User       string `json:"user"`
	Mechanism  string `json:"mechanism"` // "SCRAM-SHA-256" or "SCRAM-SHA-512"
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"storedKey"`
	ServerKey  []byte `json:"serverKey"`
	Iterations int32  `json:"iterations"`
}

// QuotaEntity names a client-quota entity: each part is absent (nil), the
// default entity (pointer to ""), or a name. Kafka's "<default>" user is
// written as the empty string, which no real user or client id is.
type QuotaEntity struct {
	User     *string `json:"user,omitempty"`
	ClientID *string `json:"clientId,omitempty"`
}

// Key renders e as the map key of Image.ClientQuotas.
func (e QuotaEntity) Key() string {
	part := func(name string, p *string) string {
		switch {
		case p == nil:
			return ""
		case *p == "":
			return name + "@default;"
		default:
			return name + "=" + *p + ";"
		}
	}
	return part("user", e.User) + part("client-id", e.ClientID)
}

// ClientQuota is a quota entity and its values (producer_byte_rate,
// consumer_byte_rate, request_percentage, ...).
type ClientQuota struct {
	Entity QuotaEntity        `json:"entity"`
	Values map[string]float64 `json:"values"`
}

// ClientQuotaRecord sets or deletes one value of an entity.
type ClientQuotaRecord struct {
	Entity QuotaEntity `json:"entity"`
	Key    string      `json:"key"`
	Value  *float64    `json:"value"`
}

// SecurityRecords holds the optional record bodies of this file; it is
// embedded in Record (exported so that the controller can build them).
type SecurityRecords struct {
	ACL         *ACL               `json:"acl,omitempty"`
	Scram       *ScramCredential   `json:"scram,omitempty"`
	ClientQuota *ClientQuotaRecord `json:"clientQuota,omitempty"`
}

// securityImage holds the security state of an Image; it is embedded in
// Image. Every field is replaced, never modified, when a record changes it.
type securityImage struct {
	ACLs []ACL `json:"acls,omitempty"` // sorted, no duplicates
	// Scram is by user, then mechanism.
	Scram map[string]map[string]ScramCredential `json:"scram,omitempty"`
	// ClientQuotas is by QuotaEntity.Key.
	ClientQuotas map[string]ClientQuota `json:"clientQuotas,omitempty"`
}

// applySecurity applies a record of this file; ok is false for other types.
func (b *builder) applySecurity(r *Record) (ok bool, err error) {
	img := b.img
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s record: %s: %w", r.Type, fmt.Sprintf(format, args...), kerr.InvalidRequest)
	}
	switch r.Type {
	case RecordACL, RecordRemoveACL:
		if r.ACL == nil {
			return true, bad("missing acl")
		}
		i, found := slices.BinarySearchFunc(img.ACLs, *r.ACL, compareACL)
		switch {
		case r.Type == RecordACL && !found:
			img.ACLs = slices.Insert(slices.Clone(img.ACLs), i, *r.ACL)
		case r.Type == RecordRemoveACL && found:
			img.ACLs = slices.Delete(slices.Clone(img.ACLs), i, i+1)
			if len(img.ACLs) == 0 {
				img.ACLs = nil
			}
		}
	case RecordScram, RecordRemoveScram:
		sc := r.Scram
		if sc == nil || sc.User == "" || sc.Mechanism == "" {
			return true, bad("missing user or mechanism")
		}
		img.Scram = cloneMap(img.Scram)
		user := cloneMap(img.Scram[sc.User])
		if r.Type == RecordScram {
			user[sc.Mechanism] = *sc
		} else {
			delete(user, sc.Mechanism)
		}
		if len(user) == 0 {
			delete(img.Scram, sc.User)
		} else {
			img.Scram[sc.User] = user
		}
		if len(img.Scram) == 0 {
			img.Scram = nil
		}
	case RecordClientQuota:
		q := r.ClientQuota
		if q == nil || q.Key == "" || q.Entity.User == nil && q.Entity.ClientID == nil {
			return true, bad("missing entity or key")
		}
		key := q.Entity.Key()
		img.ClientQuotas = cloneMap(img.ClientQuotas)
		cq := ClientQuota{Entity: q.Entity, Values: cloneMap(img.ClientQuotas[key].Values)}
		if q.Value != nil {
			cq.Values[q.Key] = *q.Value
		} else {
			delete(cq.Values, q.Key)
		}
		if len(cq.Values) == 0 {
			delete(img.ClientQuotas, key)
		} else {
			img.ClientQuotas[key] = cq
		}
		if len(img.ClientQuotas) == 0 {
			img.ClientQuotas = nil
		}
	default:
		return false, nil
	}
	return true, nil
}
