package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/fakeclock"
)

// testLogger logs warnings and errors only, so that test output stays short.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startBroker starts a broker on 127.0.0.1:0 in a temporary directory and
// closes it when the test ends.
func startBroker(t testing.TB, props map[string]string) *Broker {
	t.Helper()
	return startBrokerWith(t, Config{Props: props})
}

// startBrokerWith is startBroker with more of the Config set by the test.
func startBrokerWith(t testing.TB, cfg Config) *Broker {
	t.Helper()
	return startBrokerAt(t, nil, cfg)
}

// startBrokerAt is startBrokerWith with the broker's clock set to clk
// (nil: the wall clock) before it starts, so that no connection reads the
// clock before the test's one is in place.
func startBrokerAt(t testing.TB, clk *fakeclock.Clock, cfg Config) *Broker {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if clk != nil {
		b.networkCfg.Now = clk.Now
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// rawRequest sends req on a fresh connection (at req's version, which must
// be set) and returns the decoded response. It fails the test on any error.
func rawRequest(t testing.TB, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	resp, err := roundTrip(c, req, 1)
	if err != nil {
		t.Fatalf("request key %d v%d: %v", req.Key(), req.GetVersion(), err)
	}
	return resp
}

// roundTrip writes req with correlation id corr on c and reads its response.
func roundTrip(c net.Conn, req kmsg.Request, corr int32) (kmsg.Response, error) {
	if err := writeRequest(c, req, corr, "test-client"); err != nil {
		return nil, err
	}
	return readResponse(c, req, corr)
}

// writeRequest frames and writes one request with a v1/v2 request header.
func writeRequest(c net.Conn, req kmsg.Request, corr int32, clientID string) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4, 64)
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(corr))
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(clientID)))
	buf = append(buf, clientID...)
	if req.IsFlexible() {
		buf = append(buf, 0) // no header tags
	}
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	_, err := c.Write(buf)
	return err
}

// readResponse reads one framed response to req and decodes it.
func readResponse(c net.Conn, req kmsg.Request, corr int32) (kmsg.Response, error) {
	body, err := readFrame(c)
	if err != nil {
		return nil, err
	}
	if len(body) < 4 {
		return nil, io.ErrUnexpectedEOF
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		return nil, &corrErr{got, corr}
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		body = body[1:] // empty header tag section
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, err
	}
	return resp, nil
}

func readFrame(c net.Conn) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c, body)
	return body, err
}

type corrErr struct{ got, want int32 }

func (e *corrErr) Error() string {
	return fmt.Sprintf("correlation id mismatch: got %d want %d", e.got, e.want)
}

// newClient returns a franz-go client for b, closed when the test ends.
func newClient(t testing.TB, b *Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr())}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}
