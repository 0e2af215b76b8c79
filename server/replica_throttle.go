package server

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandem-kafka/tandem/raftmeta"
)

// KIP-1279's mirror.replication.throttled.replicas and
// mirror.replication.throttled.rate, as Kafka's follower throttle
// (follower.replication.throttled.*) works: a follower replicates the
// partitions of mirror topics whose topic config names it (partition:broker
// pairs, or * for every replica) at no more than its broker's rate, one
// quota shared by all its fetchers. While the quota is used up, those
// partitions are left out of its fetches (the others go on), and each of
// their fetches asks for at most a second's worth of bytes.

const (
	throttledReplicasKey = "mirror.replication.throttled.replicas"
	throttledRateKey     = "mirror.replication.throttled.rate"
)

// throttledSet is a parsed throttled replicas list.
type throttledSet struct {
	all   bool
	pairs map[[2]int32]bool // partition, broker
}

// parseThrottledReplicas parses "", "*" or "p:b,p:b" (whitespace and the
// brackets kafka-configs.sh users write around lists are allowed).
func parseThrottledReplicas(v string) (throttledSet, error) {
	v = strings.TrimSpace(v)
	v = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"))
	if v == "*" {
		return throttledSet{all: true}, nil
	}
	s := throttledSet{pairs: map[[2]int32]bool{}}
	if v == "" {
		return s, nil
	}
	for _, item := range strings.Split(v, ",") {
		p, b, ok := strings.Cut(strings.TrimSpace(item), ":")
		pi, perr := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		bi, berr := strconv.ParseInt(strings.TrimSpace(b), 10, 32)
		if !ok || perr != nil || berr != nil || pi < 0 || bi < 0 {
			return throttledSet{}, fmt.Errorf("%q is not partition:broker; the list is [PartitionId]:[BrokerId],... or *", strings.TrimSpace(item))
		}
		s.pairs[[2]int32{int32(pi), int32(bi)}] = true
	}
	return s, nil
}

func (s throttledSet) has(partition, broker int32) bool {
	return s.all || s.pairs[[2]int32{partition, broker}]
}

// replicaQuota is a token bucket of bytes per second that holds at most
// one second's worth.
type replicaQuota struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func (q *replicaQuota) refillLocked(rate int64, now time.Time) {
	if q.last.IsZero() {
		q.tokens = float64(rate)
	} else {
		q.tokens = min(float64(rate), q.tokens+now.Sub(q.last).Seconds()*float64(rate))
	}
	q.last = now
}

// wait returns how long until the quota has room again, 0 if it has now.
func (q *replicaQuota) wait(rate int64, now time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refillLocked(rate, now)
	if q.tokens >= 0 {
		return 0
	}
	return time.Duration(-q.tokens / float64(rate) * float64(time.Second))
}

// record takes n bytes replicated from the quota.
func (q *replicaQuota) record(n int, rate int64, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refillLocked(rate, now)
	q.tokens -= float64(n)
}

// mirrorThrottled reports whether this broker's replication of fp is
// throttled: a partition of a mirror topic whose
// mirror.replication.throttled.replicas names this broker for it.
func (b *Broker) mirrorThrottled(img *raftmeta.Image, fp *followed) bool {
	t := img.TopicsByID[fp.key.id]
	if t == nil || img.MirrorOf(t.Name) == "" {
		return false
	}
	v, ok := t.Configs[throttledReplicasKey]
	if !ok {
		return false
	}
	s, err := parseThrottledReplicas(v)
	return err == nil && s.has(fp.key.p, b.cfg.NodeID)
}

// mirrorThrottleRate is this broker's mirror.replication.throttled.rate,
// 0 when unlimited.
func (b *Broker) mirrorThrottleRate() int64 {
	n, err := strconv.ParseInt(b.layersOf(b.image(), nil).str(throttledRateKey), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
