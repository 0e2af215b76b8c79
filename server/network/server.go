// Package network is the broker's side of its client connections:
// listeners (TLS, SASL), accepting, framing and decoding requests,
// authentication, client quotas, and answering in order while produce
// requests wait for their fsync. What it takes of the broker is Config:
// a few values, the shared budgets and throttles, and the table of APIs
// it dispatches decoded requests to.
package network

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/quota"
	"github.com/tandem-kafka/tandem/server/security"
	"github.com/tandem-kafka/tandem/server/wire"
)

// APIs is what a connection needs of the table of APIs the broker
// serves: decoding only the keys and versions it serves, and handing a
// decoded request to the key's handler.
type APIs interface {
	// NewRequest returns an empty request of key at version to decode
	// into, nil if key is not served.
	NewRequest(key, version int16) kmsg.Request
	// Lookup returns the versions of key, and whether it is served.
	Lookup(key int16) (kmsg.ApiVersionsResponseApiKey, bool)
	// Versions lists every key served, for ApiVersions answers.
	Versions() []kmsg.ApiVersionsResponseApiKey
	// Dispatch runs the handler of one request. A nil response means
	// none is sent; an error closes the connection.
	Dispatch(ctx context.Context, rc *plugin.RequestContext, req kmsg.Request) (kmsg.Response, error)
}

// PendingResponse is a response that may be sent once Ready is closed:
// a produce whose batches are appended but not yet durable. A handler
// returns one so that the connection goes on with its next produce
// meanwhile; responses still go out in request order.
type PendingResponse struct {
	kmsg.Response
	Ready <-chan struct{}
}

// Config is what the network side takes of the broker.
type Config struct {
	Log       *slog.Logger
	Listeners []*Listener // bound (Bind)
	Metrics   *Metrics
	APIs      APIs
	// Requests bounds the bytes of requests read and not yet handled
	// (queued.max.request.bytes); the broker shares it with record
	// decompression.
	Requests        *wire.Budget
	MaxFrame        int32              // socket.request.max.bytes, once authenticated
	ReadTimeout     time.Duration      // tandem.request.read.timeout.ms
	FailedAuthDelay time.Duration      // connection.failed.authentication.delay.ms
	Throttle        *security.Throttle // of failed SASL authentications
	Quotas          *quota.Quotas      // client quotas (KIP-219)
	Reauth          time.Duration      // connections.max.reauth.ms
	Authorizer      plugin.Authorizer  // nil: everything is allowed
	// Now is the clock of SASL session lifetimes; nil is time.Now.
	Now func() time.Time
	// Image is the metadata quorum's latest image: SCRAM credentials
	// and client quotas.
	Image func() *metadata.Image
	// Applied is the image the broker has applied: with client quotas
	// set, produce requests are not pipelined.
	Applied func() *metadata.Image
}

// Server accepts and serves the connections of the broker's listeners.
type Server struct {
	cfg         Config
	log         *slog.Logger
	m           *Metrics
	now         func() time.Time
	frames      wire.FramePool   // produce request buffers, recycled
	frameReader wire.FrameReader // reads requests within cfg.Requests, into frames
	ctx         context.Context  // set by Start; ends with the broker

	wg     sync.WaitGroup // accept loops and connections
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

// New returns a server of cfg's listeners; Start starts it.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, log: cfg.Log, m: cfg.Metrics, now: cfg.Now, conns: make(map[net.Conn]struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	s.frameReader = wire.FrameReader{Budget: cfg.Requests, Pool: &s.frames, Idle: connIdleTimeout, ReadTimeout: cfg.ReadTimeout}
	return s
}

// Start accepts on every listener until it is closed. Connections end
// when ctx does.
func (s *Server) Start(ctx context.Context) {
	s.ctx = ctx
	s.wg.Add(len(s.cfg.Listeners))
	for _, l := range s.cfg.Listeners {
		go func() { defer s.wg.Done(); s.acceptLoop(l) }()
	}
}

// Close closes every connection and refuses the ones accepted from now
// on; the broker closes the listeners. Wait waits for them to end.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
}

// Wait waits for the accept loops and the connections to end.
func (s *Server) Wait() { s.wg.Wait() }

// trackConn registers c so that Close can close it; it reports false when
// the server is already closing.
func (s *Server) trackConn(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) acceptLoop(l *Listener) {
	var delay time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as
			// net/http does, instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if !s.trackConn(nc, true) {
			nc.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if l.TLS != nil {
				nc = tls.Server(nc, l.TLS)
			}
			c := &conn{s: s, nc: nc, l: l, principal: anonymous}
			c.authenticated.Store(!l.IsSASL())
			c.serve()
		}()
	}
}

// Metrics are the network side's metrics, made by the broker in its set
// (whose families it describes).
type Metrics struct {
	Set              *prom.Set // where the per-API request metrics are made
	Conns            *metrics.Gauge
	BytesIn          *metrics.Counter
	BytesOut         *metrics.Counter
	Panics           *metrics.Counter // recovered panics of request handling
	AuthFailures     *metrics.Counter // failed SASL authentications
	AuthThrottled    *metrics.Counter // attempts refused unchecked by the throttle
	AuthThrottleWait *metrics.FloatCounter
	requests         sync.Map // api name -> *apiMetrics
}

type apiMetrics struct {
	count    *metrics.Counter
	duration *metrics.PrometheusHistogram
}

// observe counts a handled request and its latency, labelled by API.
func (m *Metrics) observe(r *request, d time.Duration) {
	name := requestName(r.req)
	am, ok := m.requests.Load(name)
	if !ok {
		am, _ = m.requests.LoadOrStore(name, &apiMetrics{
			count:    m.Set.GetOrCreateCounter(`tandem_server_requests_total{api="` + name + `"}`),
			duration: m.Set.GetOrCreatePrometheusHistogram(`tandem_server_request_duration_seconds{api="` + name + `"}`),
		})
	}
	a := am.(*apiMetrics)
	a.count.Inc()
	a.duration.Update(d.Seconds())
}

const apiKeyApiVersions = 18

// requestName names a request for metric labels by its Go type, so that a
// plugin's API gets its own name: key 94 is kmsg's UnregisterController
// but the mirror plugin's CreateMirror.
func requestName(req kmsg.Request) string {
	t := reflect.TypeOf(req)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.TrimSuffix(t.Name(), "Request")
}

// apiVersionsUnsupported is the KIP-511 answer to an ApiVersions request
// newer than we know: a v0 body with UNSUPPORTED_VERSION that still lists
// our keys, so the client can retry at a version we serve.
func apiVersionsUnsupported(apis APIs) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = apis.Versions()
	return resp
}
