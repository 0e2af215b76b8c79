//go:build !tandem_omit_mirror

package builtin

import (
	"fmt"
	"log/slog"

	"github.com/tandem-kafka/tandem/plugins/mirror"
)

// withMirror adds the cluster mirroring plugin (KIP-1279: mirror APIs
// 94–105, __mirror_state, mirror fetchers, read-only mirror topics).
func withMirror(ps []any, props map[string]string, log *slog.Logger) ([]any, error) {
	if _, err := mirror.ParseConfig(props); err != nil {
		return nil, fmt.Errorf("mirroring: %w", err)
	}
	return append(ps, mirror.New(props, log)), nil
}
