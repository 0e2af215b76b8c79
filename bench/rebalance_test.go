package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// BenchmarkRebalance measures how long a consumer group takes to settle
// when 50 members join an empty group at once, and when 10 of them then
// leave, with the classic protocol (franz-go's default cooperative-sticky
// balancer, client-side) and KIP-848's (the broker's uniform assignor),
// each with the clients' and the broker's default timings, and KIP-848's
// again with a 500 ms heartbeat interval (consumer-hb500), since its
// members learn their new assignment only when they heartbeat. Settled means
// every partition owned by exactly one live member, as the members'
// OnPartitions callbacks tell, and every member within one partition of
// the others. Figures: docs/benchmarks.md, "Rebalance".
//
//	go test -run '^$' -bench Rebalance -benchtime 3x ./bench/
func BenchmarkRebalance(b *testing.B) {
	const partitions, members, leaving = 100, 50, 10
	for _, protocol := range []string{"classic", "consumer", "consumer-hb500"} {
		b.Run(protocol, func(b *testing.B) {
			var join, leave time.Duration
			for i := range b.N {
				b.StopTimer()
				j, l := rebalanceOnce(b, protocol, fmt.Sprintf("rb-%s-%d", protocol, i), partitions, members, leaving)
				join += j
				leave += l
			}
			b.ReportMetric(join.Seconds()/float64(b.N), "join-s")
			b.ReportMetric(leave.Seconds()/float64(b.N), "leave-s")
			b.ReportMetric(0, "ns/op") // the two figures above are the measure
		})
	}
}

// owners tracks what each member owns, from its rebalance callbacks.
type owners struct {
	mu   sync.Mutex
	owns []map[int32]bool // by member
	live []bool
}

func (o *owners) callbacks(i int) []kgo.Opt {
	set := func(own bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			o.mu.Lock()
			defer o.mu.Unlock()
			for _, ps := range m {
				for _, p := range ps {
					if own {
						o.owns[i][p] = true
					} else {
						delete(o.owns[i], p)
					}
				}
			}
		}
	}
	return []kgo.Opt{kgo.OnPartitionsAssigned(set(true)), kgo.OnPartitionsRevoked(set(false)), kgo.OnPartitionsLost(set(false))}
}

// settled says whether the live members own every partition once and
// evenly.
func (o *owners) settled(partitions int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[int32]bool{}
	var live, lo, hi int
	lo = partitions
	for i, own := range o.owns {
		if !o.live[i] {
			continue
		}
		live++
		lo, hi = min(lo, len(own)), max(hi, len(own))
		for p := range own {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(seen) == partitions && hi-lo <= 1 && live > 0
}

func rebalanceOnce(b *testing.B, protocol, group string, partitions, members, leaving int) (join, leave time.Duration) {
	var props map[string]string
	if protocol == "consumer-hb500" {
		props = map[string]string{"group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500"}
	}
	br := tandemtest.StartInProcess(b, props)
	addr := br.Addr()
	topic := group
	tandemtest.CreateTopic(b, addr, topic, int32(partitions))
	o := &owners{owns: make([]map[int32]bool, members), live: make([]bool, members)}
	clients := make([]*kgo.Client, members)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	wait := func(what string) time.Duration {
		start := time.Now()
		for deadline := start.Add(3 * time.Minute); !o.settled(partitions); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("%s: the group did not settle", what)
			}
		}
		return time.Since(start)
	}

	start := time.Now()
	for i := range members {
		o.owns[i], o.live[i] = map[int32]bool{}, true
		opts := append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic)}, o.callbacks(i)...)
		if protocol != "classic" {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = cl
		go cl.PollFetches(context.Background()) // joins the group
	}
	wait("join")
	join = time.Since(start)

	start = time.Now()
	var wg sync.WaitGroup
	for i := range leaving {
		o.mu.Lock()
		o.live[i] = false
		o.mu.Unlock()
		cl := clients[i]
		clients[i] = nil
		wg.Add(1)
		go func() { defer wg.Done(); cl.Close() }() // leaves the group
	}
	wait("leave")
	leave = time.Since(start)
	wg.Wait()
	return join, leave
}
