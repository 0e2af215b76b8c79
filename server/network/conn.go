package network

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/wire"
)

// preAuthMaxFrame is the frame cap before a connection has authenticated
// on a SASL listener (Apache Kafka's fix for CVE-2022-34917).
const preAuthMaxFrame = 512 << 10

// request is one decoded request waiting for its handler.
type request struct {
	rc    plugin.RequestContext
	req   kmsg.Request
	size  int
	start time.Time
	// badVersion is set for an ApiVersions request above our max version:
	// its body is not decoded and the answer is UNSUPPORTED_VERSION (KIP-511).
	badVersion bool
	// raw: a bare SASL token after SaslHandshake v0, in req as a
	// SaslAuthenticate v0 request.
	raw bool
	// frame is the buffer the request was decoded from (and aliases).
	frame []byte
	// reserved is what reading it took of queued.max.request.bytes,
	// released once its handler returned.
	reserved int64
	// done, when set, is closed once the request is answered: before
	// authentication the reader waits for it, so that the frame cap and
	// the SASL state of the next request are those after this one.
	done chan struct{}
}

// conn is one client connection.
type conn struct {
	s  *Server
	nc net.Conn
	l  *Listener
	// authenticated decides the frame cap and which requests are
	// served: false on SASL listeners until SaslAuthenticate succeeds.
	authenticated atomic.Bool
	// muteUntil (unix nanos) delays reading the next request of a
	// throttled client (KIP-219).
	muteUntil atomic.Int64
	// rawSASL: after a SaslHandshake v0 the client sends bare SASL tokens
	// in size-prefixed frames, without Kafka headers, until done.
	rawSASL atomic.Bool

	// Owned by the serve goroutine.
	sasl       saslState
	principal  string
	closeAfter bool // close once the current response is written
}

// serve reads requests in one goroutine and handles them in order in this
// one: reading the next request overlaps handling the current one, and
// responses go out in request order, as Kafka guarantees.
func (c *conn) serve() {
	s := c.s
	s.m.Conns.Inc()
	defer s.m.Conns.Dec()
	defer s.trackConn(c.nc, false)
	defer c.nc.Close()

	// ctx ends when the client hangs up or the broker closes, which ends
	// long-polling fetches early.
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	if tc, ok := c.nc.(*tls.Conn); ok {
		tc.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
		if err := tc.HandshakeContext(ctx); err != nil {
			s.log.Info("TLS handshake failed", "client", c.nc.RemoteAddr(), "listener", c.l.Name, "err", err)
			return
		}
		tc.SetDeadline(time.Time{})
		c.principal = tlsPrincipal(tc.ConnectionState())
	}
	reqs := make(chan *request, 1)
	go func() {
		defer close(reqs)
		defer cancel()
		c.read(reqs)
	}()

	// Produce requests may be handled while earlier ones of the
	// connection wait for their fsync (their syncs are then grouped):
	// their responses go to a writer that sends each once it is durable,
	// in order. Any other request waits until the writer is idle, so that
	// it is handled after the produces before it, as in Kafka.
	var failed atomic.Bool // the connection is closed
	var inflight sync.WaitGroup
	answers := make(chan *answer, maxPendingProduces)
	go func() {
		var out []byte
		for a := range answers {
			<-a.ready
			if !failed.Load() {
				var f bool
				out, f = c.respond(ctx, a.r, a.resp, nil, out)
				if f {
					failed.Store(true)
				}
			}
			inflight.Done()
		}
	}()
	defer inflight.Wait()
	defer close(answers)
	var out []byte
	for r := range reqs {
		if !failed.Load() { // else drain until the reader sees the closed socket
			pipe := c.pipelines(r)
			if !pipe {
				inflight.Wait()
			}
			resp, f, err := c.handle(ctx, r)
			c.handled(r)
			if p, ok := resp.(*PendingResponse); ok && err == nil && !f {
				if pipe {
					inflight.Add(1)
					answers <- &answer{r: r, resp: p.Response, ready: p.Ready}
					continue
				}
				<-p.Ready
				resp = p.Response
			}
			inflight.Wait() // a pipelined request that failed early
			if !f {
				out, f = c.respond(ctx, r, resp, err, out)
			}
			if f {
				failed.Store(true)
			}
		} else {
			c.handled(r)
		}
		if r.done != nil {
			close(r.done)
		}
	}
}

