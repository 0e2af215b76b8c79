//go:build !tandem_omit_groups

package builtin

import (
	"fmt"
	"log/slog"

	"github.com/tandem-kafka/tandem/plugins/groups"
)

// withGroups adds the consumer-groups plugin (__consumer_offsets, the
// classic group protocol, FindCoordinator for groups).
func withGroups(ps []any, props map[string]string, log *slog.Logger) ([]any, error) {
	if _, err := groups.ParseConfig(props); err != nil {
		return nil, fmt.Errorf("consumer groups: %w", err)
	}
	return append(ps, groups.New(props, log)), nil
}
