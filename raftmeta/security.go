package raftmeta

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// The controller's decisions on security metadata: ACLs, SCRAM credentials
// and client quotas (their records and image: metadata/security.go).

// CreateACLs adds the bindings; existing ones are left as they are.
func (c *Controller) CreateACLs(ctx context.Context, acls []metadata.ACL) error {
	_, err := createACLs.do(c, ctx, acls)
	return err
}

var createACLs = decision[[]metadata.ACL, none]{"CreateAcls", func(c *Controller, ctx context.Context, acls []metadata.ACL) (none, error) {
	recs := make([]metadata.Record, 0, len(acls))
	for i := range acls {
		a := acls[i]
		if !a.Valid() {
			return none{}, fmt.Errorf("create acls: invalid binding %+v: %w", a, kerr.InvalidRequest)
		}
		recs = append(recs, metadata.Record{Type: metadata.RecordACL, SecurityRecords: metadata.SecurityRecords{ACL: &a}})
	}
	if len(recs) == 0 {
		return none{}, nil
	}
	return none{}, c.decide(ctx, "create acls", func(*metadata.Image) ([]metadata.Record, error) { return recs, nil })
}}

// DeleteACLs removes the bindings matched by filters (all in one batch)
// and returns, per filter, the bindings it matched.
func (c *Controller) DeleteACLs(ctx context.Context, filters []metadata.ACLFilter) ([][]metadata.ACL, error) {
	return deleteACLs.do(c, ctx, filters)
}

var deleteACLs = decision[[]metadata.ACLFilter, [][]metadata.ACL]{"DeleteAcls", func(c *Controller, ctx context.Context, filters []metadata.ACLFilter) ([][]metadata.ACL, error) {
	out := make([][]metadata.ACL, len(filters))
	err := c.decide(ctx, "delete acls", func(img *metadata.Image) ([]metadata.Record, error) {
		var recs []metadata.Record
		gone := map[metadata.ACL]bool{}
		for i, f := range filters {
			for _, a := range img.ACLs {
				if f.Matches(a) {
					out[i] = append(out[i], a)
					if !gone[a] {
						gone[a] = true
						recs = append(recs, metadata.Record{Type: metadata.RecordRemoveACL, SecurityRecords: metadata.SecurityRecords{ACL: &a}})
					}
				}
			}
		}
		return recs, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}}

// AlterScram applies the changes in one batch. Deleting a credential that
// does not exist is kerr.ResourceNotFound, as Kafka answers.
func (c *Controller) AlterScram(ctx context.Context, changes []metadata.ScramChange) error {
	_, err := alterScram.do(c, ctx, changes)
	return err
}

var alterScram = decision[[]metadata.ScramChange, none]{"AlterScram", func(c *Controller, ctx context.Context, changes []metadata.ScramChange) (none, error) {
	img := c.Image()
	recs := make([]metadata.Record, 0, len(changes))
	for i := range changes {
		sc := changes[i].Credential
		typ := metadata.RecordScram
		if changes[i].Delete {
			typ = metadata.RecordRemoveScram
			if _, ok := img.Scram[sc.User][sc.Mechanism]; !ok {
				return none{}, fmt.Errorf("delete scram credential %s of %q: %w", sc.Mechanism, sc.User, kerr.ResourceNotFound)
			}
		} else if len(sc.Salt) == 0 || len(sc.StoredKey) == 0 || len(sc.ServerKey) == 0 || sc.Iterations < 4096 {
			return none{}, fmt.Errorf("scram credential of %q: salt, keys and >= 4096 iterations are required: %w", sc.User, kerr.UnacceptableCredential)
		}
		recs = append(recs, metadata.Record{Type: typ, SecurityRecords: metadata.SecurityRecords{Scram: &sc}})
	}
	if len(recs) == 0 {
		return none{}, nil
	}
	return none{}, c.decide(ctx, "alter scram credentials", func(*metadata.Image) ([]metadata.Record, error) { return recs, nil })
}}

// AlterClientQuotas applies the changes in one batch.
func (c *Controller) AlterClientQuotas(ctx context.Context, changes []metadata.ClientQuotaRecord) error {
	_, err := alterClientQuotas.do(c, ctx, changes)
	return err
}

var alterClientQuotas = decision[[]metadata.ClientQuotaRecord, none]{"AlterClientQuotas", func(c *Controller, ctx context.Context, changes []metadata.ClientQuotaRecord) (none, error) {
	recs := make([]metadata.Record, 0, len(changes))
	for i := range changes {
		q := changes[i]
		if q.Key == "" || q.Entity.User == nil && q.Entity.ClientID == nil || q.Value != nil && *q.Value <= 0 {
			return none{}, fmt.Errorf("alter client quotas: invalid change %+v: %w", q, kerr.InvalidRequest)
		}
		recs = append(recs, metadata.Record{Type: metadata.RecordClientQuota, SecurityRecords: metadata.SecurityRecords{ClientQuota: &q}})
	}
	if len(recs) == 0 {
		return none{}, nil
	}
	return none{}, c.decide(ctx, "alter client quotas", func(*metadata.Image) ([]metadata.Record, error) { return recs, nil })
}}