// handled frees what reading r took once its handler returned: its share
// of queued.max.request.bytes and, for a produce request, its frame (the
// engine copied the records, and nothing else keeps them).
func (c *conn) handled(r *request) {
	c.s.cfg.Requests.Release(r.reserved)
	r.reserved = 0
	if _, ok := r.req.(*kmsg.ProduceRequest); ok {
		c.s.frames.Put(r.frame)
		r.frame = nil
	}
}

// maxPendingProduces bounds the produce requests of one connection waiting
// for their fsync; clients keep at most 5 in flight.
const maxPendingProduces = 5

// answer is a handled request whose response waits for ready.
type answer struct {
	r     *request
	resp  kmsg.Response
	ready <-chan struct{}
}

// pipelines says whether r may be handled while earlier produce requests
// of the connection wait for their fsync: only a produce (acks != 0) of an
// authenticated connection without client quotas, whose throttling would
// otherwise apply a request late.
func (c *conn) pipelines(r *request) bool {
	pr, ok := r.req.(*kmsg.ProduceRequest)
	return ok && pr.Acks != 0 && r.done == nil && !r.raw && !r.badVersion &&
		len(c.s.cfg.Applied().ClientQuotas) == 0
}

// handle runs one request's handler; failed says the connection is closed.
// A panic in the handler closes the connection (as an error does) and
// leaves the broker serving.
func (c *conn) handle(ctx context.Context, r *request) (resp kmsg.Response, failed bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, c.panicked(r.req.Key(), r.rc.Version, p)
		}
	}()
	// A throttled connection is muted (KIP-219): a request read ahead
	// waits as well, as Kafka reads none while muted.
	if d := time.Until(time.Unix(0, c.muteUntil.Load())); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, true, nil
		}
	}
	r.rc.Principal, r.rc.Listener, r.rc.Authorizer = c.principal, c.l.Name, c.s.cfg.Authorizer
	if r.raw {
		return nil, c.handleRawToken(ctx, r), nil
	}
	resp, err = c.gate(ctx, r)
	if err == nil && resp == nil {
		resp, err = c.dispatch(ctx, r)
	}
	return resp, false, err
}

// dispatch runs the handler of one request. A nil response means none is
// sent; an error closes the connection.
func (c *conn) dispatch(ctx context.Context, r *request) (kmsg.Response, error) {
	if r.badVersion {
		return apiVersionsUnsupported(c.s.cfg.APIs), nil
	}
	return c.s.cfg.APIs.Dispatch(ctx, &r.rc, r.req)
}

// framed is a response that writes its frame itself
// (fetchwire.Response).
type framed interface {
	// WriteFrame writes the response to w after head (the frame header,
	// starting with a size placeholder, which it fills in) and releases
	// what the response holds. It returns the bytes written.
	WriteFrame(w io.Writer, head []byte) (int64, error)
}

// respond writes the response to r (or closes the connection on err),
// with out as buffer; failed says the connection is closed.
func (c *conn) respond(ctx context.Context, r *request, resp kmsg.Response, err error, out []byte) (_ []byte, failed bool) {
	s := c.s
	defer func() {
		if p := recover(); p != nil { // encoding a malformed response
			c.panicked(r.req.Key(), r.rc.Version, p)
			c.nc.Close()
			out, failed = nil, true
		}
	}()
	elapsed := time.Since(r.start)
	s.m.observe(r, elapsed)
	if err != nil {
		s.log.Warn("closing connection after request error", "client", r.rc.ClientAddr, "client_id", r.rc.ClientID,
			"api", wire.APIName(r.req.Key()), "version", r.rc.Version, "err", err)
		c.nc.Close()
		return out, true
	}
	if resp == nil {
		return out, false // acks=0 produce: no response at all
	}
	c.throttle(ctx, r, resp, elapsed)
	var err2 error
	if f, ok := resp.(framed); ok {
		var n int64
		n, err2 = f.WriteFrame(c.nc, appendResponseHeader(out[:0], r.rc.CorrelationID, resp))
		s.m.BytesOut.Add(int(n))
	} else {
		out = resp.AppendTo(appendResponseHeader(out[:0], r.rc.CorrelationID, resp))
		binary.BigEndian.PutUint32(out, uint32(len(out)-4))
		s.m.BytesOut.Add(len(out))
		_, err2 = c.nc.Write(out)
	}
	if cap(out) > 1<<20 {
		out = nil // do not pin a large fetch response's buffer
	}
	if err2 != nil || c.closeAfter {
		c.nc.Close()
		return out, true
	}
	return out, false
}

