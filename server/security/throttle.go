package security

import (
	"errors"
	"sync"
	"time"
)

// Throttle slows down password guessing. Every SASL step that checks a
// credential is first admitted for its user and its client address. A key
// with a few recent failures gets one attempt per interval, an interval
// that doubles with each further failure up to a ceiling; parallel
// connections queue for the same slots, and an attempt whose slot is too
// far off is refused without its credential being checked. A success
// clears the user's failures; failures are forgotten after a quiet spell.
//
// One misconfigured client retrying a wrong password must not lock out
// every other client behind the same address (a NAT, a Kubernetes node):
// a user that authenticated from an address recently passes that
// address's throttle, and only its own.
//
// Everything scales with connection.failed.authentication.delay.ms (d):
// the first throttled interval is d, the ceiling 20d, the longest queue
// 100d, the memory of failures 600d, of successes 36,000d (an hour). With
// Kafka's default of 100 ms, guessing 300 passwords of one user, or from
// one address, takes about ten minutes; 0 turns throttling off, as it
// turns off Kafka's delay.
type Throttle struct {
	delay time.Duration
	now   func() time.Time // time.Now; tests move it by hand

	mu      sync.Mutex
	keys    map[string]*throttled // "addr:..." and "user:..."
	trusted map[string]time.Time  // address + "\x00" + user: last success
}

type throttled struct {
	failures int
	last     time.Time // of the last failure
	next     time.Time // when the next attempt may start
}

const (
	freeFailures     = 3      // failures before attempts are spaced out
	maxThrottledKeys = 10_000 // users and addresses remembered, each map
	maxUserKey       = 256    // bytes of a user name kept in a key
)

var errThrottled = errors.New("too many failed authentications for this user or from this address; try again later")

func NewThrottle(delay time.Duration) *Throttle {
	return &Throttle{delay: delay, now: time.Now, keys: map[string]*throttled{}, trusted: map[string]time.Time{}}
}

func (t *Throttle) interval(failures int) time.Duration {
	if failures < freeFailures {
		return 0
	}
	return min(t.delay<<min(failures-freeFailures, 20), 20*t.delay)
}

// keysOf are the keys an attempt of user ("" if unknown) from addr is
// throttled by; the address's only if user did not succeed from it lately.
func (t *Throttle) keysOf(addr, user string, now time.Time) []string {
	user = user[:min(len(user), maxUserKey)]
	var keys []string
	if user != "" {
		keys = append(keys, "user:"+user)
	}
	if ok, found := t.trusted[addr+"\x00"+user]; !found || user == "" || now.Sub(ok) > 36_000*t.delay {
		keys = append(keys, "addr:"+addr)
	}
	return keys
}

// admit returns how long the attempt must wait for its slot, which it
// reserves, or errThrottled when the slot is further off than 100d.
func (t *Throttle) Admit(addr, user string) (time.Duration, error) {
	if t.delay <= 0 {
		return 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	keys := t.keysOf(addr, user, now)
	slot := now
	for _, k := range keys {
		if e := t.get(k, now); e != nil && e.next.After(slot) {
			slot = e.next
		}
	}
	wait := slot.Sub(now)
	if wait > 100*t.delay {
		return 0, errThrottled
	}
	for _, k := range keys {
		if e := t.get(k, now); e != nil && e.failures >= freeFailures {
			e.next = slot.Add(t.interval(e.failures))
		}
	}
	return wait, nil
}

// get returns the state of key, forgetting it after 600d without failure.
func (t *Throttle) get(key string, now time.Time) *throttled {
	e := t.keys[key]
	if e != nil && now.Sub(e.last) > 600*t.delay {
		delete(t.keys, key)
		return nil
	}
	return e
}

// failed records a failed attempt against the user and the address (which
// no longer trusts the user).
func (t *Throttle) Failed(addr, user string) {
	if t.delay <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	user = user[:min(len(user), maxUserKey)]
	delete(t.trusted, addr+"\x00"+user)
	keys := []string{"addr:" + addr}
	if user != "" {
		keys = append(keys, "user:"+user)
	}
	for _, k := range keys {
		e := t.get(k, now)
		if e == nil {
			if len(t.keys) >= maxThrottledKeys {
				evict(t.keys, func(e *throttled) bool { return now.Sub(e.last) > 600*t.delay })
			}
			e = &throttled{}
			t.keys[k] = e
		}
		e.failures++
		e.last = now
		if next := now.Add(t.interval(e.failures)); next.After(e.next) {
			e.next = next
		}
	}
}

// succeeded clears the user's failures and trusts it from addr.
func (t *Throttle) Succeeded(addr, user string) {
	if t.delay <= 0 || user == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	user = user[:min(len(user), maxUserKey)]
	delete(t.keys, "user:"+user)
	if len(t.trusted) >= maxThrottledKeys {
		evict(t.trusted, func(ok time.Time) bool { return now.Sub(ok) > 36_000*t.delay })
	}
	t.trusted[addr+"\x00"+user] = now
}

// evict makes room for a tenth of m: the expired entries go, then any (an
// attacker trying that many users can push anyone out anyway; a tenth at a
// time keeps the sweeps rare).
func evict[V any](m map[string]V, expired func(V) bool) {
	for k, v := range m {
		if expired(v) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < maxThrottledKeys*9/10 {
			break
		}
		delete(m, k)
	}
}
