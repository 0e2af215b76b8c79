package tandemtest

import (
	"context"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/server"
)

// StartInProcess starts a broker in this process with the plugins of
// `tandem serve` (tandem.NewBroker: consumer groups, transactions, ACLs,
// mirroring, less those a build tag omits), on a free 127.0.0.1 port with
// a fresh data dir and the given broker properties, and closes it at the
// end of the test. Logs go to t.Log at warn level and above. A test that
// needs a broker without plugins, or with its own, calls server.New.
func StartInProcess(t testing.TB, props map[string]string) *server.Broker {
	t.Helper()
	return StartInProcessIn(t, t.TempDir(), props)
}

// StartInProcessIn is StartInProcess on the data dir dir.
func StartInProcessIn(t testing.TB, dir string, props map[string]string) *server.Broker {
	t.Helper()
	b, err := tandem.NewBroker(server.Config{
		DataDir: dir,
		Listen:  "127.0.0.1:0",
		Props:   props,
		Logger:  Logger(t),
	})
	if err != nil {
		t.Fatalf("tandem.NewBroker: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("starting broker: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing broker: %v", err)
		}
	})
	return b
}
