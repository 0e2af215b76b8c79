//go:build !tandem_omit_groups

package main

import (
	"log/slog"

	"github.com/tandem-kafka/tandem/plugins/groups"
)

// withGroups adds the consumer-groups plugin (__consumer_offsets, the
// classic group protocol, FindCoordinator for groups).
func withGroups(ps []any, props map[string]string, log *slog.Logger) []any {
	return append(ps, groups.New(props, log))
}
