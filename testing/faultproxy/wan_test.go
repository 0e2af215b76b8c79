package faultproxy

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// arrival is how many bytes a sink had read, and when.
type arrival struct {
	at    time.Time
	total int
}

// sink accepts one connection and records what it reads and when.
type sink struct {
	ln       net.Listener
	mu       sync.Mutex
	got      []byte
	arrivals []arrival
	done     chan struct{}
}

func newSink(t *testing.T) *sink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 4096)
		for {
			n, err := c.Read(b)
			if n > 0 {
				s.mu.Lock()
				s.got = append(s.got, b[:n]...)
				s.arrivals = append(s.arrivals, arrival{time.Now(), len(s.got)})
				s.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

// TestWANWindow sends more than a window's worth through a WAN proxy and
// checks, with the times the test measures itself, the model: nothing
// arrives before RTT/2, and by any time t at most
// window × (1 + ⌊(t − start − RTT/2) / RTT⌋) bytes have arrived, since a
// byte's window comes back one RTT after it was read at the earliest.
// Every byte arrives, in order. It asserts no upper bound on time.
func TestWANWindow(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	const rtt, window, size = 100 * time.Millisecond, 64 << 10, 320 << 10
	p, err := ListenWAN(s.ln.Addr().String(), rtt, window)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i>>9)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the sink did not see the end of the stream in 30s")
	}
	if !bytes.Equal(s.got, want) {
		t.Fatalf("the sink got %d bytes, not the %d sent in order", len(s.got), len(want))
	}
	for _, a := range s.arrivals {
		since := a.at.Sub(start)
		if since < rtt/2 {
			t.Fatalf("%d bytes arrived %v after the send, before RTT/2", a.total, since)
		}
		if allowed := window * (1 + int((since-rtt/2)/rtt)); a.total > allowed {
			t.Fatalf("%d bytes arrived %v after the send: more than the window allows (%d)", a.total, since, allowed)
		}
	}
	if last := s.arrivals[len(s.arrivals)-1].at.Sub(start); last < rtt/2+(size/window-1)*rtt {
		t.Fatalf("%d bytes through a %d-byte window at %v RTT in %v", size, window, rtt, last)
	}
	if got := p.Forwarded(); got[0] != size || got[1] != 0 {
		t.Fatalf("forwarded %v, want [%d 0]", got, size)
	}
}

// TestWANRoundTrip: a request and its answer through a WAN proxy take at
// least the round trip, both ways arrive intact, and a cut link refuses
// connections until it is up again.
func TestWANRoundTrip(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	const rtt = 80 * time.Millisecond
	p, err := ListenWAN(ln.Addr().String(), rtt, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func() (time.Duration, error) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			return 0, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		msg := []byte("a request that comes back")
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			return 0, err
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return 0, err
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("echo %q, sent %q", got, msg)
		}
		return time.Since(start), nil
	}
	d, err := echo()
	if err != nil {
		t.Fatal(err)
	}
	if d < rtt {
		t.Fatalf("echo in %v, under the round trip %v", d, rtt)
	}
	p.Down()
	if _, err := echo(); err == nil {
		t.Fatal("an echo crossed a link that is down")
	}
	p.Up()
	if _, err := echo(); err != nil {
		t.Fatalf("after Up: %v", err)
	}
}
