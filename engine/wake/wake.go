// Package wake is one fetch waiting for any of many partitions to move.
// A channel per partition serves a fetch of a few partitions; a fetch
// session of ten thousand would have to select over ten thousand
// channels at every read. A Waiter is one channel: each partition it
// watches (engine.Partition.Watch) wakes it at most once, and it wakes
// for good.
package wake

import (
	"sync"
	"sync/atomic"
)

// A Waiter is one fetch waiting for any of many partitions to move.
type Waiter struct {
	ch    chan struct{}
	once  sync.Once
	woken atomic.Bool
}

// NewWaiter returns a waiter not woken yet.
func NewWaiter() *Waiter { return &Waiter{ch: make(chan struct{})} }

// C is closed once the waiter is woken.
func (w *Waiter) C() <-chan struct{} { return w.ch }

// Wake wakes the waiter. A fetch that stops waiting wakes its own
// waiter, so that the partitions it watched drop it.
func (w *Waiter) Wake() {
	w.once.Do(func() {
		w.woken.Store(true)
		close(w.ch)
	})
}

// List are the Waiters of one partition event.
type List []*Waiter

// Add registers w, dropping those already woken (their fetches are
// done): a partition keeps at most the waiters of the fetches that
// watched it since it last moved.
func (l *List) Add(w *Waiter) {
	live := (*l)[:0]
	for _, x := range *l {
		if !x.woken.Load() {
			live = append(live, x)
		}
	}
	*l = append(live, w)
}

// WakeAll wakes and forgets them all.
func (l *List) WakeAll() {
	for i, w := range *l {
		w.Wake()
		(*l)[i] = nil
	}
	*l = (*l)[:0]
}
