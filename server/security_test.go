package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tandem-kafka/tandem/testing/fakeclock"
)

// principals is an Authorizer that allows everything and records who asked.
type principals struct {
	mu   sync.Mutex
	seen []string
}

func (p *principals) Authorize(rc *RequestContext, _ kmsg.ACLOperation, _ kmsg.ACLResourceType, _ string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.seen, rc.Principal) {
		p.seen = append(p.seen, rc.Principal)
	}
	return true
}

func (p *principals) has(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.seen, s)
}

func ping(t *testing.T, addr string, opts ...kgo.Opt) error {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cl.Request(ctx, kmsg.NewPtrDescribeClusterRequest()) // authorized: the principal is recorded
	return err
}

// jwt signs claims with key as an ES256 JWS, or leaves it unsigned with
// alg "none" when key is nil.
func jwt(t *testing.T, key *ecdsa.PrivateKey, claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	alg := "ES256"
	if key == nil {
		alg = "none"
	}
	signing := enc(map[string]string{"alg": alg, "typ": "JWT"}) + "." + enc(claims)
	if key == nil {
		return signing + "."
	}
	d := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, d[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func TestOAuthBearer(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pubFile := filepath.Join(t.TempDir(), "issuer.pem")
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &principals{}
	b := startBrokerWith(t, Config{Plugins: []any{rec}, Props: map[string]string{
		"listeners":                           "SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms":             "OAUTHBEARER",
		"tandem.sasl.oauthbearer.public.keys": pubFile,
		"sasl.oauthbearer.expected.issuer":    "https://issuer.test",
		"sasl.oauthbearer.expected.audience":  "tandem",
		"sasl.oauthbearer.clock.skew.seconds": "0",
		// The refused tokens would otherwise space out the later attempts.
		"connection.failed.authentication.delay.ms": "0",
	}})
	claims := func(mod func(map[string]any)) map[string]any {
		c := map[string]any{"sub": "svc-orders", "iss": "https://issuer.test", "aud": []string{"tandem"}, "exp": time.Now().Add(time.Hour).Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	try := func(tok string) error { return ping(t, b.Addr(), kgo.SASL(oauth.Auth{Token: tok}.AsMechanism())) }
	if err := try(jwt(t, key, claims(nil))); err != nil {
		t.Fatalf("valid token refused: %v", err)
	}
	if !rec.has("User:svc-orders") {
		t.Fatalf("principals %v, want User:svc-orders", rec.seen)
	}
	for name, tok := range map[string]string{
		"alg none":        jwt(t, nil, claims(nil)),
		"other key":       jwt(t, other, claims(nil)),
		"expired":         jwt(t, key, claims(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() })),
		"wrong issuer":    jwt(t, key, claims(func(c map[string]any) { c["iss"] = "https://evil.test" })),
		"wrong audience":  jwt(t, key, claims(func(c map[string]any) { c["aud"] = "other" })),
		"no subject":      jwt(t, key, claims(func(c map[string]any) { delete(c, "sub") })),
		"not a JWT":       "opaque-token",
		"tampered claims": jwt(t, key, claims(nil))[:10] + "x" + jwt(t, key, claims(nil))[11:],
	} {
		if err := try(tok); err == nil {
			t.Errorf("%s: token accepted", name)
		}
	}
}

// TestReauthentication: SaslAuthenticate returns the session lifetime
// (KIP-368); re-authenticating on the connection starts a new session; a
// client that does not re-authenticate is disconnected at its first
// request after its session ended; and franz-go, which re-authenticates,
// keeps working on the connection it has. The broker runs on the test's
// clock, so a session ends when the test advances the clock past it.
func TestReauthentication(t *testing.T) {
	// The clock starts at the wall clock's now, so that times compared with
	// real ones (token expiries) stay meaningful.
	clk := fakeclock.New(time.Now())
	b := startBrokerAt(t, clk, Config{Props: map[string]string{
		"listeners":                 "SASL_PLAINTEXT://127.0.0.1:0",
		"tandem.sasl.plain.users":   "alice:pw",
		"connections.max.reauth.ms": "1000",
	}})
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	corr := int32(0)
	authenticate := func() {
		t.Helper()
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, "PLAIN"
		corr++
		if _, err := roundTrip(c, hs, corr); err != nil {
			t.Fatal(err)
		}
		auth := kmsg.NewPtrSASLAuthenticateRequest()
		auth.Version, auth.SASLAuthBytes = 1, []byte("\x00alice\x00pw")
		corr++
		resp, err := roundTrip(c, auth, corr)
		if err != nil {
			t.Fatal(err)
		}
		if ar := resp.(*kmsg.SASLAuthenticateResponse); ar.ErrorCode != 0 || ar.SessionLifetimeMillis != 1000 {
			t.Fatalf("authenticate: %+v", ar)
		}
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	metadata := func() error {
		corr++
		_, err := roundTrip(c, md, corr)
		return err
	}
	authenticate()
	if err := metadata(); err != nil {
		t.Fatalf("metadata within the session: %v", err)
	}
	clk.Advance(600 * time.Millisecond)
	authenticate()
	clk.Advance(600 * time.Millisecond) // past the first session, within the second
	if err := metadata(); err != nil {
		t.Fatalf("metadata within the re-authenticated session: %v", err)
	}
	clk.Advance(500 * time.Millisecond)
	if err := metadata(); err == nil {
		t.Fatal("request after the session expired was answered")
	}

	// franz-go takes a 1s margin off the lifetime, so with 1000 ms it
	// re-authenticates before each request; a connection it lost to an
	// expired session would show as one more dial.
	var dials atomic.Int32
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, host)
	}
	cl := newClient(t, b, kgo.SASL(plain.Auth{User: "alice", Pass: "pw"}.AsMechanism()), kgo.Dialer(dial))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Broker(1).Request(ctx, kmsg.NewPtrMetadataRequest()); err != nil {
		t.Fatal(err)
	}
	before := dials.Load()
	for range 5 {
		clk.Advance(600 * time.Millisecond)
		if _, err := cl.Broker(1).Request(ctx, kmsg.NewPtrMetadataRequest()); err != nil {
			t.Fatalf("franz-go across re-authentications: %v", err)
		}
	}
	if n := dials.Load(); n != before {
		t.Fatalf("franz-go dialed %d more times across re-authentications, want none", n-before)
	}
}

// TestTLSClientAuth: with ssl.client.auth=required the principal is the
// client certificate's subject, and a client without one is refused.
func TestTLSClientAuth(t *testing.T) {
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(subject pkix.Name, server bool) tls.Certificate {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: subject,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if server {
			tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.IPv4(127, 0, 0, 1)}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	srv := issue(pkix.Name{CommonName: "broker"}, true)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(srv.PrivateKey)
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate[0]})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600)
	rec := &principals{}
	b := startBrokerWith(t, Config{Plugins: []any{rec}, Props: map[string]string{
		"listeners":                      "PLAINTEXT://127.0.0.1:0,CLIENTS://127.0.0.1:0",
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SSL",
		"inter.broker.listener.name":     "PLAINTEXT",
		// PEM text inline, as Kafka's ssl.keystore.certificate.chain takes it.
		"listener.name.clients.ssl.keystore.certificate.chain": string(chain),
		"listener.name.clients.ssl.keystore.key":               string(keyPEM),
		"listener.name.clients.ssl.truststore.type":            "PEM",
		"listener.name.clients.ssl.truststore.location":        caFile,
		"listener.name.clients.ssl.client.auth":                "required",
	}})
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	addr := b.ListenerAddr("CLIENTS")
	client := issue(pkix.Name{CommonName: "orders", Organization: []string{"tandem"}}, false)
	if err := ping(t, addr, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}})); err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	if !rec.has("User:CN=orders,O=tandem") {
		t.Fatalf("principals %v, want User:CN=orders,O=tandem", rec.seen)
	}
	if err := ping(t, addr, kgo.DialTLSConfig(&tls.Config{RootCAs: pool})); err == nil {
		t.Fatal("client without a certificate was served")
	}
	// Metadata on each listener advertises that listener.
	for _, name := range []string{"PLAINTEXT", "CLIENTS"} {
		if b.ListenerAddr(name) == "" {
			t.Fatalf("no address for listener %s", name)
		}
	}
	resp := rawRequest(t, b.ListenerAddr("PLAINTEXT"), &kmsg.MetadataRequest{Version: 12}).(*kmsg.MetadataResponse)
	if got := net.JoinHostPort(resp.Brokers[0].Host, itoa(resp.Brokers[0].Port)); got != b.ListenerAddr("PLAINTEXT") {
		t.Fatalf("PLAINTEXT metadata advertises %s, want %s", got, b.ListenerAddr("PLAINTEXT"))
	}
}

func itoa(p int32) string { return big.NewInt(int64(p)).String() }
