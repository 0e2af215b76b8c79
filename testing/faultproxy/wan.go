package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// WAN is a proxy that behaves as a long link between two data centres,
// as TCP over it would: each direction delays every byte by half the
// round trip, and each connection may have at most a window of bytes in
// flight per direction, a byte's share of the window coming back only
// when it has been delivered and the acknowledgement has travelled the
// return half of the round trip. One connection therefore carries at most
// window/RTT bytes a second in each direction, and a client that wants
// more must open more connections or ask for more per round trip.
//
// Proxy.SetLink is not such a link: its reader holds at most 1 MiB per
// direction and frees it when the byte is written, so at 100 ms it caps a
// connection near 20 MB/s whatever window the endpoints would negotiate.
type WAN struct {
	relay  // mu also guards down
	down   bool
	window int64
	rtt    atomic.Int64 // time.Duration
	fwd    [2]atomic.Int64
}

// wanReadSize is the most a WAN reads at once; wanMaxReads bounds the
// reads in flight per direction (at 16 KiB each, 4096 of them fill a
// 64 MiB window, more than Linux autotunes to by default).
const (
	wanReadSize = 64 << 10
	wanMaxReads = 4096
)

// ListenWAN starts a WAN proxy on a free 127.0.0.1 port forwarding to
// target, with the given round trip and window in bytes (per connection
// and direction; Linux autotunes a receive window up to the third field
// of net.ipv4.tcp_rmem).
func ListenWAN(target string, rtt time.Duration, window int64) (*WAN, error) {
	p := &WAN{window: max(window, 1)}
	p.rtt.Store(int64(rtt))
	if err := p.listen(target, func() bool { return p.down }, p.pipe); err != nil {
		return nil, err
	}
	return p, nil
}

// SetRTT changes the round trip for the bytes read from now on.
func (p *WAN) SetRTT(rtt time.Duration) { p.rtt.Store(int64(rtt)) }

// Forwarded returns the bytes delivered so far towards the target
// ([0]) and back from it ([1]), over all connections.
func (p *WAN) Forwarded() [2]int64 { return [2]int64{p.fwd[0].Load(), p.fwd[1].Load()} }

// Down cuts the link: it closes every connection and refuses new ones
// (accepts and closes them at once) until Up.
func (p *WAN) Down() {
	p.mu.Lock()
	p.down = true
	p.closeConns()
	p.mu.Unlock()
}

// Up restores the link after Down.
func (p *WAN) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// pipe copies src to dst as one direction of the link: a reader takes
// window for each read and stamps it with its delivery time (now + RTT/2);
// a writer writes it then; an acknowledger gives the window back RTT/2
// after the write, when the sender would hear of it.
func (p *WAN) pipe(dst, src net.Conn, dir int) {
	defer dst.Close()
	defer src.Close()
	win := newWindow(p.window)
	q := make(chan chunk, wanMaxReads)
	acks := make(chan chunk, wanMaxReads)
	go func() {
		defer close(q)
		// One buffer for the reads, a copy of the size read for the queue:
		// requests are small and frequent, answers large.
		buf := make([]byte, min(wanReadSize, p.window))
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if !win.acquire(int64(n)) {
					return
				}
				q <- chunk{bytes.Clone(buf[:n]), time.Now().Add(time.Duration(p.rtt.Load()) / 2)}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		for a := range acks {
			sleepUntil(a.at)
			win.release(int64(len(a.b)))
		}
	}()
	defer close(acks)
	for c := range q {
		sleepUntil(c.at)
		if _, err := dst.Write(c.b); err != nil {
			src.Close() // ends the reader, which closes q
			win.close()
			for range q {
			}
			return
		}
		p.fwd[dir].Add(int64(len(c.b)))
		acks <- chunk{c.b, time.Now().Add(time.Duration(p.rtt.Load()) / 2)}
	}
	win.close()
}

func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// window counts a direction's bytes in flight against its size.
type window struct {
	mu       sync.Mutex
	cond     sync.Cond
	size     int64
	inFlight int64
	closed   bool
}

func newWindow(size int64) *window {
	w := &window{size: size}
	w.cond.L = &w.mu
	return w
}

// acquire waits until n more bytes fit (a read larger than the whole
// window goes alone) and reports false if the window was closed.
func (w *window) acquire(n int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.closed && w.inFlight > 0 && w.inFlight+n > w.size {
		w.cond.Wait()
	}
	w.inFlight += n
	return !w.closed
}

func (w *window) release(n int64) {
	w.mu.Lock()
	w.inFlight -= n
	w.mu.Unlock()
	w.cond.Broadcast()
}

func (w *window) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cond.Broadcast()
}
