package fetch

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStoppedReadEnds: a read whose context ends at any moment around
// its start (before it, while it sets its own deadline) returns at once,
// although the request timeout is an hour and the broker never answers.
// A fetcher stopped while its Fetch waits at the source depends on it
// (TestStopWhileWaiting failed in CI when the read's deadline of an hour
// was set after the stop's deadline of now).
func TestStoppedReadEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close() // held open, never answered
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &conn{nc: nc, br: bufio.NewReader(nc), timeout: time.Hour}
	for i := range 2000 {
		ctx, cancel := context.WithCancel(context.Background())
		if i%2 == 0 {
			cancel() // before the read starts
		} else {
			go cancel() // while it starts
		}
		c.sent = []int32{1}
		done := make(chan error, 1)
		go func() {
			done <- c.recv(ctx, kmsg.NewPtrFetchResponse(), new([]byte), func(n int) (int, error) { return n, nil })
		}()
		select {
		case err := <-done:
			if err != context.Canceled {
				t.Fatalf("read %d: %v, want %v", i, err, context.Canceled)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("read %d: no return 5 s after its context ended", i)
		}
		cancel()
	}
}
