//go:build !tandem_omit_txn

package builtin

import (
	"fmt"
	"log/slog"

	"github.com/tandem-kafka/tandem/plugins/txn"
)

// withTxn adds the transaction coordinator (__transaction_state,
// transactional producers, FindCoordinator for transactions). It finds
// the consumer-groups plugin, if compiled in, through
// plugin.TxnMarkerWriter for transactional offset commits.
func withTxn(ps []any, props map[string]string, log *slog.Logger) ([]any, error) {
	if _, err := txn.ParseConfig(props); err != nil {
		return nil, fmt.Errorf("transactions: %w", err)
	}
	return append(ps, txn.New(props, log)), nil
}
