package server

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// queued is the broker's tandem_server_queued_request_bytes gauge.
func queued(b *Broker) int64 { return b.reqBytes.inUse() }

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func dial(t *testing.T, b *Broker) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", b.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expectClosed reads until the broker closes c, failing if it answers or
// keeps the connection open.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: want the connection closed, read %d bytes, err %v", what, n, err)
	}
}

// TestQueuedRequestBytes: with queued.max.request.bytes full, a reader
// waits instead of reading: a stalled 900 KB frame holds its reservation,
// a second large request is not read until the first connection goes,
// and small requests still pass.
func TestQueuedRequestBytes(t *testing.T) {
	b := startBroker(t, map[string]string{"queued.max.request.bytes": "1048576"})
	stalled := dial(t, b)
	if _, err := stalled.Write(append(binary.BigEndian.AppendUint32(nil, 900_000), make([]byte, 100_000)...)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled frame's reservation", func() bool { return queued(b) == 900_000 })

	// A valid Metadata request of about 800 KB.
	big := kmsg.NewPtrMetadataRequest()
	big.Version = 12
	for len(big.Topics) < 4000 {
		big.Topics = append(big.Topics, kmsg.MetadataRequestTopic{Topic: kmsg.StringPtr(strings.Repeat("x", 200))})
	}
	waiting := dial(t, b)
	if err := writeRequest(waiting, big, 7, "big"); err != nil {
		t.Fatal(err)
	}
	// Small requests fit beside the stalled frame.
	for range 3 {
		if resp := rawRequest(t, b.Addr(), &kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
			t.Fatalf("ApiVersions beside a full budget: %d", resp.ErrorCode)
		}
	}
	if got := queued(b); got != 900_000 {
		t.Fatalf("%d bytes reserved while the budget is full; the big request must wait unread", got)
	}
	waiting.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, err := waiting.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the waiting request was answered (%d bytes, %v) while the budget was full", n, err)
	}
	stalled.Close()
	resp, err := readResponse(waiting, big, 7)
	if err != nil {
		t.Fatalf("the waiting request once the stalled connection went: %v", err)
	}
	if topics := resp.(*kmsg.MetadataResponse).Topics; len(topics) != 1 && len(topics) != 4000 {
		t.Fatalf("metadata answered %d topics", len(topics))
	}
	waitFor(t, "every reservation released", func() bool { return queued(b) == 0 })
}

// TestFrameReadTimeout: a client trickling a frame byte by byte is closed
// once tandem.request.read.timeout.ms passed since its size, and its
// reservation is released.
func TestFrameReadTimeout(t *testing.T) {
	b := startBroker(t, map[string]string{"tandem.request.read.timeout.ms": "300"})
	c := dial(t, b)
	if _, err := c.Write(binary.BigEndian.AppendUint32(nil, 1000)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for range 400 { // 20 s of one byte every 50 ms
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := c.Write([]byte{0}); err != nil {
				return
			}
		}
	}()
	expectClosed(t, c, "a trickling client")
	waitFor(t, "the reservation released", func() bool { return queued(b) == 0 })
	if resp := rawRequest(t, b.Addr(), &kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions after: %d", resp.ErrorCode)
	}
}
