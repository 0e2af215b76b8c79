package engine

import "github.com/tandem-kafka/tandem/engine/wake"

// Watch registers w to be woken the next time the high watermark
// advances (or the partition is truncated or deleted, or the engine
// closes), like Wait; with end, the next time the log end advances,
// like WaitEnd.
func (p *Partition) Watch(w *wake.Waiter, end bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.shut:
		w.Wake()
	case end:
		p.endWaiters.Add(w)
	default:
		p.waiters.Add(w)
	}
}
