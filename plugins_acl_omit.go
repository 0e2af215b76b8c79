//go:build tandem_omit_acl

package tandem

import "log/slog"

// withACL: the security plugin is compiled out; the broker authorizes
// nothing (SASL and TLS listeners still work, with PLAIN users from the
// properties only, since SCRAM credentials cannot be managed).
func withACL(ps []any, _ map[string]string, _ *slog.Logger) ([]any, error) { return ps, nil }
