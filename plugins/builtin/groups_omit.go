//go:build tandem_omit_groups

package builtin

import "log/slog"

// withGroups: the consumer-groups plugin is compiled out.
func withGroups(ps []any, _ map[string]string, _ *slog.Logger) ([]any, error) { return ps, nil }
