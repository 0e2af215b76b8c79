package network

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/quota"
	"github.com/tandem-kafka/tandem/server/security"
	"github.com/tandem-kafka/tandem/server/wire"
)

// fakeAPIs is the broker's table of APIs as a connection sees it:
// Produce, Metadata, ApiVersions, and the SASL keys that the connection
// answers itself. Dispatch answers an empty response, or what produce
// makes of it, and records what reached it.
type fakeAPIs struct {
	mu      sync.Mutex
	seen    []plugin.RequestContext
	produce func(corr int32, resp kmsg.Response) kmsg.Response
}

var fakeVersions = []kmsg.ApiVersionsResponseApiKey{
	{ApiKey: 0, MinVersion: 3, MaxVersion: 9},
	{ApiKey: 3, MinVersion: 0, MaxVersion: 12},
	{ApiKey: 17, MinVersion: 0, MaxVersion: 1},
	{ApiKey: 18, MinVersion: 0, MaxVersion: 4},
	{ApiKey: 36, MinVersion: 0, MaxVersion: 2},
}

func (f *fakeAPIs) NewRequest(key, _ int16) kmsg.Request {
	if _, ok := f.Lookup(key); !ok {
		return nil
	}
	return kmsg.RequestForKey(key)
}

func (f *fakeAPIs) Lookup(key int16) (kmsg.ApiVersionsResponseApiKey, bool) {
	for _, v := range fakeVersions {
		if v.ApiKey == key {
			return v, true
		}
	}
	return kmsg.ApiVersionsResponseApiKey{}, false
}

func (f *fakeAPIs) Versions() []kmsg.ApiVersionsResponseApiKey { return fakeVersions }

func (f *fakeAPIs) Dispatch(_ context.Context, rc *plugin.RequestContext, req kmsg.Request) (kmsg.Response, error) {
	f.mu.Lock()
	f.seen = append(f.seen, *rc)
	produce := f.produce
	f.mu.Unlock()
	if _, ok := req.(*kmsg.ProduceRequest); ok && produce != nil {
		return produce(rc.CorrelationID, req.ResponseKind()), nil
	}
	return req.ResponseKind(), nil
}

func (f *fakeAPIs) dispatched() []plugin.RequestContext {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]plugin.RequestContext(nil), f.seen...)
}

