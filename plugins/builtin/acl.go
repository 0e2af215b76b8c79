//go:build !tandem_omit_acl

package builtin

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/tandem-kafka/tandem/plugins/acl"
)

// withACL adds the security plugin: the ACL, SCRAM-credential and
// client-quota APIs always, and the authorizer when authorizer.class.name
// is set (to any value, e.g. Kafka's
// org.apache.kafka.metadata.authorizer.StandardAuthorizer), as Kafka turns
// authorization on. SASL, TLS and quota enforcement are the server's.
func withACL(ps []any, props map[string]string, _ *slog.Logger) ([]any, error) {
	p, err := acl.New(props)
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	ps = append(ps, p)
	if strings.TrimSpace(props["authorizer.class.name"]) != "" {
		ps = append(ps, p.Authorizer())
	}
	return ps, nil
}
