package faultproxy

import (
	"net"
	"sync"
	"time"
)

// relay is what Proxy and WAN share: the listener, the connections it
// has open (both ends of each), and the target new connections go to.
// The owner decides when to refuse a connection and how to copy bytes.
type relay struct {
	ln net.Listener

	// mu guards the fields below and the owner's own state (refuse
	// reads it).
	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	// refuse reports, with mu held, whether the link refuses (closes) a
	// new connection now; pipe copies src to dst in direction dir (0
	// towards the target, 1 back) until either end fails, closing both.
	refuse func() bool
	pipe   func(dst, src net.Conn, dir int)
}

// listen starts p on a free 127.0.0.1 port forwarding to target.
func (p *relay) listen(target string, refuse func() bool, pipe func(dst, src net.Conn, dir int)) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	p.ln, p.target, p.conns, p.refuse, p.pipe = ln, target, map[net.Conn]struct{}{}, refuse, pipe
	p.wg.Add(1)
	go p.accept()
	return nil
}

// Addr is the proxy's address.
func (p *relay) Addr() string { return p.ln.Addr().String() }

// SetTarget changes where new connections go (a broker that advertises
// the proxy's address may be started after the proxy).
func (p *relay) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// closeConns closes every connection; p.mu must be held.
func (p *relay) closeConns() {
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes its connections.
func (p *relay) Close() error {
	p.mu.Lock()
	p.closed = true
	p.closeConns()
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// track registers c, or reports false if the proxy refuses it now.
func (p *relay) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !add {
		delete(p.conns, c)
		return true
	}
	if p.closed || p.refuse() {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *relay) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

func (p *relay) serve(c net.Conn) {
	defer c.Close()
	if !p.track(c, true) {
		return
	}
	defer p.track(c, false)
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	if !p.track(up, true) {
		return
	}
	defer p.track(up, false)
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, c, 0); done <- struct{}{} }()
	go func() { p.pipe(c, up, 1); done <- struct{}{} }()
	<-done
	<-done
}
