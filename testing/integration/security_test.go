package integration

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tandem-kafka/tandem/plugins/acl"
	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/server"
)

// secureBroker is an in-process broker with PLAINTEXT, SASL_PLAINTEXT and
// SASL_SSL listeners, TLS from a test CA generated here.
type secureBroker struct {
	*server.Broker
	caFile string
	caPool *x509.CertPool
}

// startSecure starts the broker with the security plugin (authorizing
// when authz is set) and the groups plugin, as tandem serve wires them.
func startSecure(t testing.TB, authz bool, extra map[string]string) *secureBroker {
	t.Helper()
	dir := t.TempDir()
	caFile, serverFile, pool := testCerts(t, dir)
	props := map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
		"ssl.keystore.type":       "PEM",
		"ssl.keystore.location":   serverFile,
		"tandem.sasl.plain.users": "alice:alice-secret,bob:bob-secret,eve:eve-secret,admin:admin-secret",
		"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
		"super.users":             "User:admin",
	}
	for k, v := range extra {
		props[k] = v
	}
	p, err := acl.New(props)
	if err != nil {
		t.Fatal(err)
	}
	plugins := []any{p, groups.New(props, slog.New(slog.DiscardHandler))}
	if authz {
		plugins = append(plugins, p.Authorizer())
	}
	b, err := server.New(server.Config{
		DataDir: dir, Props: props, Plugins: plugins,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &secureBroker{Broker: b, caFile: caFile, caPool: pool}
}

// testCerts writes a CA and a server certificate for 127.0.0.1 signed by
// it; the server file holds the certificate chain and the key (PEM).
func testCerts(t testing.TB, dir string) (caFile, serverFile string, pool *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tandem test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	caFile, serverFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	srv := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	if err := errors.Join(os.WriteFile(caFile, caPEM, 0o600), os.WriteFile(serverFile, srv, 0o600)); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return caFile, serverFile, pool
}

// addScramUsers stores SCRAM credentials through AlterUserScramCredentials
// (kadm), as kafka-configs.sh does.
func addScramUsers(t testing.TB, addr string, opts []kgo.Opt, users ...string) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr, opts...))
	var ups []kadm.UpsertSCRAM
	for _, u := range users {
		for _, m := range []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512} {
			ups = append(ups, kadm.UpsertSCRAM{User: u, Mechanism: m, Iterations: 4096, Password: u + "-secret"})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := adm.AlterUserSCRAMs(ctx, nil, ups)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("alter scram credentials: %v", err)
	}
}

func franzSASL(user, mech string) sasl.Mechanism {
	pw := user + "-secret"
	switch mech {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pw}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pw}.AsSha256Mechanism()
	}
	return scram.Auth{User: user, Pass: pw}.AsSha512Mechanism()
}

// franzOpts connects to a SASL listener as user with mech.
func (sb *secureBroker) franzOpts(listener, user, mech string) []kgo.Opt {
	opts := []kgo.Opt{kgo.SASL(franzSASL(user, mech)), kgo.RequestRetries(1), kgo.RetryTimeout(5 * time.Second)}
	if listener == "SASL_SSL" {
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{RootCAs: sb.caPool}))
	}
	return opts
}

var mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// TestSASLClients: franz-go, sarama and kcat authenticate with every
// mechanism over SASL_PLAINTEXT and SASL_SSL, produce and consume.
func TestSASLClients(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat is required (apt-get install -y kcat): %v", err)
	}
	sb := startSecure(t, false, nil)
	plainAddr := sb.ListenerAddr("PLAINTEXT")
	addScramUsers(t, plainAddr, nil, "alice")
	for _, listener := range []string{"SASL_PLAINTEXT", "SASL_SSL"} {
		addr := sb.ListenerAddr(listener)
		for _, mech := range mechanisms {
			t.Run(listener+"/"+mech, func(t *testing.T) {
				topic := strings.ToLower(strings.ReplaceAll(listener+"-"+mech, "_", "-"))
				createTopic(t, plainAddr, topic, 1)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()

				// franz-go: produce 10, consume them back. Metadata must
				// advertise this listener or the client would dial the
				// wrong one after bootstrapping.
				cl := newClient(t, addr, append(sb.franzOpts(listener, "alice", mech), kgo.ConsumeTopics(topic))...)
				for i := range 10 {
					if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "franz-%d", i)}).FirstErr(); err != nil {
						t.Fatalf("franz-go produce: %v", err)
					}
				}
				for n := 0; n < 10; {
					fs := cl.PollFetches(ctx)
					if err := fs.Err0(); err != nil {
						t.Fatalf("franz-go fetch: %v", err)
					}
					n += fs.NumRecords()
				}

				// sarama.
				sc := sarama.NewConfig()
				sc.Net.SASL.Enable, sc.Net.SASL.User, sc.Net.SASL.Password = true, "alice", "alice-secret"
				sc.Net.SASL.Mechanism = sarama.SASLMechanism(mech)
				if mech != "PLAIN" {
					sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{mech: mech} }
				}
				if listener == "SASL_SSL" {
					sc.Net.TLS.Enable, sc.Net.TLS.Config = true, &tls.Config{RootCAs: sb.caPool}
				}
				sc.Producer.Return.Successes = true
				sp, err := sarama.NewSyncProducer([]string{addr}, sc)
				if err != nil {
					t.Fatalf("sarama producer: %v", err)
				}
				if _, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("sarama")}); err != nil {
					t.Fatalf("sarama produce: %v", err)
				}
				sp.Close()

				// kcat (librdkafka).
				args := []string{"-b", addr, "-X", "security.protocol=" + listener, "-X", "sasl.mechanisms=" + mech,
					"-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"}
				if listener == "SASL_SSL" {
					args = append(args, "-X", "ssl.ca.location="+sb.caFile)
				}
				cmd := exec.CommandContext(ctx, kcat, append(args, "-P", "-t", topic)...)
				cmd.Stdin = strings.NewReader("kcat\n")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("kcat -P: %v\n%s", err, out)
				}
				out, err := exec.CommandContext(ctx, kcat, append(args, "-C", "-t", topic, "-o", "beginning", "-e", "-q")...).Output()
				if err != nil {
					t.Fatalf("kcat -C: %v\n%s", err, out)
				}
				lines := strings.Fields(string(out))
				if len(lines) != 12 || lines[10] != "sarama" || lines[11] != "kcat" {
					t.Fatalf("kcat read %q, want franz-0..9, sarama, kcat", lines)
				}

				// A wrong password is refused.
				bad := newClient(t, addr, append(sb.franzOpts(listener, "alice", mech)[1:], kgo.SASL(franzSASL("mallory", mech)))...)
				if err := bad.Ping(ctx); err == nil {
					t.Fatal("unknown user authenticated")
				}
			})
		}
	}
}

// rawConn speaks the Kafka protocol on a plain TCP connection.
type rawConn struct {
	t    testing.TB
	nc   net.Conn
	br   *bufio.Reader
	corr int32
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// send writes req; roundTrip also reads its response (nil, err when the
// broker closed the connection instead).
func (c *rawConn) send(req kmsg.Request) {
	c.corr++
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(c.corr))
	b = append(binary.BigEndian.AppendUint16(b, 3), "raw"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawConn) roundTrip(req kmsg.Request) (kmsg.Response, error) {
	c.send(req)
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.br, body); err != nil {
		return nil, err
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	body = body[4:] // correlation id
	if resp.IsFlexible() && req.Key() != 18 {
		body = body[1:] // empty header tags
	}
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("decode %T: %v", resp, err)
	}
	return resp, nil
}

// closed asserts that the broker closes the connection without answering.
func (c *rawConn) closed(what string) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.br.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("%s: connection still open (read %d bytes, %v)", what, n, err)
	}
}

func (c *rawConn) handshake(mech string) {
	c.t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version, req.Mechanism = 1, mech
	resp, err := c.roundTrip(req)
	if err != nil || resp.(*kmsg.SASLHandshakeResponse).ErrorCode != 0 {
		c.t.Fatalf("handshake %s: %v %+v", mech, err, resp)
	}
}

func (c *rawConn) authenticate(msg []byte) (*kmsg.SASLAuthenticateResponse, error) {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.Version, req.SASLAuthBytes = 2, msg
	resp, err := c.roundTrip(req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.SASLAuthenticateResponse), nil
}

// refused asserts an authentication failure answered and then the
// connection closed.
func (c *rawConn) refused(what string, resp *kmsg.SASLAuthenticateResponse, err error) {
	c.t.Helper()
	if err == nil && resp.ErrorCode == 0 {
		c.t.Fatalf("%s: authentication succeeded", what)
	}
	c.closed(what)
}

