package checker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Leaders asks every broker, each for itself (its own metadata image),
// who leads the partitions of some topics in which leader epoch, and
// records every answer: two brokers named leader of one partition in
// one epoch are two leaders that may both accept writes, which Kafka's
// epochs exist to rule out. A broker cut off from the controller answers
// from an image that stopped: that is the view its clients have, and it
// must still not name another leader for an epoch someone else leads.
type Leaders struct {
	mu     sync.Mutex
	seen   map[leaderKey]map[int32]string // → leader → the broker that first said so
	asked  int
	byNode map[string]*kgo.Client
}

type leaderKey struct {
	topic     string
	partition int32
	epoch     int32
}

// Watch asks the brokers at addrs every interval until ctx ends; it
// returns at once.
func (l *Leaders) Watch(ctx context.Context, addrs []string, interval time.Duration, topics ...string) {
	l.mu.Lock()
	if l.seen == nil {
		l.seen = map[leaderKey]map[int32]string{}
		l.byNode = map[string]*kgo.Client{}
	}
	for _, a := range addrs {
		if l.byNode[a] == nil {
			cl, err := kgo.NewClient(kgo.SeedBrokers(a), kgo.DialTimeout(time.Second))
			if err == nil {
				l.byNode[a] = cl
			}
		}
	}
	l.mu.Unlock()
	for _, a := range addrs {
		go func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for ctx.Err() == nil {
				l.ask(ctx, a, topics)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		}()
	}
}

// ask sends one Metadata request to the broker at addr itself (not to
// whichever broker the client prefers) and records its answer.
func (l *Leaders) ask(ctx context.Context, addr string, topics []string) {
	l.mu.Lock()
	cl := l.byNode[addr]
	l.mu.Unlock()
	if cl == nil {
		return
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(rctx, req)
	if err != nil {
		return // cut off: nothing to record
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
	for _, t := range resp.(*kmsg.MetadataResponse).Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 || t.Topic == nil {
				continue
			}
			k := leaderKey{*t.Topic, p.Partition, p.LeaderEpoch}
			if l.seen[k] == nil {
				l.seen[k] = map[int32]string{}
			}
			if _, ok := l.seen[k][p.Leader]; !ok {
				l.seen[k][p.Leader] = addr
			}
		}
	}
}

// Close closes the clients of Watch.
func (l *Leaders) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, cl := range l.byNode {
		cl.Close()
	}
}

// Report is the number of answers, of (partition, epoch) pairs seen,
// and each pair with more than one leader.
func (l *Leaders) Report() (answers, epochs int, problems []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, leaders := range l.seen {
		if len(leaders) > 1 {
			var said []string
			for _, id := range slices.Sorted(maps.Keys(leaders)) {
				said = append(said, fmt.Sprintf("%d (said %s)", id, leaders[id]))
			}
			problems = append(problems, fmt.Sprintf("%s-%d epoch %d: leaders %v", k.topic, k.partition, k.epoch, said))
		}
	}
	slices.Sort(problems)
	return l.asked, len(l.seen), problems
}
