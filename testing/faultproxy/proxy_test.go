package faultproxy

import (
	"bufio"
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