// startServer serves apis on the listener of props (nil: PLAINTEXT) on
// 127.0.0.1 and returns its address.
func startServer(t *testing.T, apis APIs, props map[string]string) string {
	t.Helper()
	ls, err := ParseListeners(props, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Bind(ls); err != nil {
		t.Fatal(err)
	}
	quotas, err := quota.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	set := prom.NewSet()
	image := func() *metadata.Image { return &metadata.Image{} }
	budget := wire.NewBudget(1 << 20)
	s := New(Config{
		Log:       slog.New(slog.DiscardHandler),
		Listeners: ls,
		Metrics: &Metrics{
			Set: set, Conns: set.NewGauge("conns", nil), BytesIn: set.NewCounter("in"), BytesOut: set.NewCounter("out"),
			Panics: set.NewCounter("panics"), AuthFailures: set.NewCounter("failures"),
			AuthThrottled: set.NewCounter("throttled"), AuthThrottleWait: set.NewFloatCounter("wait"),
		},
		APIs: apis, Requests: budget, MaxFrame: 1 << 20, Throttle: security.NewThrottle(0), Quotas: quotas,
		Image: image, Applied: image,
	})
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	t.Cleanup(func() {
		for _, l := range ls {
			l.Close()
		}
		s.Close()
		cancel()
		s.Wait()
		budget.Stop()
	})
	return ls[0].Addr()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// send writes req as one frame with correlation id corr.
func send(t *testing.T, c net.Conn, req kmsg.Request, corr int32) {
	t.Helper()
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test-client")).AppendRequest(nil, req, corr)
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
}

// receive reads one response into resp and returns its correlation id.
func receive(t *testing.T, c net.Conn, resp kmsg.Response) int32 {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	corr, body := int32(binary.BigEndian.Uint32(body)), body[4:]
	if resp.IsFlexible() && resp.Key() != apiKeyApiVersions {
		body = body[1:] // empty header tags
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return corr
}

// TestServeInOrder: requests pipelined on one connection are answered in
// their order, each dispatched with what the connection knows of it.
func TestServeInOrder(t *testing.T) {
	apis := &fakeAPIs{}
	c := dial(t, startServer(t, apis, nil))
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 12
	versions := kmsg.NewPtrApiVersionsRequest()
	versions.Version = 3
	send(t, c, meta, 7)
	send(t, c, versions, 8)
	if corr := receive(t, c, meta.ResponseKind()); corr != 7 {
		t.Fatalf("first response has correlation id %d, want 7", corr)
	}
	if corr := receive(t, c, versions.ResponseKind()); corr != 8 {
		t.Fatalf("second response has correlation id %d, want 8", corr)
	}
	seen := apis.dispatched()
	if len(seen) != 2 {
		t.Fatalf("%d requests dispatched, want 2", len(seen))
	}
	rc := seen[0]
	if rc.ClientID != "test-client" || rc.Version != 12 || rc.CorrelationID != 7 ||
		rc.Principal != anonymous || rc.Listener != protoPlaintext {
		t.Fatalf("request context %+v", rc)
	}
}

// TestTooNewApiVersions: an ApiVersions request newer than served is
// answered by the connection (KIP-511), with the versions served in a v0
// body, and never dispatched.
func TestTooNewApiVersions(t *testing.T) {
	apis := &fakeAPIs{}
	c := dial(t, startServer(t, apis, nil))
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 99
	send(t, c, req, 1)
	resp := kmsg.NewPtrApiVersionsResponse() // v0
	receive(t, c, resp)
	if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) != len(fakeVersions) {
		t.Fatalf("code %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
	}
	if n := len(apis.dispatched()); n != 0 {
		t.Fatalf("%d requests dispatched", n)
	}
}

// TestUnservedKeyCloses: a key the table does not serve closes the
// connection without an answer, and nothing is dispatched.
func TestUnservedKeyCloses(t *testing.T) {
	apis := &fakeAPIs{}
	c := dial(t, startServer(t, apis, nil))
	hb := kmsg.NewPtrHeartbeatRequest()
	send(t, c, hb, 1)
	n, err := c.Read(make([]byte, 64))
	if n != 0 || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("want the connection closed without a response, got %d bytes, err %v", n, err)
	}
	if n := len(apis.dispatched()); n != 0 {
		t.Fatalf("%d requests dispatched", n)
	}
}

// TestPendingResponsesInOrder: a produce whose answer waits for its
// fsync (PendingResponse) lets the next produce be dispatched, and the
// answers still go out in request order when the later one is durable
// first.
func TestPendingResponsesInOrder(t *testing.T) {
	ready := map[int32]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	dispatched := make(chan int32, 2)
	apis := &fakeAPIs{produce: func(corr int32, resp kmsg.Response) kmsg.Response {
		dispatched <- corr
		return &PendingResponse{Response: resp, Ready: ready[corr]}
	}}
	c := dial(t, startServer(t, apis, nil))
	for corr := int32(1); corr <= 2; corr++ {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks = 9, -1
		send(t, c, req, corr)
	}
	for want := int32(1); want <= 2; want++ {
		if got := <-dispatched; got != want {
			t.Fatalf("dispatched %d, want %d", got, want)
		}
	}
	close(ready[2])
	close(ready[1])
	for want := int32(1); want <= 2; want++ {
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		if corr := receive(t, c, resp); corr != want {
			t.Fatalf("response has correlation id %d, want %d", corr, want)
		}
	}
}

// TestParseListeners: Kafka's listener properties, and the mistakes
// that refuse a start.
func TestParseListeners(t *testing.T) {
	ls, err := ParseListeners(map[string]string{
		"listeners":                      "CLIENT://127.0.0.1:0,BROKER://127.0.0.1:0,CONTROLLER://127.0.0.1:9093",
		"advertised.listeners":           "CLIENT://kafka.example:9092",
		"listener.security.protocol.map": "CLIENT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"inter.broker.listener.name":     "BROKER",
	}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ls, ctrl, err := ControllerListener(ls, "CONTROLLER")
	if err != nil || ctrl != "127.0.0.1:9093" || len(ls) != 2 {
		t.Fatalf("controller listener %q, %d listeners left, err %v", ctrl, len(ls), err)
	}
	if ls[0].Name != "CLIENT" || ls[0].Advertise != "kafka.example:9092" || ls[0].IsSASL() {
		t.Fatalf("first listener %+v", ls[0])
	}
	if ib := InterBroker(ls, map[string]string{"inter.broker.listener.name": "broker"}); ib != ls[1] {
		t.Fatalf("inter-broker listener %s, want BROKER", ib.Name)
	}
	for name, m := range map[string]map[string]string{
		"duplicate":         {"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"},
		"no protocol":       {"listeners": "CLIENT://:1"},
		"no port":           {"listeners": "PLAINTEXT://localhost"},
		"bad map":           {"listeners": "PLAINTEXT://:1", "listener.security.protocol.map": "CLIENT"},
		"unknown broker":    {"listeners": "PLAINTEXT://:1", "inter.broker.listener.name": "OTHER"},
		"ssl, no keys":      {"listeners": "SSL://:1"},
		"unknown mechanism": {"listeners": "SASL_PLAINTEXT://:1", "sasl.enabled.mechanisms": "NOPE"},
	} {
		if _, err := ParseListeners(m, "", ""); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestSASLGate: on a SASL listener nothing but ApiVersions and the SASL
// exchange is served before authentication; a wrong password is
// refused and closes the connection; a right one makes the requests
// that follow carry the user's principal.
func TestSASLGate(t *testing.T) {
	apis := &fakeAPIs{}
	addr := startServer(t, apis, map[string]string{
		"listeners":               "SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms": "PLAIN",
		"tandem.sasl.plain.users": "alice:secret",
	})
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 12
	closed := func(c net.Conn) {
		t.Helper()
		if n, err := c.Read(make([]byte, 64)); n != 0 || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
			t.Fatalf("want the connection closed, got %d bytes, err %v", n, err)
		}
	}
	login := func(c net.Conn, password string) int16 {
		t.Helper()
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, "PLAIN"
		send(t, c, hs, 1)
		hsResp := hs.ResponseKind().(*kmsg.SASLHandshakeResponse)
		if receive(t, c, hsResp); hsResp.ErrorCode != 0 {
			t.Fatalf("SaslHandshake: code %d", hsResp.ErrorCode)
		}
		auth := kmsg.NewPtrSASLAuthenticateRequest()
		auth.Version, auth.SASLAuthBytes = 2, []byte("\x00alice\x00"+password)
		send(t, c, auth, 2)
		authResp := auth.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		receive(t, c, authResp)
		return authResp.ErrorCode
	}

	early := dial(t, addr)
	send(t, early, meta, 1)
	closed(early)

	wrong := dial(t, addr)
	if code := login(wrong, "guess"); code != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("wrong password: code %d", code)
	}
	closed(wrong)
	if n := len(apis.dispatched()); n != 0 {
		t.Fatalf("%d requests dispatched before authentication", n)
	}

	c := dial(t, addr)
	if code := login(c, "secret"); code != 0 {
		t.Fatalf("right password: code %d", code)
	}
	send(t, c, meta, 3)
	receive(t, c, meta.ResponseKind())
	if seen := apis.dispatched(); len(seen) != 1 || seen[0].Principal != "User:alice" {
		t.Fatalf("dispatched %+v", seen)
	}
}
