package raftmeta

import (
	"log/slog"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestRaftLevels: raft's lines at the broker's levels. A leadership
// change that raft reports as an error ("peer has newer term", as
// `tandem demo --brokers 3` printed after a clean stop) is the broker's
// Debug; a real error stays an error.
func TestRaftLevels(t *testing.T) {
	for _, tc := range []struct {
		level hclog.Level
		msg   string
		args  []any
		want  slog.Level
	}{
		{hclog.Error, "peer has newer term, stopping replication", []any{"peer", "2"}, slog.LevelDebug},
		{hclog.Error, "failed to appendEntries to", nil, slog.LevelDebug},
		{hclog.Error, "failed to take snapshot", nil, slog.LevelError},
		{hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", "", "last-leader-id", ""}, slog.LevelDebug},
		{hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", "x", "last-leader-id", "2"}, slog.LevelWarn},
		{hclog.Info, "entering leader state", nil, slog.LevelDebug},
	} {
		if got := raftLevel(tc.level, tc.msg, tc.args); got != tc.want {
			t.Errorf("raft %v %q: %v, want %v", tc.level, tc.msg, got, tc.want)
		}
	}
}
