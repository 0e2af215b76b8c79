//go:build !tandem_omit_txn

package main

import (
	"log/slog"

	"github.com/tandem-kafka/tandem/plugins/txn"
)

// withTxn adds the transaction coordinator (__transaction_state,
// transactional producers, FindCoordinator for transactions). It finds
// the consumer-groups plugin, if compiled in, through
// server.TxnMarkerWriter for transactional offset commits.
func withTxn(ps []any, props map[string]string, log *slog.Logger) []any {
	return append(ps, txn.New(props, log))
}
