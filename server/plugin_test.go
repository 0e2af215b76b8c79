package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// orderPlugin records the calls the broker makes to it.
type orderPlugin struct {
	mu     sync.Mutex
	events []string
}

func (o *orderPlugin) add(e string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *orderPlugin) Start(context.Context, plugin.Host) error { o.add("start"); return nil }
func (o *orderPlugin) Stop(context.Context) error               { o.add("stop"); return nil }
func (o *orderPlugin) OnLeaderChange(c plugin.LeaderChange) {
	o.add(fmt.Sprintf("leader %s-%d %v", c.Topic, c.Partition, c.Leader))
}
func (o *orderPlugin) OnMetadataUpdate(metadata.Delta, *metadata.Image) { o.add("metadata") }

// TestStartOrder: a broker starts its plugins before it reports the
// partitions it leads (on a restart, every one of them) or any metadata,
// and stops them after the last report.
func TestStartOrder(t *testing.T) {
	dir := t.TempDir()
	b := startBrokerWith(t, Config{DataDir: dir})
	createTopic(t, b, "ordered", 2, nil)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	o := &orderPlugin{}
	b = startBrokerWith(t, Config{DataDir: dir, Plugins: []any{o}})
	wait.Until(t, 10*time.Second, func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !slices.Contains(o.events, "metadata") {
			return fmt.Errorf("no metadata update in %q", o.events)
		}
		return nil
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	got := o.events
	if len(got) < 5 || got[0] != "start" || got[len(got)-1] != "stop" {
		t.Fatalf("events %q: want start first and stop last", got)
	}
	leaders := slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(got), func(e string) bool { return e == "start" || e == "stop" || e == "metadata" })))
	if want := []string{"leader ordered-0 true", "leader ordered-1 true"}; !slices.Equal(leaders, want) {
		t.Errorf("leader changes %q, want %q", leaders, want)
	}
}