// scramClient is a client side of RFC 5802, for raw tests and sarama.
type scramClient struct {
	mech                   string
	user, pass, nonce      string
	clientFirst, serverSig string
	step                   int
	finalMsg               string
	forceNonce, wrongNonce bool
}

func (s *scramClient) hash() func() hash.Hash {
	if s.mech == "SCRAM-SHA-512" {
		return sha512.New
	}
	return sha256.New
}

func (s *scramClient) Begin(user, pass, _ string) error {
	s.user, s.pass = user, pass
	if !s.forceNonce {
		s.nonce = base64.RawStdEncoding.EncodeToString(randBytes(18))
	}
	s.step = 0
	return nil
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func (s *scramClient) Step(challenge string) (string, error) {
	s.step++
	switch s.step {
	case 1:
		s.clientFirst = "n=" + s.user + ",r=" + s.nonce
		return "n,," + s.clientFirst, nil
	case 2:
		attrs := map[string]string{}
		for _, kv := range strings.Split(challenge, ",") {
			k, v, _ := strings.Cut(kv, "=")
			attrs[k] = v
		}
		salt, _ := base64.StdEncoding.DecodeString(attrs["s"])
		var iters int
		fmt.Sscan(attrs["i"], &iters)
		h := s.hash()
		salted, err := pbkdf2.Key(h, s.pass, salt, iters, h().Size())
		if err != nil {
			return "", err
		}
		nonce := attrs["r"]
		if s.wrongNonce {
			nonce = s.nonce + "forged"
		}
		withoutProof := "c=biws,r=" + nonce
		authMsg := s.clientFirst + "," + challenge + "," + withoutProof
		ck := mac(h, salted, "Client Key")
		sh := h()
		sh.Write(ck)
		sig := mac(h, sh.Sum(nil), authMsg)
		for i := range ck {
			ck[i] ^= sig[i]
		}
		s.serverSig = base64.StdEncoding.EncodeToString(mac(h, mac(h, salted, "Server Key"), authMsg))
		s.finalMsg = withoutProof + ",p=" + base64.StdEncoding.EncodeToString(ck)
		return s.finalMsg, nil
	case 3:
		if challenge != "v="+s.serverSig {
			return "", fmt.Errorf("server signature %q, want v=%s", challenge, s.serverSig)
		}
		return "", nil
	}
	return "", errors.New("scram: too many steps")
}

func (s *scramClient) Done() bool { return s.step >= 3 }

func mac(h func() hash.Hash, key []byte, msg string) []byte {
	m := hmac.New(h, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// TestSASLRefusals: wrong passwords, a wrong SCRAM nonce, a replayed
// final message and a request before authentication are refused and the
// connection closed.
func TestSASLRefusals(t *testing.T) {
	sb := startSecure(t, false, nil)
	addScramUsers(t, sb.ListenerAddr("PLAINTEXT"), nil, "alice")
	addr := sb.ListenerAddr("SASL_PLAINTEXT")

	t.Run("request before authentication", func(t *testing.T) {
		c := dialRaw(t, addr)
		av, err := c.roundTrip(kmsg.NewPtrApiVersionsRequest()) // allowed
		if err != nil || av.(*kmsg.ApiVersionsResponse).ErrorCode != 0 {
			t.Fatalf("ApiVersions before authentication: %v", err)
		}
		c.send(kmsg.NewPtrMetadataRequest())
		c.closed("Metadata before authentication")

		c = dialRaw(t, addr)
		c.handshake("PLAIN") // handshake done, not authenticated yet
		c.send(kmsg.NewPtrMetadataRequest())
		c.closed("Metadata between handshake and authentication")
	})
	t.Run("wrong PLAIN password", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.handshake("PLAIN")
		resp, err := c.authenticate([]byte("\x00alice\x00wrong"))
		if err == nil && resp.ErrorCode != kerr.SaslAuthenticationFailed.Code {
			t.Fatalf("error code %d, want SASL_AUTHENTICATION_FAILED", resp.ErrorCode)
		}
		c.refused("wrong PLAIN password", resp, err)
	})
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			scramRun := func(c *rawConn, sc *scramClient) (*kmsg.SASLAuthenticateResponse, error) {
				c.handshake(mech)
				sc.Begin("alice", "alice-secret", "")
				first, _ := sc.Step("")
				resp, err := c.authenticate([]byte(first))
				if err != nil || resp.ErrorCode != 0 {
					return resp, err
				}
				final, err := sc.Step(string(resp.SASLAuthBytes))
				if err != nil {
					t.Fatal(err)
				}
				return c.authenticate([]byte(final))
			}
			// Wrong password.
			c := dialRaw(t, addr)
			sc := &scramClient{mech: mech}
			c.handshake(mech)
			sc.Begin("alice", "wrong", "")
			first, _ := sc.Step("")
			resp, err := c.authenticate([]byte(first))
			if err != nil || resp.ErrorCode != 0 {
				t.Fatalf("client-first: %v %+v", err, resp)
			}
			final, _ := sc.Step(string(resp.SASLAuthBytes))
			resp, err = c.authenticate([]byte(final))
			c.refused("wrong SCRAM password", resp, err)

			// Wrong nonce in the final message.
			c = dialRaw(t, addr)
			resp, err = scramRun(c, &scramClient{mech: mech, wrongNonce: true})
			c.refused("wrong SCRAM nonce", resp, err)

			// A good exchange, then its final message replayed: on the
			// same connection, and on a new one with the same client nonce.
			c = dialRaw(t, addr)
			good := &scramClient{mech: mech}
			resp, err = scramRun(c, good)
			if err != nil || resp.ErrorCode != 0 {
				t.Fatalf("good exchange: %v %+v", err, resp)
			}
			if _, err := good.Step(string(resp.SASLAuthBytes)); err != nil {
				t.Fatal(err)
			}
			resp, err = c.authenticate([]byte(good.finalMsg))
			c.refused("final message replayed on the same connection", resp, err)

			c = dialRaw(t, addr)
			c.handshake(mech)
			first = "n,," + good.clientFirst
			if resp, err := c.authenticate([]byte(first)); err != nil || resp.ErrorCode != 0 {
				t.Fatalf("client-first: %v", err)
			}
			resp, err = c.authenticate([]byte(good.finalMsg))
			c.refused("final message replayed on a new connection", resp, err)
		})
	}
}

