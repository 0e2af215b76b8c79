package checker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestClusterStopsTogether is issue 31's report: with SIGTERM sent to
// every broker of a cluster at once, the last one waited the whole 30 s
// controlled-shutdown limit for leaderships that had nowhere to go. Each
// broker must exit well before that limit (20 s here, under a loaded
// machine's slack), and after a restart of all three every acknowledged
// record is read back where it was acknowledged.
func TestClusterStopsTogether(t *testing.T) {
	tandemtest.Long(t)
	c := tandemtest.StartProcCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "together"
	createTopic(t, ctx, c.Addrs(), topic, 6)
	h, failed, stop := produceChecked(t, ctx, c.Addrs(), topic)
	waitCond(t, time.Minute, "the load", func() error {
		if n := h.Len(); n < 500 {
			return fmt.Errorf("%d writes acknowledged, want 500", n)
		}
		return nil
	})
	stop()
	c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool {
		for _, p := range ps {
			if len(p.ISR) != 3 {
				return false
			}
		}
		return len(ps) == 6
	})

	var wg sync.WaitGroup
	errs := make([]error, 3)
	took := make([]time.Duration, 3)
	for i, b := range c.Brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			errs[i] = b.Stop(20 * time.Second)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		t.Logf("broker %d stopped after %v", i+1, took[i].Round(10*time.Millisecond))
		if err != nil {
			t.Errorf("broker %d, SIGTERMed with the others: %v", i+1, err)
		}
	}
	if t.Failed() {
		return
	}

	var rw sync.WaitGroup
	for _, b := range c.Brokers {
		rw.Add(1)
		go func() { defer rw.Done(); b.Restart() }()
	}
	rw.Wait()
	read, err := checker.ReadAll(ctx, topic, kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	rep := h.Check(read)
	t.Logf("%v; %d writes not acknowledged", rep, failed.Load())
	if !rep.OK() {
		t.Fatal(rep)
	}
}