// panicked logs a recovered panic of a request's decoding, handling or
// encoding once, with its stack, counts it, and returns the error that
// closes the connection.
func (c *conn) panicked(key, version int16, p any) error {
	c.s.m.Panics.Inc()
	c.s.log.Error("panic serving a request; closing its connection", "client", c.nc.RemoteAddr(), "api", wire.APIName(key), "api_key", key,
		"version", version, "panic", p, "stack", string(debug.Stack()))
	return fmt.Errorf("panic serving %s v%d: %v", wire.APIName(key), version, p)
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
		if d := time.Until(time.Unix(0, c.muteUntil.Load())); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.s.ctx.Done():
				t.Stop()
				return
			}
		}
		var r *request
		var err error
		if c.rawSASL.Load() {
			r, err = c.readRawToken(br, remote)
		} else {
			r, err = c.readRequest(br, remote)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.s.log.Warn("closing connection", "client", remote, "err", err)
			}
			return
		}
		if !c.authenticated.Load() {
			r.done = make(chan struct{})
		}
		reqs <- r
		if r.done != nil {
			<-r.done
		}
	}
}

func (c *conn) maxFrame() int32 {
	if !c.authenticated.Load() {
		return preAuthMaxFrame
	}
	return c.s.cfg.MaxFrame
}

// connIdleTimeout is Kafka's connections.max.idle.ms: a connection that
// sends nothing for this long is closed.
const connIdleTimeout = 10 * time.Minute

// readFrame reads one frame of at least minSize bytes and at most what
// the connection may send now (server/wire/frame.go says how reading a
// frame bounds its memory) and returns it with the bytes it reserved in
// the broker's budget, which the caller releases.
func (c *conn) readFrame(br *bufio.Reader, minSize int32) (body []byte, reserved int64, err error) {
	body, reserved, err = c.s.frameReader.Read(c.s.ctx, c.nc, br, minSize, c.maxFrame())
	if err == nil {
		c.s.m.BytesIn.Add(len(body) + 4)
	}
	return body, reserved, err
}

// readRequest reads and decodes one request. On error nothing of it is
// kept: its reservation is released and its frame dropped.
func (c *conn) readRequest(br *bufio.Reader, remote string) (r *request, err error) {
	body, reserved, err := c.readFrame(br, 1)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() {
		if err != nil {
			c.s.cfg.Requests.Release(reserved)
		}
	}()
	rd := kbin.Reader{Src: body}
	key, version, corr := rd.Int16(), rd.Int16(), rd.Int32()
	clientID := rd.NullableString()
	if !rd.Ok() {
		return nil, errors.New("truncated request header")
	}
	defer func() {
		if p := recover(); p != nil { // a plugin's request type failing to decode
			r, err = nil, c.panicked(key, version, p)
		}
	}()
	r = &request{size: len(body) + 4, start: start, frame: body, reserved: reserved, rc: plugin.RequestContext{
		Version: version, CorrelationID: corr, ClientAddr: remote,
	}}
	if clientID != nil {
		r.rc.ClientID = *clientID
	}
	r.req = c.s.cfg.APIs.NewRequest(key, version)
	vr, _ := c.s.cfg.APIs.Lookup(key)
	if r.req == nil {
		return nil, fmt.Errorf("unsupported api key %d (client id %q)", key, r.rc.ClientID)
	}
	r.req.SetVersion(version)
	if version < vr.MinVersion || version > vr.MaxVersion {
		if key != apiKeyApiVersions {
			return nil, fmt.Errorf("unsupported version %d of %s (client id %q)", version, wire.APIName(key), r.rc.ClientID)
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
			return nil, fmt.Errorf("bad tagged fields in %s v%d request header", wire.APIName(key), version)
		}
	}
	if err := r.req.ReadFrom(rd.Src); err != nil {
		return nil, fmt.Errorf("undecodable %s v%d request (client id %q): %w", wire.APIName(key), version, r.rc.ClientID, err)
	}
	return r, nil
}
