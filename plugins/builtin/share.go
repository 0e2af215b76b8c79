//go:build !tandem_omit_share && !tandem_omit_groups

package builtin

import (
	"fmt"
	"log/slog"

	"github.com/tandem-kafka/tandem/plugins/share"
)

// withShare adds the share-groups plugin (KIP-932: ShareFetch,
// ShareAcknowledge, __share_group_state). Share groups' membership lives
// in the consumer-groups plugin, so a build without that one has no share
// groups either.
func withShare(ps []any, props map[string]string, log *slog.Logger) ([]any, error) {
	if _, err := share.ParseConfig(props); err != nil {
		return nil, fmt.Errorf("share groups: %w", err)
	}
	return append(ps, share.New(props, log)), nil
}
