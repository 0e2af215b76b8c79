package engine

import (
	"sync"
	"sync/atomic"
)

// A Waiter is one fetch waiting for any of many partitions to move. A
// channel per partition (Wait) serves a fetch of a few partitions; a
// fetch session of ten thousand would have to select over ten thousand
// channels at every read. A Waiter is one channel: each partition it
// watches wakes it at most once, and it wakes for good.
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

// waiters are the Waiters of one partition event.
type waiters []*Waiter

// add registers w, dropping those already woken (their fetches are
// done): a partition keeps at most the waiters of the fetches that
// watched it since it last moved.
func (ws *waiters) add(w *Waiter) {
	live := (*ws)[:0]
	for _, x := range *ws {
		if !x.woken.Load() {
			live = append(live, x)
		}
	}
	*ws = append(live, w)
}

// wake wakes and forgets them all.
func (ws *waiters) wake() {
	for i, w := range *ws {
		w.Wake()
		(*ws)[i] = nil
	}
	*ws = (*ws)[:0]
}

// Watch registers w to be woken the next time the high watermark
// advances (or the partition is truncated or deleted, or the engine
// closes), like Wait; with end, the next time the log end advances,
// like WaitEnd.
func (p *Partition) Watch(w *Waiter, end bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.shut:
		w.Wake()
	case end:
		p.endWaiters.add(w)
	default:
		p.waiters.add(w)
	}
}
