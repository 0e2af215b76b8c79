package fetch

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl"
)

// conn is a fetcher's own connection to its source broker. The fetcher
// does not use a franz-go client for its Fetches: a client reads every
// answer into a fresh buffer, which for a mirror is most of its memory
// traffic (allocating and zeroing tens of MiB a second, then collecting
// them). conn reads each answer into a buffer the fetcher reuses, whose
// size the fetcher has reserved first (see budget), and lets it send the
// next request before the last answer's appends are durable.
//
// A conn is used by one goroutine at a time. Requests are answered in
// the order sent (Kafka's rule for one connection), so a conn checks the
// correlation ID of each answer against the oldest request not answered.
type conn struct {
	nc       net.Conn
	br       *bufio.Reader
	format   *kmsg.RequestFormatter
	host     string
	corr     int32
	sent     []int32 // correlation IDs of requests not answered yet
	wbuf     []byte
	versions map[int16]int16 // the broker's maximum version of each key
	timeout  time.Duration   // bounds each write and each read
	rtt      time.Duration   // of the ApiVersions exchange at dial: the link's round trip
	// expires is when the broker ends the SASL session (KIP-368): the
	// fetcher dials again before, rather than re-authenticating in
	// place. Zero: never.
	expires time.Time
}

// dialer is how a fetcher reaches its source broker.
type dialer struct {
	ClientID       string
	TLS            *tls.Config    // nil: plaintext
	SASL           sasl.Mechanism // nil: none
	ConnectTimeout time.Duration
	RequestTimeout time.Duration
}

// maxAnswer bounds the size of any answer a conn reads, whatever was
// reserved for it: above this the answer is refused and the connection
// closed (a broken or hostile source cannot make the destination
// allocate without bound). Kafka lets the first batch of a fetch exceed
// the fetch's limits (KIP-74), so the bound is not the fetch size.
const maxAnswer = 256 << 20

// dial connects to addr, learns the broker's API versions and
// authenticates.
func (d dialer) dial(ctx context.Context, addr string) (*conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	nd := net.Dialer{Timeout: d.ConnectTimeout}
	nc, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if d.TLS != nil {
		tc := d.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName = host
		}
		tlsConn := tls.Client(nc, tc)
		hctx, cancel := context.WithTimeout(ctx, d.ConnectTimeout)
		err := tlsConn.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		nc = tlsConn
	}
	c := &conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), host: host, timeout: d.RequestTimeout,
		format: kmsg.NewRequestFormatter(kmsg.FormatterClientID(d.ClientID))}
	if err := c.handshake(ctx, d.SASL); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	return c, nil
}

// handshake learns the broker's versions (ApiVersions v0, which every
// broker since 0.10 answers in the same form) and authenticates.
func (c *conn) handshake(ctx context.Context, mech sasl.Mechanism) error {
	start := time.Now()
	resp, err := c.roundTrip(ctx, kmsg.NewPtrApiVersionsRequest(), 0)
	if err != nil {
		return fmt.Errorf("ApiVersions: %w", err)
	}
	c.rtt = time.Since(start)
	av := resp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(av.ErrorCode); err != nil {
		return fmt.Errorf("ApiVersions: %w", err)
	}
	c.versions = make(map[int16]int16, len(av.ApiKeys))
	for _, k := range av.ApiKeys {
		c.versions[k.ApiKey] = k.MaxVersion
	}
	if mech == nil {
		return nil
	}
	return c.authenticate(ctx, mech)
}

// stable are the versions franz-go calls stable.
var stable = kversion.Stable()

// version is the version to send of req: the highest both sides know,
// capped at what franz-go's stable set names. ok is false when the
// broker does not serve the key.
func (c *conn) version(req kmsg.Request) (int16, bool) {
	theirs, ok := c.versions[req.Key()]
	if !ok {
		return 0, false
	}
	ours := req.MaxVersion()
	if v, ok := stable.LookupMaxKeyVersion(req.Key()); ok {
		ours = min(ours, v)
	}
	return min(ours, theirs), true
}

// authenticate runs SASL (SaslHandshake v1, then SaslAuthenticate until
// the mechanism is done), as Kafka's clients do.
func (c *conn) authenticate(ctx context.Context, mech sasl.Mechanism) error {
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = mech.Name()
	resp, err := c.roundTrip(ctx, hs, 1)
	if err != nil {
		return fmt.Errorf("SaslHandshake: %w", err)
	}
	if err := kerr.ErrorForCode(resp.(*kmsg.SASLHandshakeResponse).ErrorCode); err != nil {
		return fmt.Errorf("SaslHandshake %s: %w", mech.Name(), err)
	}
	session, msg, err := mech.Authenticate(ctx, c.host)
	if err != nil {
		return fmt.Errorf("SASL %s: %w", mech.Name(), err)
	}
	v, ok := c.version(kmsg.NewPtrSASLAuthenticateRequest())
	if !ok {
		return errors.New("the broker does not serve SaslAuthenticate")
	}
	for start := time.Now(); ; {
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.SASLAuthBytes = msg
		resp, err := c.roundTrip(ctx, req, min(v, 2))
		if err != nil {
			return fmt.Errorf("SaslAuthenticate: %w", err)
		}
		ar := resp.(*kmsg.SASLAuthenticateResponse)
		if err := kerr.ErrorForCode(ar.ErrorCode); err != nil {
			if ar.ErrorMessage != nil {
				return fmt.Errorf("SASL %s: %w: %s", mech.Name(), err, *ar.ErrorMessage)
			}
			return fmt.Errorf("SASL %s: %w", mech.Name(), err)
		}
		done, next, err := session.Challenge(ar.SASLAuthBytes)
		if err != nil {
			return fmt.Errorf("SASL %s: %w", mech.Name(), err)
		}
		if done {
			if ar.SessionLifetimeMillis > 0 {
				// Dial again at 90% of the lifetime, counted from
				// before the exchange began.
				c.expires = start.Add(time.Duration(ar.SessionLifetimeMillis) * time.Millisecond * 9 / 10)
			}
			return nil
		}
		msg = next
	}
}

