//go:build tandem_omit_mirror

package builtin

import "log/slog"

// withMirror: the cluster mirroring plugin is compiled out.
func withMirror(ps []any, _ map[string]string, _ *slog.Logger) ([]any, error) { return ps, nil }
