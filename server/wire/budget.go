// Package wire holds what reading Kafka requests off the network shares
// across connections: the frame reader, the memory budget of requests
// being read or handled (queued.max.request.bytes), the pool of their
// frame buffers, and the table of the API keys a broker serves (APIs),
// which says what a request decodes into and which handler answers it.
// The broker registers its own keys in that table as it does its
// plugins', with one Handler type for both.
package wire

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// Budget bounds the bytes of requests being read or waiting to be
// handled, over all connections (Kafka's queued.max.request.bytes).
type Budget struct {
	limit int64 // <= 0: unbounded

	mu   sync.Mutex
	used int64
	// inflating is the part of used that decompression holds (see
	// acquireInflate), and inflatePeak the most it reached.
	inflating, inflatePeak int64
	changed                chan struct{} // closed and replaced whenever used drops
	// peak is the most used since memory was last handed back to the
	// operating system; giveBack does that once requests stopped.
	peak     int64
	giveBack *time.Timer
}

func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, changed: make(chan struct{})}
}

// Acquire reserves n bytes, waiting while they do not fit. A frame larger
// than the whole budget waits until nothing else is reserved, then takes
// the budget alone. It returns what it reserved, to be released.
func (q *Budget) Acquire(ctx context.Context, n int64) (int64, error) {
	if q.limit <= 0 {
		return 0, nil
	}
	n = min(n, q.limit)
	err := q.reserve(ctx, func() bool { return q.used+n <= q.limit }, func() {
		q.used += n
		q.peak = max(q.peak, q.used)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// reserve calls take, with mu held, once fits holds, waiting for a
// release while it does not.
func (q *Budget) reserve(ctx context.Context, fits func() bool, take func()) error {
	for {
		q.mu.Lock()
		if fits() {
			take()
			q.mu.Unlock()
			return nil
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// AcquireInflate reserves n bytes for decompressing a request's records
// (engine.DecodeMemory). They count in used, so that no new request is
// read while decompression takes the budget; but the wait here is only
// for other decompressions, which never wait while holding theirs. A
// request waiting for its frame's reservation holds nothing and one
// waiting here holds only its frame: waiting for frames too would let
// every holder wait for each other. At most the whole budget is taken;
// release with ReleaseInflate.
func (q *Budget) AcquireInflate(ctx context.Context, n int64) (int64, error) {
	if q.limit <= 0 || n <= 0 {
		return 0, nil
	}
	n = min(n, q.limit)
	err := q.reserve(ctx, func() bool { return q.inflating+n <= q.limit }, func() {
		q.inflating += n
		q.inflatePeak = max(q.inflatePeak, q.inflating)
		q.used += n
		q.peak = max(q.peak, q.used)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// ReleaseInflate releases what AcquireInflate reserved.
func (q *Budget) ReleaseInflate(n int64) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	q.inflating -= n
	q.mu.Unlock()
	q.Release(n)
}

// Inflating returns the bytes decompression holds now and the most it
// has held at once.
func (q *Budget) Inflating() (now, peak int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflating, q.inflatePeak
}

// InUse is the number of bytes reserved now.
func (q *Budget) InUse() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.used
}

// After a burst of large requests (returnAfter bytes reserved at once)
// the broker hands their memory back to the operating system once the
// reservations stayed below returnIdle (small requests, long-polling
// fetches) for returnQuiet, rather than keeping it until the runtime's
// periodic collection (every two minutes) lets it go.
const (
	returnAfter = 64 << 20
	returnIdle  = 1 << 20
	returnQuiet = time.Second
)

// Release releases what Acquire reserved, and wakes the waiting readers.
func (q *Budget) Release(n int64) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used -= n
	close(q.changed)
	q.changed = make(chan struct{})
	if q.used > returnIdle || q.peak < returnAfter {
		return
	}
	if q.giveBack == nil {
		q.giveBack = time.AfterFunc(returnQuiet, q.returnMemory)
	} else {
		q.giveBack.Reset(returnQuiet)
	}
}

func (q *Budget) returnMemory() {
	q.mu.Lock()
	idle := q.used <= returnIdle
	if idle {
		q.peak = 0
	}
	q.mu.Unlock()
	if idle {
		// Two collections: the first moves the frame pool's buffers to
		// its victim cache, the second frees them.
		runtime.GC()
		debug.FreeOSMemory()
	}
}

// Stop cancels a pending return of memory (the broker is closing).
func (q *Budget) Stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.giveBack != nil {
		q.giveBack.Stop()
	}
}
