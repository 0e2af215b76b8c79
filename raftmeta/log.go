package raftmeta

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is hashicorp/raft's hclog.Logger on the broker's slog.Logger:
// each line goes to the broker's handler with component=raft and raft's
// key/value pairs in a "raft" group (raft's "node" is not the broker's),
// so that --log-level and the format are the broker's.
//
// Levels: raft's warnings and errors are the broker's; its Info lines
// (follower, candidate, leader, election won: the quorum's inner steps) are
// the broker's Debug, and so is the election every node holds when it
// starts, which raft announces as a warning ("heartbeat timeout reached"
// with no leader known yet). A single-node start then logs nothing from
// raft unless something is wrong.
type raftLogger struct {
	log     *slog.Logger
	name    string
	implied []any // from With
}

var _ hclog.Logger = (*raftLogger)(nil)

func newRaftLogger(log *slog.Logger) *raftLogger {
	return &raftLogger{log: log, name: "raft"}
}

// raftLevel maps a raft line to the broker's level.
func raftLevel(level hclog.Level, msg string, args []any) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug, hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		return slog.LevelDebug
	case hclog.Warn:
		if msg == "heartbeat timeout reached, starting election" && startupElection(args) || peerContact[msg] {
			return slog.LevelDebug
		}
		return slog.LevelWarn
	}
	if peerContact[msg] || leadershipStep[msg] {
		return slog.LevelDebug
	}
	return slog.LevelError
}

// leadershipStep are raft's errors that are a normal step of a
// leadership change, not a fault: a leader learns from a follower that a
// newer term began (another node won an election, as when the cluster
// stops one node after another) and steps down. The controller's own
// lines say who leads.
var leadershipStep = map[string]bool{
	"peer has newer term, stopping replication": true,
}

// peerContact are raft's lines about a peer it cannot reach, repeated at
// every retry while the peer is down: the controller port logs each peer's
// state once instead (transport.go), and Health reports it.
var peerContact = map[string]bool{
	"failed to appendEntries to":        true,
	"failed to heartbeat to":            true,
	"failed to make requestVote RPC":    true,
	"failed to make requestPreVote RPC": true,
	"failed to contact":                 true,
	"failed to decode incoming command": true,
	"failed to pipeline appendEntries":  true,
	"failed to get log":                 true,
}

// startupElection reports whether an election's arguments say that no
// leader was known before it: the node has just started.
func startupElection(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "last-leader-id" {
			return fmt.Sprint(args[i+1]) == ""
		}
	}
	return false
}

func (l *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	lv := raftLevel(level, msg, args)
	ctx := context.Background()
	if !l.log.Enabled(ctx, lv) {
		return
	}
	kvs := append(slices.Clip(l.implied), args...)
	for i, v := range kvs {
		if f, ok := v.(hclog.Format); ok && len(f) > 0 { // hclog.Fmt("%+v", x)
			format, _ := f[0].(string)
			kvs[i] = fmt.Sprintf(format, f[1:]...)
		}
	}
	l.log.Log(ctx, lv, msg, "component", l.name, slog.Group("raft", kvs...))
}

func (l *raftLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *raftLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *raftLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *raftLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *raftLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *raftLogger) enabled(level hclog.Level) bool {
	return l.log.Enabled(context.Background(), raftLevel(level, "", nil))
}

func (l *raftLogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *raftLogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *raftLogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *raftLogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *raftLogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *raftLogger) ImpliedArgs() []any { return l.implied }

func (l *raftLogger) With(args ...any) hclog.Logger {
	return &raftLogger{log: l.log, name: l.name, implied: append(slices.Clip(l.implied), args...)}
}

func (l *raftLogger) Name() string { return l.name }

func (l *raftLogger) Named(name string) hclog.Logger {
	return &raftLogger{log: l.log, name: l.name + "." + name, implied: l.implied}
}

func (l *raftLogger) ResetNamed(name string) hclog.Logger {
	return &raftLogger{log: l.log, name: name, implied: l.implied}
}

// SetLevel does nothing: the broker's handler decides.
func (l *raftLogger) SetLevel(hclog.Level) {}

// GetLevel is the lowest raft level that reaches the broker's handler.
func (l *raftLogger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Warn, hclog.Error} {
		if l.enabled(lv) {
			return lv
		}
	}
	return hclog.Off
}

func (l *raftLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(l.log.With("component", l.name).Handler(), slog.LevelDebug)
}

func (l *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return l.StandardLogger(opts).Writer()
}
