package tandemtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Conn is a raw Kafka protocol connection, for tests that must control the
// bytes on the wire.
type Conn struct {
	net.Conn
	corr int32
	f    *kmsg.RequestFormatter
}

// Dial connects to addr and closes the connection at the end of the test.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := DialErr(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// DialErr connects to addr.
func DialErr(addr string) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &Conn{Conn: nc, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("tandemtest"))}, nil
}

// Request sends req at its version (req.SetVersion) and reads the response.
func (c *Conn) Request(req kmsg.Request) (kmsg.Response, error) {
	c.corr++
	c.SetDeadline(time.Now().Add(15 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(c.f.AppendRequest(nil, req, c.corr)); err != nil {
		return nil, fmt.Errorf("writing %T: %w", req, err)
	}
	body, err := c.ReadFrame()
	if err != nil {
		return nil, fmt.Errorf("reading response to %T: %w", req, err)
	}
	if len(body) < 4 {
		return nil, fmt.Errorf("response of %d bytes", len(body))
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != c.corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, c.corr)
	}
	body = body[4:]
	// Flexible responses have a tagged-field section in their header, except
	// ApiVersions, whose response header is always v0.
	if req.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		r := kbin.Reader{Src: body}
		for n := r.Uvarint(); n > 0; n-- {
			r.Uvarint()
			r.Span(int(r.Uvarint()))
		}
		if !r.Ok() {
			return nil, fmt.Errorf("bad tagged fields in the response header")
		}
		body = r.Src
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decoding %T v%d: %w", resp, req.GetVersion(), err)
	}
	return resp, nil
}

// Produce sends records (one or more batches) to partition 0 of topic
// with acks=all (Produce v7) and returns the partition's answer.
func (c *Conn) Produce(topic string, records []byte) (kmsg.ProduceResponseTopicPartition, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := c.Request(req)
	if err != nil {
		return kmsg.ProduceResponseTopicPartition{}, err
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0], nil
}

// ReadFrame reads one size-prefixed frame and returns what follows the size.
func (c *Conn) ReadFrame() ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > 256<<20 {
		return nil, fmt.Errorf("response frame size %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return nil, err
	}
	return body, nil
}

// Frame builds a request frame by hand: size, header v1 (or v2 if flexible)
// with client ID "tandemtest", and body. Use it for requests kmsg would not
// build: unknown keys, versions above the maximum, bodies that do not decode.
func Frame(key, version int16, correlationID int32, flexible bool, body []byte) []byte {
	b := []byte{0, 0, 0, 0}
	b = kbin.AppendInt16(b, key)
	b = kbin.AppendInt16(b, version)
	b = kbin.AppendInt32(b, correlationID)
	b = kbin.AppendString(b, "tandemtest")
	if flexible {
		b = append(b, 0)
	}
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// ExpectClosed waits up to timeout for the peer to close the connection.
// It fails if data arrives or the connection stays open.
func (c *Conn) ExpectClosed(timeout time.Duration) error {
	c.SetReadDeadline(time.Now().Add(timeout))
	var buf [512]byte
	n, err := c.Read(buf[:])
	switch {
	case n > 0:
		return fmt.Errorf("got %d bytes (% x...) instead of a closed connection", n, buf[:min(n, 16)])
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("connection still open after %v", timeout)
	default:
		return fmt.Errorf("read: %w", err)
	}
}
