package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
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

// FrameReader reads request frames off connections, one broker's settings
// for all of them.
type FrameReader struct {
	Budget      *Budget       // queued.max.request.bytes
	Pool        *FramePool    // the bodies' buffers
	Idle        time.Duration // connections.max.idle.ms: the wait for a frame's size
	ReadTimeout time.Duration // tandem.request.read.timeout.ms: the wait for its body
}

// Read reads one size-prefixed frame of minSize to maxSize bytes from br
// (over nc, whose read deadlines it sets) and returns it with the bytes
// it reserved in the budget, which the caller releases. The wait for the
// size is the idle timeout; io.EOF there is a normal close. ctx ends a
// wait for the budget.
func (fr *FrameReader) Read(ctx context.Context, nc net.Conn, br *bufio.Reader, minSize, maxSize int32) (body []byte, reserved int64, err error) {
	nc.SetReadDeadline(time.Now().Add(fr.Idle))
	var sizeBuf [4]byte
	if _, err := io.ReadFull(br, sizeBuf[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, 0, fmt.Errorf("idle for %v", fr.Idle)
		}
		return nil, 0, err
	}
	size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
	// Check the size before anything else: a 2 GiB prefix must not
	// cost 2 GiB.
	if size < minSize || size > maxSize {
		return nil, 0, fmt.Errorf("frame size %d outside [%d, %d]", size, minSize, maxSize)
	}
	if reserved, err = fr.Budget.Acquire(ctx, int64(size)); err != nil {
		return nil, 0, err
	}
	nc.SetReadDeadline(time.Now().Add(fr.ReadTimeout))
	if body, err = fr.readBody(br, int(size)); err != nil {
		fr.Budget.Release(reserved)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, 0, fmt.Errorf("frame of %d bytes not received within %v (tandem.request.read.timeout.ms)", size, fr.ReadTimeout)
		}
		return nil, 0, fmt.Errorf("truncated frame of %d bytes: %w", size, err)
	}
	return body, reserved, nil
}

// readBody reads n bytes into a buffer that starts small and doubles each
// time the client filled it, skipping to n once that is less than twice
// as far (which spares one large copy): memory follows the bytes that
// arrived, never more than four times them, not the size announced.
func (fr *FrameReader) readBody(br *bufio.Reader, n int) ([]byte, error) {
	buf := fr.Pool.Get(min(n, firstChunk))
	got := 0
	for {
		m, err := io.ReadFull(br, buf[got:])
		got += m
		if err != nil {
			fr.Pool.Put(buf)
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		size := 2 * len(buf)
		if 2*size > n {
			size = n
		}
		next := fr.Pool.Get(size)
		copy(next, buf[:got])
		fr.Pool.Put(buf)
		buf = next
	}
}
