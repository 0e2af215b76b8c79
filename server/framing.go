package server

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Reading a request costs memory in proportion to what the client really
// sent, and all requests being read or waiting for their handler share one
// budget:
//
//   - the 4-byte size is checked against the frame cap before anything
//     else (512 KiB before SASL authentication, socket.request.max.bytes
//     after);
//   - the frame's size is then reserved in the broker's budget
//     (queued.max.request.bytes); while the budget is full the reader
//     waits without reading, so the client's TCP window closes;
//   - the body is read into a buffer that grows as bytes arrive, so that a
//     client announcing 100 MB and sending nothing costs one small buffer;
//   - the whole frame must arrive within tandem.request.read.timeout.ms of
//     its size, or the connection is closed: a client trickling bytes
//     cannot keep its reservation forever.
//
// The reservation is released when the request's handler returns.

// firstChunk is the buffer a frame's body starts in; it doubles each time
// the client filled it.
const firstChunk = 256 << 10

// readFrame reads one size-prefixed frame of at least minSize bytes and
// returns it with the bytes it reserved in the broker's budget, which the
// caller releases. The wait for the size is the idle timeout; io.EOF there
// is a normal close.
func (c *conn) readFrame(br *bufio.Reader, minSize int32) (body []byte, reserved int64, err error) {
	c.nc.SetReadDeadline(time.Now().Add(connIdleTimeout))
	var sizeBuf [4]byte
	if _, err := io.ReadFull(br, sizeBuf[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, 0, fmt.Errorf("idle for %v", connIdleTimeout)
		}
		return nil, 0, err
	}
	size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
	// Check the size before anything else: a 2 GiB prefix must not
	// cost 2 GiB.
	if limit := c.maxFrame(); size < minSize || size > limit {
		return nil, 0, fmt.Errorf("frame size %d outside [%d, %d]", size, minSize, limit)
	}
	if reserved, err = c.b.reqBytes.Acquire(c.b.ctx, int64(size)); err != nil {
		return nil, 0, err
	}
	c.nc.SetReadDeadline(time.Now().Add(c.b.props.RequestReadTimeout))
	if body, err = c.readBody(br, int(size)); err != nil {
		c.b.reqBytes.Release(reserved)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, 0, fmt.Errorf("frame of %d bytes not received within %v (tandem.request.read.timeout.ms)", size, c.b.props.RequestReadTimeout)
		}
		return nil, 0, fmt.Errorf("truncated frame of %d bytes: %w", size, err)
	}
	c.b.m.bytesIn.Add(int(size) + 4)
	return body, reserved, nil
}

// readBody reads n bytes into a buffer that starts small and doubles each
// time the client filled it, skipping to n once that is less than twice
// as far (which spares one large copy): memory follows the bytes that
// arrived, never more than four times them, not the size announced.
func (c *conn) readBody(br *bufio.Reader, n int) ([]byte, error) {
	buf := c.b.frames.Get(min(n, firstChunk))
	got := 0
	for {
		m, err := io.ReadFull(br, buf[got:])
		got += m
		if err != nil {
			c.b.frames.Put(buf)
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		size := 2 * len(buf)
		if 2*size > n {
			size = n
		}
		next := c.b.frames.Get(size)
		copy(next, buf[:got])
		c.b.frames.Put(buf)
		buf = next
	}
}
