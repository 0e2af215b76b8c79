package faultproxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

func TestProxyForwardsAndCuts(t *testing.T) {
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
			go func() { defer c.Close(); l, _ := bufio.NewReader(c).ReadString('\n'); c.Write([]byte(l)) }()
		}
	}()
	p, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func() (string, error) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("hi\n"))
		return bufio.NewReader(c).ReadString('\n')
	}
	if got, err := echo(); got != "hi\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Cut(500 * time.Millisecond)
	if got, _ := echo(); got != "" {
		t.Fatalf("during a cut: %q", got)
	}
	time.Sleep(600 * time.Millisecond)
	if got, err := echo(); got != "hi\n" {
		t.Fatalf("after the cut: %q, %v", got, err)
	}
}

// TestProxySlowLink: a shaped link delivers every byte, in order, no
// sooner than the latency and the bandwidth allow.
func TestProxySlowLink(t *testing.T) {
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
	p, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const size, rate, latency = 200 << 10, 400 << 10, 100 * time.Millisecond
	p.SetLink(latency, rate)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i * 7)
	}
	start := time.Now()
	go c.Write(want)
	got := make([]byte, size)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the echo differs from what was sent")
	}
	// There and back: twice the latency, and the bytes through each
	// direction at the rate (the two directions overlap).
	if min := 2*latency + time.Duration(size)*time.Second/rate; time.Since(start) < min {
		t.Fatalf("echoed %d bytes in %v, faster than the link allows (%v)", size, time.Since(start), min)
	}
}
