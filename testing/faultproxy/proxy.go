// Package faultproxy is a TCP proxy on 127.0.0.1 that tests put between a
// client and a server to inject network faults: cut every connection and
// refuse new ones for a while, as a partition between two clusters would,
// or make the link slow (latency, bandwidth).
package faultproxy

import (
	"net"
	"time"
)

// Proxy forwards connections from its address to a target.
type Proxy struct {
	relay // mu also guards the fields below

	down time.Time // refuse (close) connections until then

	// The link's shape (SetLink): each direction delays what it
	// forwards by latency and shares rate bytes/s among the proxy's
	// connections; next is when each direction's link is free again.
	latency time.Duration
	rate    int64
	next    [2]time.Time
}

// Listen starts a proxy on a free 127.0.0.1 port forwarding to target
// (which may be set later with SetTarget).
func Listen(target string) (*Proxy, error) {
	p := &Proxy{}
	if err := p.listen(target, func() bool { return time.Now().Before(p.down) }, p.pipe); err != nil {
		return nil, err
	}
	return p, nil
}

// Cut closes every connection and refuses new ones for d.
func (p *Proxy) Cut(d time.Duration) {
	p.mu.Lock()
	p.down = time.Now().Add(d)
	p.closeConns()
	p.mu.Unlock()
}

// SetLink shapes what the proxy forwards from now on: each byte arrives
// latency after it was read, and each direction carries at most
// bytesPerSec bytes a second over all the proxy's connections (0: no
// limit). SetLink(0, 0) is a normal link again.
func (p *Proxy) SetLink(latency time.Duration, bytesPerSec int64) {
	p.mu.Lock()
	p.latency, p.rate = latency, bytesPerSec
	p.mu.Unlock()
}

// shape returns when n bytes read now in direction dir may be written:
// after the latency and once the direction's bandwidth has carried them.
func (p *Proxy) shape(dir, n int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := time.Now().Add(p.latency)
	if p.rate > 0 {
		start := at
		if p.next[dir].After(start) {
			start = p.next[dir]
		}
		p.next[dir] = start.Add(time.Duration(int64(n) * int64(time.Second) / p.rate))
		at = p.next[dir]
	}
	return at
}

// chunk is what one read got, and when it may be written.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst in direction dir, shaped by SetLink: a reader
// stamps each chunk with its delivery time, a writer sleeps until then.
// At most 64 chunks of 16 KiB are in flight, so a slow link holds at most
// 1 MiB per direction (the reader then waits, as a full TCP window does).
func (p *Proxy) pipe(dst, src net.Conn, dir int) {
	defer dst.Close()
	defer src.Close()
	q := make(chan chunk, 64)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 16<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b[:n], p.shape(dir, n)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.b); err != nil {
			src.Close() // ends the reader, which closes q
			for range q {
			}
			return
		}
	}
}
