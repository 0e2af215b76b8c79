//go:build tandem_omit_acl

package builtin

import "log/slog"

// withACL: the security plugin is compiled out. SASL (PLAIN users from the
// properties, OAUTHBEARER) and TLS listeners still work; a broker asked
// for an authorizer, ACLs or SCRAM refuses to start (server.New).
func withACL(ps []any, _ map[string]string, _ *slog.Logger) ([]any, error) { return ps, nil }
