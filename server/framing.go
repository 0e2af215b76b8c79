package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// Reading a request costs memory in proportion to what the client really
// sent, and all requests being read or waiting for their handler share one
// budget:
//
//   - the 4-byte size is checked against the frame cap before anything
//     else (512 KiB before SASL authentication, socket.request.max.bytes
//     after);
//   - the frame's size is then reserved in the broker's budget
//     (queued.max.request.bytes); while the budget is full the reader
//     waits without reading, so the client's TCP window closes;
//   - the body is read into a buffer that grows as bytes arrive, so that a
//     client announcing 100 MB and sending nothing costs one small buffer;
//   - the whole frame must arrive within tandem.request.read.timeout.ms of
//     its size, or the connection is closed: a client trickling bytes
//     cannot keep its reservation forever.
//
// The reservation is released when the request's handler returns.

// firstChunk is the buffer a frame's body starts in; it doubles each time
// the client filled it.
const firstChunk = 256 << 10

// requestBytes bounds the bytes of requests being read or waiting to be
// handled, over all connections (Kafka's queued.max.request.bytes).
type requestBytes struct {
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

func newRequestBytes(limit int64) *requestBytes {
	return &requestBytes{limit: limit, changed: make(chan struct{})}
}

// acquire reserves n bytes, waiting while they do not fit. A frame larger
// than the whole budget waits until nothing else is reserved, then takes
// the budget alone. It returns what it reserved, to be released.
func (q *requestBytes) acquire(ctx context.Context, n int64) (int64, error) {
	if q.limit <= 0 {
		return 0, nil
	}
	n = min(n, q.limit)
	for {
		q.mu.Lock()
		if q.used+n <= q.limit {
			q.used += n
			q.peak = max(q.peak, q.used)
			q.mu.Unlock()
			return n, nil
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// acquireInflate reserves n bytes for decompressing a request's records
// (engine.DecodeMemory). They count in used, so that no new request is
// read while decompression takes the budget; but the wait here is only
// for other decompressions, which never wait while holding theirs. A
// request waiting for its frame's reservation holds nothing and one
// waiting here holds only its frame: waiting for frames too would let
// every holder wait for each other. At most the whole budget is taken;
// release with releaseInflate.
func (q *requestBytes) acquireInflate(ctx context.Context, n int64) (int64, error) {
	if q.limit <= 0 || n <= 0 {
		return 0, nil
	}
	n = min(n, q.limit)
	for {
		q.mu.Lock()
		if q.inflating+n <= q.limit {
			q.inflating += n
			q.inflatePeak = max(q.inflatePeak, q.inflating)
			q.used += n
			q.peak = max(q.peak, q.used)
			q.mu.Unlock()
			return n, nil
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (q *requestBytes) releaseInflate(n int64) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	q.inflating -= n
	q.mu.Unlock()
	q.release(n)
}

// inUse is the number of bytes reserved now.
func (q *requestBytes) inUse() int64 {
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

func (q *requestBytes) release(n int64) {
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

func (q *requestBytes) returnMemory() {
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

// stop cancels a pending return of memory (the broker is closing).
func (q *requestBytes) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.giveBack != nil {
		q.giveBack.Stop()
	}
}

// readFrame reads one size-prefixed frame of at least minSize bytes and
// returns it with the bytes it reserved in the broker's budget, which the
// caller releases. The wait for the size is the idle timeout; io.EOF there
// is a normal close.
func (c *conn) readFrame(br *bufio.Reader, minSize int32) (body []byte, reserved int64, err error) {
	c.nc.SetReadDeadline(time.Now().Add(connIdleTimeout))
	var sizeBuf [4]byte
	if _, err := io.ReadFull(br, sizeBuf[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, 0, fmt.Errorf("idle for %v", connIdleTimeout)
		}
		return nil, 0, err
	}
	size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
	// Check the size before anything else: a 2 GiB prefix must not
	// cost 2 GiB.
	if limit := c.maxFrame(); size < minSize || size > limit {
		return nil, 0, fmt.Errorf("frame size %d outside [%d, %d]", size, minSize, limit)
	}
	if reserved, err = c.b.reqBytes.acquire(c.b.ctx, int64(size)); err != nil {
		return nil, 0, err
	}
	c.nc.SetReadDeadline(time.Now().Add(c.b.props.RequestReadTimeout))
	if body, err = c.readBody(br, int(size)); err != nil {
		c.b.reqBytes.release(reserved)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, 0, fmt.Errorf("frame of %d bytes not received within %v (tandem.request.read.timeout.ms)", size, c.b.props.RequestReadTimeout)
		}
		return nil, 0, fmt.Errorf("truncated frame of %d bytes: %w", size, err)
	}
	c.b.m.bytesIn.Add(int(size) + 4)
	return body, reserved, nil
}

// readBody reads n bytes into a buffer that starts small and doubles each
// time the client filled it, skipping to n once that is less than twice
// as far (which spares one large copy): memory follows the bytes that
// arrived, never more than four times them, not the size announced.
func (c *conn) readBody(br *bufio.Reader, n int) ([]byte, error) {
	buf := c.b.frames.get(min(n, firstChunk))
	got := 0
	for {
		m, err := io.ReadFull(br, buf[got:])
		got += m
		if err != nil {
			c.b.frames.put(buf)
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		size := 2 * len(buf)
		if 2*size > n {
			size = n
		}
		next := c.b.frames.get(size)
		copy(next, buf[:got])
		c.b.frames.put(buf)
		buf = next
	}
}
