package checker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestPauseController pauses (SIGSTOP) the broker that is the active
// controller past its session timeout: the new controller must fence it
// alone. The other brokers heartbeat to the new controller in time, so
// every partition keeps a leader and an ISR of the two that run.
func TestPauseController(t *testing.T) {
	tandemtest.Long(t)
	c := tandemtest.StartProcCluster(t, 3, nil)
	ctx := context.Background()
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	resp, err := adm.CreateTopic(ctx, 12, 3, nil, "paused")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		c.Partitions("paused", func(ps map[int32]tandemtest.PartitionState) bool {
			for _, p := range ps {
				if len(p.ISR) != 3 || p.Leader < 0 {
					return false
				}
			}
			return len(ps) == 12
		})
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		paused := md.Controller
		var others []int32
		for id := int32(1); id <= 3; id++ {
			if id != paused {
				others = append(others, id)
			}
		}
		b := c.Broker(paused)
		b.Pause()
		time.Sleep(6 * time.Second) // twice broker.session.timeout.ms
		ps := c.Partitions("paused", func(ps map[int32]tandemtest.PartitionState) bool {
			for _, p := range ps {
				if p.Leader == paused || p.Leader < 0 {
					return false
				}
			}
			return true
		}, others...)
		b.Resume()
		for i, p := range ps {
			if !slices.Equal(p.ISR, others) {
				t.Errorf("round %d, controller %d paused: partition %d has ISR %v, want %v", round, paused, i, p.ISR, others)
			}
		}
		if t.Failed() {
			return
		}
	}
}
