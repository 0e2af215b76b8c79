package server

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

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// preAuthMaxFrame is the frame cap before a connection has authenticated
// (Apache Kafka's fix for CVE-2022-34917). It applies once the security
// plugin adds SASL; until then every connection counts as authenticated.
const preAuthMaxFrame = 512 << 10

// RequestContext is what a handler knows about a request beyond its body.
type RequestContext struct {
	ClientID      string
	Version       int16
	CorrelationID int32
	ClientAddr    string
	Principal     string // "User:ANONYMOUS" until authentication exists

	authz Authorizer // nil: no authorizer installed, everything allowed
}

// request is one decoded request waiting for its handler.
type request struct {
	rc    RequestContext
	req   kmsg.Request
	size  int
	start time.Time
	// badVersion is set for an ApiVersions request above our max version:
	// its body is not decoded and the answer is UNSUPPORTED_VERSION (KIP-511).
	badVersion bool
}

// conn is one client connection.
type conn struct {
	b  *Broker
	nc net.Conn
	// authenticated decides the frame cap; the security plugin will
	// clear it for SASL listeners and set it after the handshake.
	authenticated bool
}

func (b *Broker) acceptLoop() {
	var delay time.Duration
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as
			// net/http does, instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			b.log.Warn("accept failed", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if !b.trackConn(nc, true) {
			nc.Close()
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			c := &conn{b: b, nc: nc, authenticated: true}
			c.serve()
		}()
	}
}

// serve reads requests in one goroutine and handles them in order in this
// one: reading the next request overlaps handling the current one, and
// responses go out in request order, as Kafka guarantees.
func (c *conn) serve() {
	b := c.b
	b.m.conns.Inc()
	defer b.m.conns.Dec()
	defer b.trackConn(c.nc, false)
	defer c.nc.Close()

	// ctx ends when the client hangs up or the broker closes, which ends
	// long-polling fetches early.
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	reqs := make(chan *request, 1)
	go func() {
		defer close(reqs)
		defer cancel()
		c.read(reqs)
	}()

	failed := false
	var out []byte
	for r := range reqs {
		if failed {
			continue // drain until the reader sees the closed socket
		}
		resp, err := b.dispatch(ctx, r)
		b.m.observe(r, time.Since(r.start))
		if err != nil {
			b.log.Warn("closing connection after request error", "client", r.rc.ClientAddr, "client_id", r.rc.ClientID,
				"api", apiName(r.req.Key()), "version", r.rc.Version, "err", err)
			c.nc.Close()
			failed = true
			continue
		}
		if resp == nil {
			continue // acks=0 produce: no response at all
		}
		var err2 error
		if v, ok := resp.(vectored); ok {
			out = appendResponseHeader(out[:0], r.rc.CorrelationID, resp)
			bufs := v.appendBuffers(out)
			n := 0
			for _, b := range bufs {
				n += len(b)
			}
			binary.BigEndian.PutUint32(bufs[0], uint32(n-4))
			b.m.bytesOut.Add(n)
			_, err2 = bufs.WriteTo(c.nc)
		} else {
			out = resp.AppendTo(appendResponseHeader(out[:0], r.rc.CorrelationID, resp))
			binary.BigEndian.PutUint32(out, uint32(len(out)-4))
			b.m.bytesOut.Add(len(out))
			_, err2 = c.nc.Write(out)
		}
		if err2 != nil {
			c.nc.Close()
			failed = true
		}
		if cap(out) > 1<<20 {
			out = nil // do not pin a large fetch response's buffer
		}
	}
}

// appendResponseHeader starts a response frame: a size placeholder, the
// correlation id, and the header's tag section for flexible responses
// (except ApiVersions, whose response header is always v0 so that any
// client can read it).
func appendResponseHeader(dst []byte, corr int32, resp kmsg.Response) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if resp.IsFlexible() && resp.Key() != apiKeyApiVersions {
		dst = append(dst, 0)
	}
	return dst
}

// read decodes requests from the connection until it fails, sending them
// to reqs. Any framing or decoding error ends the connection, with a log
// line saying why, and nothing of the bad request is handled.
func (c *conn) read(reqs chan<- *request) {
	br := bufio.NewReaderSize(c.nc, 32<<10)
	remote := c.nc.RemoteAddr().String()
	for {
		r, err := c.readRequest(br, remote)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.b.log.Warn("closing connection", "client", remote, "err", err)
			}
			return
		}
		reqs <- r
	}
}

func (c *conn) maxFrame() int32 {
	if !c.authenticated {
		return preAuthMaxFrame
	}
	return c.b.props.SocketRequestMaxBytes
}

// connIdleTimeout is Kafka's connections.max.idle.ms: a connection that
// sends nothing for this long is closed. It also bounds how long a slow
// client may take to send one frame.
const connIdleTimeout = 10 * time.Minute

