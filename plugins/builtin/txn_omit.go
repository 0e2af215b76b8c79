//go:build tandem_omit_txn

package builtin

import "log/slog"

// withTxn: the transaction coordinator is compiled out; InitProducerId
// with a transactional id answers INVALID_REQUEST.
func withTxn(ps []any, _ map[string]string, _ *slog.Logger) ([]any, error) { return ps, nil }
