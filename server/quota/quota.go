// Package quota enforces client quotas as Apache Kafka's
// ClientQuotaManager does: the rate of a quota type is measured per
// resolved quota entity over quota.window.num samples of
// quota.window.size.seconds; a request that takes it above the bound gets
// a throttle time that brings the rate back to the bound (capped at one
// window for request_percentage), which the broker returns in the
// response and mutes the connection for (KIP-219).
package quota

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Quota keys (Kafka's QuotaConfig names).
const (
	Produce = "producer_byte_rate"
	Fetch   = "consumer_byte_rate"
	Request = "request_percentage"
)

type Quotas struct {
	window  time.Duration
	samples int

	mu      sync.Mutex
	sensors map[string]*rateSensor // by quota key + entity key
}

// New reads quota.window.num (default 11) and
// quota.window.size.seconds (default 1).
func New(m map[string]string) (*Quotas, error) {
	q := &Quotas{window: time.Second, samples: 11, sensors: map[string]*rateSensor{}}
	count := func(key string, least int, dst *int) error {
		v := strings.TrimSpace(m[key])
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < least {
			return fmt.Errorf("%s %q is not a number >= %d", key, v, least)
		}
		*dst = n
		return nil
	}
	secs := 1
	if err := errors.Join(count("quota.window.num", 2, &q.samples), count("quota.window.size.seconds", 1, &secs)); err != nil {
		return nil, err
	}
	q.window = time.Duration(secs) * time.Second
	return q, nil
}

// resolve finds the quota of key for (user, clientID) with Kafka's
// precedence, most specific first: user+client, user+default client,
// user, default user+client, default user+default client, default user,
// client, default client. It returns the bound and the entity it came
// from, whose sensor all matching connections share.
func resolveQuota(img *metadata.Image, key, user, clientID string) (float64, string, bool) {
	if len(img.ClientQuotas) == 0 {
		return 0, "", false
	}
	def := ""
	u, c := &user, &clientID
	for _, e := range []metadata.QuotaEntity{
		{User: u, ClientID: c}, {User: u, ClientID: &def}, {User: u},
		{User: &def, ClientID: c}, {User: &def, ClientID: &def}, {User: &def},
		{ClientID: c}, {ClientID: &def},
	} {
		if user == "" && e.User == u || clientID == "" && e.ClientID == c {
			continue // an empty name is no entity, never the default one
		}
		k := e.Key()
		if q, ok := img.ClientQuotas[k]; ok {
			if v, ok := q.Values[key]; ok {
				// The sensor of a default entity is still per name.
				if e.User == &def {
					k = strings.Replace(k, "user@default", "user="+user, 1)
				}
				if e.ClientID == &def {
					k = strings.Replace(k, "client-id@default", "client-id="+clientID, 1)
				}
				return v, key + "|" + k, true
			}
		}
	}
	return 0, "", false
}

// Record adds value to the sensor of key for (user, clientID) and returns
// the throttle time, zero when no quota applies or the rate is within it.
func (q *Quotas) Record(img *metadata.Image, key, user, clientID string, value float64, now time.Time) time.Duration {
	bound, sensor, ok := resolveQuota(img, key, user, clientID)
	if !ok {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.sensors[sensor]
	if s == nil {
		s = &rateSensor{samples: make([]sample, q.samples)}
		q.sensors[sensor] = s
	}
	rate, win := s.record(value, now, q.window)
	if rate <= bound {
		return 0
	}
	// The time at which the rate over the window would fall back to
	// the bound: (rate - bound) / bound * window. Kafka caps it at one
	// window for request-time quotas only.
	d := time.Duration((rate - bound) / bound * float64(win))
	if key == Request {
		d = min(d, q.window)
	}
	return d
}

// rateSensor is Kafka's SampledStat Rate: samples of one window each.
type rateSensor struct {
	samples []sample
	cur     int
}

type sample struct {
	start time.Time
	value float64
}

// record adds v and returns the rate per second and the window it is
// measured over: from the oldest live sample to now, at least
// (samples-1) windows, as Kafka does so that a new sensor does not start
// with a huge rate.
func (s *rateSensor) record(v float64, now time.Time, window time.Duration) (float64, time.Duration) {
	c := &s.samples[s.cur]
	if c.start.IsZero() {
		c.start = now
	} else if now.Sub(c.start) >= window {
		s.cur = (s.cur + 1) % len(s.samples)
		s.samples[s.cur] = sample{start: now}
		c = &s.samples[s.cur]
	}
	c.value += v
	total, oldest := 0.0, now
	maxAge := time.Duration(len(s.samples)) * window
	for i := range s.samples {
		sm := &s.samples[i]
		if sm.start.IsZero() {
			continue
		}
		if now.Sub(sm.start) >= maxAge {
			*sm = sample{}
			continue
		}
		total += sm.value
		if sm.start.Before(oldest) {
			oldest = sm.start
		}
	}
	win := max(now.Sub(oldest), time.Duration(len(s.samples)-1)*window)
	return total / win.Seconds(), win
}

// User is the user name of a principal for quotas ("User:alice" is
// alice); unauthenticated clients share the user ANONYMOUS.
func User(principal string) string {
	_, name, _ := strings.Cut(principal, ":")
	return name
}