// TestPreAuthFrameCap: before authentication a frame above 512 KiB closes
// the connection before the broker allocates it; 1,000 such connections
// leave the broker's heap flat.
func TestPreAuthFrameCap(t *testing.T) {
	sb := startSecure(t, false, nil)
	addr := sb.ListenerAddr("SASL_PLAINTEXT")
	frame := make([]byte, 4+1024)
	binary.BigEndian.PutUint32(frame, 600<<10)

	c := dialRaw(t, addr)
	if _, err := c.nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	c.closed("600 KiB frame before authentication")

	// The same frame after authentication is fine (socket.request.max.bytes).
	ok := dialRaw(t, addr)
	ok.handshake("PLAIN")
	if resp, err := ok.authenticate([]byte("\x00alice\x00alice-secret")); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("authenticate: %v %+v", err, resp)
	}
	big := kmsg.NewPtrMetadataRequest()
	big.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(strings.Repeat("x", 200) + "-not-valid!")}}
	for len(big.Topics) < 3500 { // ~700 KiB of topic names
		big.Topics = append(big.Topics, big.Topics[0])
	}
	if _, err := ok.roundTrip(big); err != nil {
		t.Fatalf("a 700 KiB request after authentication: %v", err)
	}

	allocBefore, before := memStats()
	conns := make([]net.Conn, 0, 1000)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 1000 {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	closed := 0
	for _, nc := range conns {
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	allocAfter, after := memStats()
	t.Logf("heap in use before %d MiB, after 1,000 oversized pre-auth frames %d MiB; %d MiB allocated meanwhile; %d connections closed",
		before>>20, after>>20, (allocAfter-allocBefore)>>20, closed)
	if closed != len(conns) {
		t.Fatalf("%d of %d connections closed", closed, len(conns))
	}
	// Allocating the frames would take 600 MB (broker and test share
	// this process); allow 64 MiB of noise.
	if after > before+64<<20 || allocAfter-allocBefore > 64<<20 {
		t.Fatalf("heap in use %d -> %d bytes, %d bytes allocated", before, after, allocAfter-allocBefore)
	}
}

// memStats returns the bytes allocated so far and the heap in use.
func memStats() (total, inUse uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc, ms.HeapInuse
}
