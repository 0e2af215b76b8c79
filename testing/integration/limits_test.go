package integration

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// flood opens n connections to addr; each announces a frame of size bytes
// and then sends body bytes of it, or the whole frame when body is
// negative. It returns once every write finished or timed out; the
// connections stay open until the caller closes them.
func flood(t *testing.T, addr string, n int, size uint32, body int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = nc
		t.Cleanup(func() { nc.Close() })
		wg.Go(func() {
			// An API key nobody serves: the broker reads the frame,
			// then refuses it.
			frame := binary.BigEndian.AppendUint32(nil, size)
			frame = kbin.AppendInt16(kbin.AppendInt16(frame, 9999), 0)
			if body < 0 {
				body = int(size)
			}
			frame = append(frame, make([]byte, body-4)...)
			nc.SetWriteDeadline(time.Now().Add(20 * time.Second))
			nc.Write(frame) // blocks while the broker does not read; errors are expected
		})
	}
	wg.Wait()
	return conns
}

// startProbed starts the binary with a topic "probe" that checkHealthy
// writes and reads, and returns it with its resident memory once warm.
func startProbed(t *testing.T) (*tandemtest.Proc, int64) {
	t.Helper()
	p := tandemtest.StartProcess(t, t.TempDir())
	tandemtest.CreateTopic(t, p.Addr, "probe", 1)
	checkHealthy(t, p.Addr, "probe")
	rss, _, err := p.Mem()
	if err != nil {
		t.Fatal(err)
	}
	return p, rss
}

// TestConnectionFlood: 200 connections each announcing a 100 MB request,
// sending 1 MiB of it and stalling keep the broker's resident memory
// (VmHWM of /proc/PID/status, the peak) under 256 MiB, while another client
// produces and consumes as usual.
func TestConnectionFlood(t *testing.T) {
	p, rss0 := startProbed(t)
	conns := flood(t, p.Addr, 200, 100_000_000, 1<<20)
	checkHealthy(t, p.Addr, "probe")
	rss, peak, err := p.Mem()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RSS before %d MiB; with 200 connections announcing 100 MB each: RSS %d MiB, peak %d MiB", rss0>>20, rss>>20, peak>>20)
	if peak > 256<<20 {
		t.Fatalf("peak RSS %d MiB under the flood, want under 256 MiB", peak>>20)
	}
	for _, c := range conns {
		c.Close()
	}
	checkHealthy(t, p.Addr, "probe")
}

// TestMemoryReturned: after large requests (here 8 of 40 MB each, read in
// full) the broker hands the memory they took back to the operating
// system once they are gone, instead of keeping it for minutes.
func TestMemoryReturned(t *testing.T) {
	p, rss0 := startProbed(t)
	for _, c := range flood(t, p.Addr, 8, 40<<20, -1) {
		c.Close()
	}
	_, peak, err := p.Mem()
	if err != nil {
		t.Fatal(err)
	}
	var rss int64
	wait.Until(t, 30*time.Second, func() error {
		if rss, _, err = p.Mem(); err != nil {
			t.Fatal(err)
		}
		if rss >= rss0+64<<20 {
			return fmt.Errorf("RSS %d MiB after the large requests went, %d MiB before (peak %d MiB)", rss>>20, rss0>>20, peak>>20)
		}
		return nil
	})
	t.Logf("RSS before %d MiB, peak %d MiB, after %d MiB", rss0>>20, peak>>20, rss>>20)
	checkHealthy(t, p.Addr, "probe")
}
