package tandem_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/server"
)

// records is a slog.Handler that keeps what it is handed, with the
// component ("plugin" or "component" attribute) of each record.
type records struct {
	min   slog.Level
	attrs []slog.Attr // from WithAttrs
	mu    *sync.Mutex
	got   *[]record
}

type record struct {
	level     slog.Level
	msg       string
	component string
}

func newRecords(min slog.Level) *records {
	return &records{min: min, mu: new(sync.Mutex), got: new([]record)}
}

func (h *records) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

func (h *records) Handle(_ context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message}
	see := func(a slog.Attr) bool {
		if a.Key == "plugin" || a.Key == "component" {
			rec.component = a.Value.String()
		}
		return true
	}
	for _, a := range h.attrs {
		see(a)
	}
	r.Attrs(see)
	h.mu.Lock()
	*h.got = append(*h.got, rec)
	h.mu.Unlock()
	return nil
}

func (h *records) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

// WithGroup keeps the attributes flat: only "plugin" and "component" matter.
func (h *records) WithGroup(string) slog.Handler { return h }

func (h *records) all() []record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]record(nil), *h.got...)
}

// TestOneLog: the broker, raft and every plugin log through the broker's
// logger (Config.Logger, tandem serve's --log-level) and nothing goes to
// slog's default logger. At debug level each plugin's coordinator and
// raft are heard; at info level a start logs a few lines and none of
// raft's; at warn level nothing below warn is handled.
func TestOneLog(t *testing.T) {
	def := newRecords(slog.LevelDebug - 4)
	old := slog.Default()
	slog.SetDefault(slog.New(def))
	defer slog.SetDefault(old)

	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		t.Run(level.String(), func(t *testing.T) {
			h := newRecords(level)
			b, err := tandem.NewBroker(server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(h),
				Props: map[string]string{"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1", "mirror.topic.num.partitions": "1"}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			started := h.all()

			// Each plugin's coordinator loads its internal topic's shard.
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for keyType, key := range map[int8]string{0: "group", 1: "txn", 2: "mirror"} {
				req := kmsg.NewPtrFindCoordinatorRequest()
				req.CoordinatorType, req.CoordinatorKeys = keyType, []string{key}
				for {
					resp, err := req.RequestWith(ctx, cl)
					if err != nil {
						t.Fatal(err)
					}
					if len(resp.Coordinators) == 1 && resp.Coordinators[0].ErrorCode == 0 {
						break
					}
					select { // COORDINATOR_NOT_AVAILABLE while the shard loads
					case <-ctx.Done():
						t.Fatalf("FindCoordinator type %d: %+v", keyType, resp.Coordinators)
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			b.Close()

			all := h.all()
			heard := map[string]bool{}
			for _, r := range all {
				if r.level < level {
					t.Errorf("%v record handled at level %v: %+v", r.level, level, r)
				}
				heard[r.component] = true
			}
			switch level {
			case slog.LevelDebug:
				for _, c := range []string{"groups", "txn", "mirror", "raft"} {
					if !heard[c] {
						t.Errorf("nothing logged by %s at debug level; heard %v", c, heard)
					}
				}
			case slog.LevelInfo:
				for _, r := range started {
					if r.component == "raft" {
						t.Errorf("a single-node start logs raft's %q at %v", r.msg, r.level)
					}
				}
				if len(started) > 3 {
					t.Errorf("a single-node start logs %d lines at info level: %+v", len(started), started)
				}
			}
		})
	}
	if got := def.all(); len(got) > 0 {
		t.Errorf("%d records went to slog's default logger, not the broker's: %+v", len(got), got)
	}
}