// roundTrip sends req at version v and reads its answer into a buffer of
// its own: for the handshake's small requests.
func (c *conn) roundTrip(ctx context.Context, req kmsg.Request, v int16) (kmsg.Response, error) {
	req.SetVersion(v)
	if err := c.send(ctx, req); err != nil {
		return nil, err
	}
	resp := req.ResponseKind()
	resp.SetVersion(v)
	var buf []byte
	if err := c.recv(ctx, resp, &buf, func(n int) (int, error) { return n, nil }); err != nil {
		return nil, err
	}
	return resp, nil
}

// send writes req, whose version is set, to the broker.
func (c *conn) send(ctx context.Context, req kmsg.Request) error {
	c.corr++
	c.wbuf = c.format.AppendRequest(c.wbuf[:0], req, c.corr)
	if c.timeout > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	defer c.watch(ctx)() // after the timeout's deadline, which would undo a stop's
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return c.ctxErr(ctx, err)
	}
	c.sent = append(c.sent, c.corr)
	return nil
}

// recv reads the answer to the oldest request sent into *buf (grown when
// it is too small; its bytes are the answer's until the next recv into
// it) and decodes it into resp, whose version is set. grow is called
// with the answer's size before the buffer grows for it: it returns the
// capacity to allocate (at least n), or refuses.
func (c *conn) recv(ctx context.Context, resp kmsg.Response, buf *[]byte, grow func(n int) (int, error)) error {
	if len(c.sent) == 0 {
		return errors.New("no request to read the answer of")
	}
	if c.timeout > 0 {
		// A Fetch waits at the broker up to its MaxWait, which the
		// fetcher adds to the request timeout it configured.
		c.nc.SetReadDeadline(time.Now().Add(c.timeout))
	}
	defer c.watch(ctx)() // after the timeout's deadline, which would undo a stop's
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		return c.ctxErr(ctx, err)
	}
	n := int(int32(binary.BigEndian.Uint32(size[:])))
	if n < 4 || n > maxAnswer {
		return fmt.Errorf("an answer of %d bytes (at most %d are read)", n, maxAnswer)
	}
	if n > cap(*buf) {
		size, err := grow(n)
		if err != nil {
			return err
		}
		*buf = make([]byte, max(n, size))
	}
	b := (*buf)[:n]
	if _, err := io.ReadFull(c.br, b); err != nil {
		return c.ctxErr(ctx, err)
	}
	want := c.sent[0]
	c.sent = c.sent[1:]
	if got := int32(binary.BigEndian.Uint32(b)); got != want {
		return fmt.Errorf("answer to request %d where %d was expected", got, want)
	}
	b = b[4:]
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		var err error
		if b, err = skipTags(b); err != nil {
			return err
		}
	}
	if err := resp.ReadFrom(b); err != nil {
		return fmt.Errorf("decoding %s v%d: %w", kmsg.NameForKey(resp.Key()), resp.GetVersion(), err)
	}
	return nil
}

// watch makes a blocked read or write return when ctx ends (a fetcher
// stopped while its Fetch waits at the source): it sets the connection's
// deadline to now, so it is called after the timeout's deadline is set,
// never before (a later deadline would replace the stop's). The
// returned func undoes it.
func (c *conn) watch(ctx context.Context) func() {
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Now()) })
	return func() { stop() }
}

func (c *conn) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// expired reports whether the SASL session is about to end.
func (c *conn) expired(now time.Time) bool {
	return !c.expires.IsZero() && now.After(c.expires)
}

func (c *conn) close() { c.nc.Close() }

// skipTags skips the tagged fields of a flexible response header.
func skipTags(b []byte) ([]byte, error) {
	n, l := binary.Uvarint(b)
	if l <= 0 {
		return nil, errors.New("malformed response header")
	}
	b = b[l:]
	for range n {
		if _, l = binary.Uvarint(b); l <= 0 {
			return nil, errors.New("malformed response header tag")
		}
		b = b[l:]
		size, l := binary.Uvarint(b)
		if l <= 0 || uint64(len(b)-l) < size {
			return nil, errors.New("malformed response header tag")
		}
		b = b[l+int(size):]
	}
	return b, nil
}
