//go:build tandem_omit_share || tandem_omit_groups

package builtin

import "log/slog"

// withShare: the share-groups plugin is compiled out (tandem_omit_share,
// or tandem_omit_groups, which it needs).
func withShare(ps []any, _ map[string]string, _ *slog.Logger) ([]any, error) { return ps, nil }
