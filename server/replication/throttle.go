package replication

import (
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/config"
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
	followerReplicasKey  = "follower.replication.throttled.replicas"
	followerRateKey      = "follower.replication.throttled.rate"
	leaderReplicasKey    = "leader.replication.throttled.replicas"
	leaderRateKey        = "leader.replication.throttled.rate"
)

// Quota is a token bucket of bytes per second that holds at most one
// second's worth: a replication throttle's, shared by every fetch it
// throttles.
type Quota struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func (q *Quota) refillLocked(rate int64, now time.Time) {
	if q.last.IsZero() {
		q.tokens = float64(rate)
	} else {
		q.tokens = min(float64(rate), q.tokens+now.Sub(q.last).Seconds()*float64(rate))
	}
	q.last = now
}

// Wait returns how long until the quota has room again, 0 if it has now.
func (q *Quota) Wait(rate int64, now time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refillLocked(rate, now)
	if q.tokens >= 0 {
		return 0
	}
	return time.Duration(-q.tokens / float64(rate) * float64(time.Second))
}

// Record takes n bytes replicated from the quota.
func (q *Quota) Record(n int, rate int64, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refillLocked(rate, now)
	q.tokens -= float64(n)
}

// throttle is the quota that bounds one partition's replication.
type throttle struct {
	q     *Quota
	rate  int64
	bytes *metrics.Counter // tandem_server_replication_throttled_bytes_total
}

// throttleRates are this broker's follower-side rates, 0 when unlimited.
type throttleRates struct{ mirror, follower int64 }

// followerThrottleRates reads mirror.replication.throttled.rate and
// follower.replication.throttled.rate (whose default, Long.MAX_VALUE as in
// Kafka, means unlimited).
func (m *Manager) followerThrottleRates() throttleRates {
	return throttleRates{mirror: m.throttleRate(throttledRateKey), follower: m.throttleRate(followerRateKey)}
}

// LeaderThrottleRate is leader.replication.throttled.rate, 0 when
// unlimited: the Fetch handler reads it once per follower's fetch.
func (m *Manager) LeaderThrottleRate() int64 { return m.throttleRate(leaderRateKey) }

// LeaderQuota is the quota of leader.replication.throttled.rate, shared
// by the fetches of the followers it throttles (LeaderThrottled).
func (m *Manager) LeaderQuota() *Quota { return &m.leaderQuota }

func (m *Manager) throttleRate(key string) int64 {
	n, err := strconv.ParseInt(m.cfg.Layers(m.image(), nil).Str(key), 10, 64)
	if err != nil || n <= 0 || n == math.MaxInt64 {
		return 0
	}
	return n
}

// LeaderThrottled reports whether this leader throttles its replies to
// follower's fetches of partition p of t: leader.replication.throttled.replicas
// names the follower for p and, as in Kafka, it is out of the ISR.
func LeaderThrottled(t *metadata.Topic, p, follower int32, part metadata.Partition) bool {
	v, ok := t.Configs[leaderReplicasKey]
	if !ok || slices.Contains(part.ISR, follower) {
		return false
	}
	s, err := config.ParseThrottled(v)
	return err == nil && s.Has(p, follower)
}

// followerThrottle returns the quota bounding this broker's replication of
// fp: the mirror one for a mirror partition that
// mirror.replication.throttled.replicas names, else the follower one when
// follower.replication.throttled.replicas names it. Kafka's follower
// throttles only a replica that has not caught up; ours has not while it
// is out of the ISR, which is what a reassignment's new replica is.
func (m *Manager) followerThrottle(img *metadata.Image, fp *followed, r throttleRates) (throttle, bool) {
	t := img.TopicsByID[fp.key.id]
	if t == nil {
		return throttle{}, false
	}
	named := func(key string) bool {
		v, ok := t.Configs[key]
		if !ok {
			return false
		}
		s, err := config.ParseThrottled(v)
		return err == nil && s.Has(fp.key.p, m.cfg.NodeID)
	}
	if r.mirror > 0 && img.MirrorOf(t.Name) != "" && named(throttledReplicasKey) {
		return throttle{&m.mirrorQuota, r.mirror, m.cfg.ThrottledMirror}, true
	}
	if r.follower > 0 && named(followerReplicasKey) && !inISR(t, fp.key.p, m.cfg.NodeID) {
		return throttle{&m.followerQuota, r.follower, m.cfg.ThrottledFollower}, true
	}
	return throttle{}, false
}

// inISR reports whether broker is in the ISR of partition p of t.
func inISR(t *metadata.Topic, p, broker int32) bool {
	if int(p) >= len(t.Partitions) {
		return false
	}
	return slices.Contains(t.Partitions[p].ISR, broker)
}
