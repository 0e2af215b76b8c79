//go:build tandem_omit_acl

package main

// withACL: the security plugin is compiled out; the broker authorizes
// nothing (SASL and TLS listeners still work, with PLAIN users from the
// properties only, since SCRAM credentials cannot be managed).
func withACL(ps []any, _ map[string]string) []any { return ps }