func (c *conn) readRequest(br *bufio.Reader, remote string) (*request, error) {
	c.nc.SetReadDeadline(time.Now().Add(connIdleTimeout))
	var sizeBuf [4]byte
	if _, err := io.ReadFull(br, sizeBuf[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("idle for %v", connIdleTimeout)
		}
		return nil, err // EOF between requests is a normal close
	}
	start := time.Now()
	size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
	// Check the size before allocating anything: a 2 GiB prefix must not
	// cost 2 GiB.
	if limit := c.maxFrame(); size <= 0 || size > limit {
		return nil, fmt.Errorf("frame size %d outside (0, %d]", size, limit)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, fmt.Errorf("truncated frame of %d bytes: %w", size, err)
	}
	c.b.m.bytesIn.Add(int(size) + 4)

	rd := kbin.Reader{Src: body}
	key, version, corr := rd.Int16(), rd.Int16(), rd.Int32()
	clientID := rd.NullableString()
	if !rd.Ok() {
		return nil, errors.New("truncated request header")
	}
	r := &request{size: int(size) + 4, start: start, rc: RequestContext{
		Version: version, CorrelationID: corr, ClientAddr: remote, Principal: "User:ANONYMOUS",
	}}
	if clientID != nil {
		r.rc.ClientID = *clientID
	}
	r.req = c.b.apis.newRequest(key)
	vr, _ := c.b.apis.lookup(key)
	if r.req == nil {
		return nil, fmt.Errorf("unsupported api key %d (client id %q)", key, r.rc.ClientID)
	}
	r.req.SetVersion(version)
	if version < vr.MinVersion || version > vr.MaxVersion {
		if key != apiKeyApiVersions {
			return nil, fmt.Errorf("unsupported version %d of %s (client id %q)", version, apiName(key), r.rc.ClientID)
		}
		// KIP-511: answer a too-new ApiVersions with our versions in a
		// v0 body, without decoding a body we do not know.
		r.badVersion = true
		return r, nil
	}
	if r.req.IsFlexible() {
		// Request header v2: tagged fields, none of which we use.
		for n := rd.Uvarint(); n > 0 && rd.Ok(); n-- {
			rd.Uvarint()
			rd.Span(int(rd.Uvarint()))
		}
		if !rd.Ok() {
			return nil, fmt.Errorf("bad tagged fields in %s v%d request header", apiName(key), version)
		}
	}
	if err := r.req.ReadFrom(rd.Src); err != nil {
		return nil, fmt.Errorf("undecodable %s v%d request (client id %q): %w", apiName(key), version, r.rc.ClientID, err)
	}
	return r, nil
}

// dispatch runs the handler of one request. A nil response means none is
// sent; an error closes the connection.
func (b *Broker) dispatch(ctx context.Context, r *request) (kmsg.Response, error) {
	rc := &r.rc
	if r.badVersion {
		return b.apiVersionsUnsupported(), nil
	}
	switch req := r.req.(type) {
	case *kmsg.ApiVersionsRequest:
		return b.handleApiVersions(ctx, rc, req)
	case *kmsg.MetadataRequest:
		return b.handleMetadata(ctx, rc, req)
	case *kmsg.ProduceRequest:
		return b.handleProduce(ctx, rc, req)
	case *kmsg.FetchRequest:
		return b.handleFetch(ctx, rc, req)
	case *kmsg.CreateTopicsRequest:
		return b.handleCreateTopics(ctx, rc, req)
	case *kmsg.DeleteTopicsRequest:
		return b.handleDeleteTopics(ctx, rc, req)
	case *kmsg.CreatePartitionsRequest:
		return b.handleCreatePartitions(ctx, rc, req)
	case *kmsg.DescribeConfigsRequest:
		return b.handleDescribeConfigs(ctx, rc, req)
	case *kmsg.AlterConfigsRequest:
		return b.handleAlterConfigs(ctx, rc, req)
	case *kmsg.IncrementalAlterConfigsRequest:
		return b.handleIncrementalAlterConfigs(ctx, rc, req)
	case *kmsg.ListOffsetsRequest:
		return b.handleListOffsets(ctx, rc, req)
	case *kmsg.OffsetForLeaderEpochRequest:
		return b.handleOffsetForLeaderEpoch(ctx, rc, req)
	case *kmsg.DeleteRecordsRequest:
		return b.handleDeleteRecords(ctx, rc, req)
	case *kmsg.InitProducerIDRequest:
		return b.handleInitProducerID(ctx, rc, req)
	case *kmsg.DescribeProducersRequest:
		return b.handleDescribeProducers(ctx, rc, req)
	case *kmsg.DescribeClusterRequest:
		return b.handleDescribeCluster(ctx, rc, req)
	}
	if h := b.apis.plugins[r.req.Key()]; h != nil {
		return h.HandleRequest(ctx, rc, r.req)
	}
	// newRequest only admits the keys above, so this is a bug, not input.
	return nil, fmt.Errorf("no handler for api key %d", r.req.Key())
}
