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
	"maps"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/tandem-kafka/tandem/plugins/mirror"
	mirroradmin "github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/share"
	"github.com/tandem-kafka/tandem/plugins/txn"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// secureBroker is an in-process broker with PLAINTEXT, SASL_PLAINTEXT and
// SASL_SSL listeners, TLS from a test CA generated here.
type secureBroker struct {
	*server.Broker
	caFile string
	caPool *x509.CertPool
}

// startSecure starts the broker with every plugin tandem serve wires: the
// security plugin (authorizing when authz is set), groups, transactions
// and mirroring.
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
		// Many tests fail authentications on purpose; the throttling of
		// failures has its own test (TestSASLThrottle).
		"connection.failed.authentication.delay.ms": "0",
		// Small internal topics: this broker is started many times.
		"mirror.topic.num.partitions":          "4",
		"transaction.state.log.num.partitions": "4",
		"offsets.topic.num.partitions":         "4",
	}
	for k, v := range extra {
		props[k] = v
	}
	p, err := acl.New(props)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	plugins := []any{p, groups.New(props, quiet), share.New(props, quiet), txn.New(props, quiet), mirror.New(props, quiet)}
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
	adm := kadm.NewClient(tandemtest.Client(t, addr, opts...))
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
	tandemtest.Long(t) // three clients, kcat among them, on every mechanism: the full tier only
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
				tandemtest.CreateTopic(t, plainAddr, topic, 1)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()

				// franz-go: produce 10, consume them back. Metadata must
				// advertise this listener or the client would dial the
				// wrong one after bootstrapping.
				cl := tandemtest.Client(t, addr, append(sb.franzOpts(listener, "alice", mech), kgo.ConsumeTopics(topic))...)
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

				// A consumer group: FindCoordinator must answer with this
				// listener's address too.
				if listener == "SASL_SSL" && mech == "SCRAM-SHA-512" {
					gc := tandemtest.Client(t, addr, append(sb.franzOpts(listener, "alice", mech), kgo.ConsumeTopics(topic),
						kgo.ConsumerGroup("g-"+topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
					for n := 0; n < 12; {
						fs := gc.PollFetches(ctx)
						if err := fs.Err0(); err != nil {
							t.Fatalf("group consumer: %v", err)
						}
						n += fs.NumRecords()
					}
				}

				// A wrong password is refused.
				bad := tandemtest.Client(t, addr, append(sb.franzOpts(listener, "alice", mech)[1:], kgo.SASL(franzSASL("mallory", mech)))...)
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

// grant is an ACL binding the matrix gives to the test principal.
type grant struct {
	typ  kmsg.ACLResourceType
	name string
	op   kmsg.ACLOperation
}

// matrixEntry says how to exercise one API key as the test principal.
type matrixEntry struct {
	open bool    // served to any authenticated principal
	need []grant // the bindings that authorize it
	req  func() kmsg.Request
	// code extracts the error code that decides the outcome; when
	// authorized it must be 0 or one of ok.
	code func(kmsg.Response) int16
	ok   []int16
	// each: without any one of need (the others granted) the request
	// is refused too.
	each bool
}

func authFailure(code int16) bool {
	switch code {
	case kerr.TopicAuthorizationFailed.Code, kerr.GroupAuthorizationFailed.Code,
		kerr.ClusterAuthorizationFailed.Code, kerr.TransactionalIDAuthorizationFailed.Code, mirrorproto.ErrMirrorAuthorizationFailed.Code:
		return true
	}
	return false
}

const (
	mTopic = "m-topic"
	mGroup = "m-group"
)

func topicG(op kmsg.ACLOperation) grant { return grant{kmsg.ACLResourceTypeTopic, mTopic, op} }
func groupG(op kmsg.ACLOperation) grant { return grant{kmsg.ACLResourceTypeGroup, mGroup, op} }
func clusterG(op kmsg.ACLOperation) grant {
	return grant{kmsg.ACLResourceTypeCluster, "kafka-cluster", op}
}

// aclMatrix has an entry for every API key a broker with every plugin
// serves. topicID is m-topic's ID; seq makes names unique per call.
func aclMatrix(topicID [16]byte, seq func() string) map[int16]matrixEntry {
	batch, _ := tandemtestBatch()
	first := func(codes ...int16) int16 {
		for _, c := range codes {
			if c != 0 {
				return c
			}
		}
		return 0
	}
	return map[int16]matrixEntry{
		0: {need: []grant{topicG(kmsg.ACLOperationWrite)}, req: func() kmsg.Request {
			r := kmsg.NewPtrProduceRequest()
			r.Acks, r.TimeoutMillis = 1, 5000
			t := kmsg.NewProduceRequestTopic()
			t.Topic, t.TopicID = mTopic, topicID
			p := kmsg.NewProduceRequestTopicPartition()
			p.Records = batch
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode }},
		1: {need: []grant{topicG(kmsg.ACLOperationRead)}, req: func() kmsg.Request {
			r := kmsg.NewPtrFetchRequest()
			r.ReplicaID, r.MaxBytes, r.SessionEpoch = -1, 1<<20, -1
			r.ReplicaState.ID = -1
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = mTopic, topicID
			p := kmsg.NewFetchRequestTopicPartition()
			p.PartitionMaxBytes = 1 << 20
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		}, code: func(r kmsg.Response) int16 {
			fr := r.(*kmsg.FetchResponse)
			return first(fr.ErrorCode, fr.Topics[0].Partitions[0].ErrorCode)
		}},
		2: {need: []grant{topicG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrListOffsetsRequest()
			r.ReplicaID = -1
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = mTopic
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Timestamp = -1
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode }},
		3: {need: []grant{topicG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrMetadataRequest()
			r.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(mTopic)}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.MetadataResponse).Topics[0].ErrorCode }},
		8: {need: []grant{groupG(kmsg.ACLOperationRead), topicG(kmsg.ACLOperationRead)}, req: func() kmsg.Request {
			r := kmsg.NewPtrOffsetCommitRequest()
			r.Group, r.Generation = mGroup, -1
			t := kmsg.NewOffsetCommitRequestTopic()
			t.Topic, t.TopicID = mTopic, topicID
			p := kmsg.NewOffsetCommitRequestTopicPartition()
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode }},
		9: {need: []grant{groupG(kmsg.ACLOperationDescribe), topicG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrOffsetFetchRequest()
			r.Group = mGroup
			t := kmsg.NewOffsetFetchRequestTopic()
			t.Topic, t.Partitions = mTopic, []int32{0}
			r.Topics = append(r.Topics, t)
			g := kmsg.NewOffsetFetchRequestGroup()
			g.Group = mGroup
			gt := kmsg.NewOffsetFetchRequestGroupTopic()
			gt.Topic, gt.TopicID, gt.Partitions = mTopic, topicID, []int32{0}
			g.Topics = append(g.Topics, gt)
			r.Groups = append(r.Groups, g)
			return r
		}, code: func(r kmsg.Response) int16 {
			fr := r.(*kmsg.OffsetFetchResponse)
			if len(fr.Groups) > 0 {
				g := fr.Groups[0]
				if g.ErrorCode != 0 || len(g.Topics) == 0 {
					return g.ErrorCode
				}
				return g.Topics[0].Partitions[0].ErrorCode
			}
			if fr.ErrorCode != 0 {
				return fr.ErrorCode
			}
			return fr.Topics[0].Partitions[0].ErrorCode
		}},
		10: {need: []grant{groupG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.CoordinatorKey, r.CoordinatorKeys = mGroup, []string{mGroup}
			return r
		}, code: func(r kmsg.Response) int16 {
			fr := r.(*kmsg.FindCoordinatorResponse)
			if len(fr.Coordinators) > 0 {
				return fr.Coordinators[0].ErrorCode
			}
			return fr.ErrorCode
		}},
		11: {need: []grant{{kmsg.ACLResourceTypeGroup, mGroup + "-join", kmsg.ACLOperationRead}}, req: func() kmsg.Request {
			r := kmsg.NewPtrJoinGroupRequest()
			r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = mGroup+"-join", 10000, 10000, "consumer"
			r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.JoinGroupResponse).ErrorCode }, ok: []int16{kerr.MemberIDRequired.Code}},
		12: {need: []grant{groupG(kmsg.ACLOperationRead)}, req: func() kmsg.Request {
			r := kmsg.NewPtrHeartbeatRequest()
			r.Group, r.MemberID = mGroup, "nobody"
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.HeartbeatResponse).ErrorCode }, ok: []int16{kerr.UnknownMemberID.Code}},
		13: {need: []grant{groupG(kmsg.ACLOperationRead)}, req: func() kmsg.Request {
			r := kmsg.NewPtrLeaveGroupRequest()
			r.Group, r.MemberID = mGroup, "nobody"
			r.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "nobody"}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.LeaveGroupResponse).ErrorCode }, ok: []int16{kerr.UnknownMemberID.Code}},
		14: {need: []grant{groupG(kmsg.ACLOperationRead)}, req: func() kmsg.Request {
			r := kmsg.NewPtrSyncGroupRequest()
			r.Group, r.MemberID = mGroup, "nobody"
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.SyncGroupResponse).ErrorCode }, ok: []int16{kerr.UnknownMemberID.Code}},
		15: {need: []grant{groupG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.Groups = []string{mGroup}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode }},
		16: {need: []grant{groupG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return kmsg.NewPtrListGroupsRequest()
		}, code: func(r kmsg.Response) int16 {
			lr := r.(*kmsg.ListGroupsResponse)
			for _, g := range lr.Groups {
				if g.Group == mGroup {
					return lr.ErrorCode
				}
			}
			return kerr.GroupAuthorizationFailed.Code // hidden
		}},
		68: {need: []grant{{kmsg.ACLResourceTypeGroup, mGroup + "-848", kmsg.ACLOperationRead}, topicG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			r.Group, r.MemberID, r.RebalanceTimeoutMillis = mGroup+"-848", "m848-"+seq(), 10000
			r.SubscribedTopicNames = []string{mTopic}
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{} // a joining member owns nothing
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode }},
		69: {need: []grant{groupG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrConsumerGroupDescribeRequest()
			r.Groups = []string{mGroup}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.ConsumerGroupDescribeResponse).Groups[0].ErrorCode }, ok: []int16{kerr.GroupIDNotFound.Code}},
		17: {open: true, req: func() kmsg.Request {
			r := kmsg.NewPtrSASLHandshakeRequest()
			r.Mechanism = "PLAIN"
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.SASLHandshakeResponse).ErrorCode }},
		18: {open: true, req: func() kmsg.Request { return kmsg.NewPtrApiVersionsRequest() },
			code: func(r kmsg.Response) int16 { return r.(*kmsg.ApiVersionsResponse).ErrorCode }},
		19: {need: []grant{{kmsg.ACLResourceTypeTopic, "m-new-", kmsg.ACLOperationCreate}}, req: func() kmsg.Request {
			r := kmsg.NewPtrCreateTopicsRequest()
			r.TimeoutMillis = 5000
			t := kmsg.NewCreateTopicsRequestTopic()
			t.Topic, t.NumPartitions, t.ReplicationFactor = "m-new-"+seq(), 1, 1
			r.Topics = append(r.Topics, t)
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode }},
		20: {need: []grant{{kmsg.ACLResourceTypeTopic, "m-del", kmsg.ACLOperationDelete}}, req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteTopicsRequest()
			r.TimeoutMillis = 5000
			r.TopicNames = []string{"m-del"}
			r.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("m-del")}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode }},
		21: {need: []grant{topicG(kmsg.ACLOperationDelete)}, req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteRecordsRequest()
			r.TimeoutMillis = 5000
			t := kmsg.NewDeleteRecordsRequestTopic()
			t.Topic = mTopic
			t.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 0}}
			r.Topics = append(r.Topics, t)
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0].ErrorCode }},
		22: {need: []grant{clusterG(kmsg.ACLOperationIdempotentWrite)}, req: func() kmsg.Request {
			r := kmsg.NewPtrInitProducerIDRequest()
			r.TransactionTimeoutMillis = 60000
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.InitProducerIDResponse).ErrorCode }},
		23: {need: []grant{topicG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrOffsetForLeaderEpochRequest()
			r.ReplicaID = -1
			t := kmsg.NewOffsetForLeaderEpochRequestTopic()
			t.Topic = mTopic
			t.Partitions = []kmsg.OffsetForLeaderEpochRequestTopicPartition{{Partition: 0, CurrentLeaderEpoch: -1, LeaderEpoch: 0}}
			r.Topics = append(r.Topics, t)
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode
		}},
		28: {need: []grant{{kmsg.ACLResourceTypeTransactionalId, "m-txn", kmsg.ACLOperationWrite}, groupG(kmsg.ACLOperationRead), topicG(kmsg.ACLOperationRead)},
			req: func() kmsg.Request {
				r := kmsg.NewPtrTxnOffsetCommitRequest()
				r.TransactionalID, r.Group, r.ProducerID, r.Generation = "m-txn", mGroup, 1, -1
				r.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: mTopic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}
				return r
			}, code: func(r kmsg.Response) int16 {
				return r.(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
				// v5+ (transaction.version 2) adds the offsets partition
				// to producer 1's transaction, which it does not own.
			}, ok: []int16{kerr.InvalidProducerIDMapping.Code, kerr.InvalidProducerEpoch.Code}},
		29: {need: []grant{clusterG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeACLsRequest()
			r.ResourceType, r.ResourcePatternType, r.Operation, r.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DescribeACLsResponse).ErrorCode }},
		30: {need: []grant{clusterG(kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			r := kmsg.NewPtrCreateACLsRequest()
			c := kmsg.NewCreateACLsRequestCreation()
			c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, "m-unused", kmsg.ACLResourcePatternTypeLiteral
			c.Principal, c.Host, c.Operation, c.PermissionType = "User:nobody", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
			r.Creations = append(r.Creations, c)
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.CreateACLsResponse).Results[0].ErrorCode }},
		31: {need: []grant{clusterG(kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteACLsRequest()
			f := kmsg.NewDeleteACLsRequestFilter()
			f.ResourceType, f.ResourcePatternType, f.Operation, f.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			f.Principal = kmsg.StringPtr("User:nobody")
			r.Filters = append(r.Filters, f)
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DeleteACLsResponse).Results[0].ErrorCode }},
		32: {need: []grant{topicG(kmsg.ACLOperationDescribeConfigs)}, req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeConfigsRequest()
			r.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: mTopic}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode }},
		33: {need: []grant{topicG(kmsg.ACLOperationAlterConfigs)}, req: func() kmsg.Request {
			r := kmsg.NewPtrAlterConfigsRequest()
			r.ValidateOnly = true
			r.Resources = []kmsg.AlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: mTopic,
				Configs: []kmsg.AlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("100000")}}}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.AlterConfigsResponse).Resources[0].ErrorCode }},
		35: {need: []grant{clusterG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return kmsg.NewPtrDescribeLogDirsRequest()
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DescribeLogDirsResponse).ErrorCode }},
		36: {open: true, req: func() kmsg.Request {
			return kmsg.NewPtrSASLAuthenticateRequest() // without a handshake: ILLEGAL_SASL_STATE, not an ACL matter
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.SASLAuthenticateResponse).ErrorCode }, ok: []int16{kerr.IllegalSaslState.Code}},
		37: {need: []grant{topicG(kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			r := kmsg.NewPtrCreatePartitionsRequest()
			r.ValidateOnly, r.TimeoutMillis = true, 5000
			r.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: mTopic, Count: 2}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode }},
		43: {need: []grant{clusterG(kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			r := kmsg.NewPtrElectLeadersRequest()
			r.TimeoutMillis = 5000
			r.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: mTopic, Partitions: []int32{0}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			resp := r.(*kmsg.ElectLeadersResponse)
			if resp.ErrorCode != 0 {
				return resp.ErrorCode
			}
			return resp.Topics[0].Partitions[0].ErrorCode
		}, ok: []int16{kerr.ElectionNotNeeded.Code}}, // authorized: the only replica leads
		42: {need: []grant{{kmsg.ACLResourceTypeGroup, "m-del-group", kmsg.ACLOperationDelete}}, req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteGroupsRequest()
			r.Groups = []string{"m-del-group"}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode }},
		44: {need: []grant{topicG(kmsg.ACLOperationAlterConfigs)}, req: func() kmsg.Request {
			r := kmsg.NewPtrIncrementalAlterConfigsRequest()
			r.ValidateOnly = true
			r.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: mTopic,
				Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("100000")}}}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode }},
		45: {need: []grant{clusterG(kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			r := kmsg.NewPtrAlterPartitionAssignmentsRequest()
			r.Topics = []kmsg.AlterPartitionAssignmentsRequestTopic{{Topic: mTopic,
				Partitions: []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: 0}}}} // no replicas: cancel
			return r
		}, code: func(r kmsg.Response) int16 {
			resp := r.(*kmsg.AlterPartitionAssignmentsResponse)
			return first(resp.ErrorCode, resp.Topics[0].Partitions[0].ErrorCode)
		}, ok: []int16{kerr.NoReassignmentInProgress.Code}}, // authorized: nothing to cancel
		46: {need: []grant{clusterG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return kmsg.NewPtrListPartitionReassignmentsRequest()
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.ListPartitionReassignmentsResponse).ErrorCode }},
		47: {need: []grant{groupG(kmsg.ACLOperationDelete), topicG(kmsg.ACLOperationRead)}, req: func() kmsg.Request {
			r := kmsg.NewPtrOffsetDeleteRequest()
			r.Group = mGroup
			r.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: mTopic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			or := r.(*kmsg.OffsetDeleteResponse)
			if or.ErrorCode != 0 || len(or.Topics) == 0 {
				return or.ErrorCode
			}
			return or.Topics[0].Partitions[0].ErrorCode
		}},
		48: {need: []grant{clusterG(kmsg.ACLOperationDescribeConfigs)}, req: func() kmsg.Request {
			return kmsg.NewPtrDescribeClientQuotasRequest()
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DescribeClientQuotasResponse).ErrorCode }},
		49: {need: []grant{clusterG(kmsg.ACLOperationAlterConfigs)}, req: func() kmsg.Request {
			r := kmsg.NewPtrAlterClientQuotasRequest()
			r.ValidateOnly = true
			r.Entries = []kmsg.AlterClientQuotasRequestEntry{{
				Entity: []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "client-id", Name: kmsg.StringPtr("x")}},
				Ops:    []kmsg.AlterClientQuotasRequestEntryOp{{Key: "producer_byte_rate", Value: 1000}},
			}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.AlterClientQuotasResponse).Entries[0].ErrorCode }},
		50: {need: []grant{clusterG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DescribeUserSCRAMCredentialsResponse).ErrorCode }},
		51: {need: []grant{clusterG(kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			r := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
			r.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{{Name: "carol", Mechanism: 1, Iterations: 4096,
				Salt: []byte("0123456789abcdef"), SaltedPassword: make([]byte, 32)}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.AlterUserSCRAMCredentialsResponse).Results[0].ErrorCode }},
		60: {need: []grant{clusterG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return kmsg.NewPtrDescribeClusterRequest()
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DescribeClusterResponse).ErrorCode }},
		61: {need: []grant{topicG(kmsg.ACLOperationRead)}, req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeProducersRequest()
			r.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: mTopic, Partitions: []int32{0}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.DescribeProducersResponse).Topics[0].Partitions[0].ErrorCode
		}},
		75: {need: []grant{topicG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeTopicPartitionsRequest()
			r.Topics = []kmsg.DescribeTopicPartitionsRequestTopic{{Topic: mTopic}}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.DescribeTopicPartitionsResponse).Topics[0].ErrorCode }},
	}
}

func tandemtestBatch() ([]byte, error) {
	return recordbatch.Build(0, recordbatch.KV{Key: []byte("k"), Value: []byte("v")})
}

// saslRaw is a raw connection authenticated with PLAIN as user.
func saslRaw(t testing.TB, addr, user string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	c.handshake("PLAIN")
	resp, err := c.authenticate([]byte("\x00" + user + "\x00" + user + "-secret"))
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("authenticate %s: %v %+v", user, err, resp)
	}
	return c
}

// servedAPIs asks the broker which keys and versions it serves.
func servedAPIs(t testing.TB, c *rawConn) map[int16]kmsg.ApiVersionsResponseApiKey {
	t.Helper()
	av, err := c.roundTrip(kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		t.Fatal(err)
	}
	served := map[int16]kmsg.ApiVersionsResponseApiKey{}
	for _, k := range av.(*kmsg.ApiVersionsResponse).ApiKeys {
		served[k.ApiKey] = k
	}
	return served
}

// versioned sets req to the highest version both the broker and kmsg know.
func versioned(req kmsg.Request, served map[int16]kmsg.ApiVersionsResponseApiKey) kmsg.Request {
	req.SetVersion(min(served[req.Key()].MaxVersion, req.MaxVersion()))
	return req
}

// aclRequest creates (or, with del, deletes) bindings for principal.
func aclRequest(t testing.TB, admin *rawConn, served map[int16]kmsg.ApiVersionsResponseApiKey, principal string, perm kmsg.ACLPermissionType, pat kmsg.ACLResourcePatternType, gs []grant) {
	t.Helper()
	if len(gs) == 0 {
		return
	}
	req := kmsg.NewPtrCreateACLsRequest()
	for _, g := range gs {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = g.typ, g.name, pat
		if strings.HasSuffix(g.name, "-") { // m-new-: names made per call
			c.ResourcePatternType = kmsg.ACLResourcePatternTypePrefixed
		}
		c.Principal, c.Host, c.Operation, c.PermissionType = principal, "*", g.op, perm
		req.Creations = append(req.Creations, c)
	}
	resp, err := admin.roundTrip(versioned(req, served))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.(*kmsg.CreateACLsResponse).Results {
		if r.ErrorCode != 0 {
			t.Fatalf("create acls %+v: %v %v", gs, kerr.ErrorForCode(r.ErrorCode), deref(r.ErrorMessage))
		}
	}
}

func dropACLs(t testing.TB, admin *rawConn, served map[int16]kmsg.ApiVersionsResponseApiKey, principal string) {
	t.Helper()
	req := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType, f.Operation, f.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	f.Principal = &principal
	req.Filters = append(req.Filters, f)
	resp, err := admin.roundTrip(versioned(req, served))
	if err != nil || resp.(*kmsg.DeleteACLsResponse).Results[0].ErrorCode != 0 {
		t.Fatalf("delete acls of %s: %v", principal, err)
	}
}

// TestACLMatrix: for every API key the broker serves (from its
// ApiVersions), the principal bob is refused without the bindings Kafka
// requires and served with exactly them. A key without an entry fails.
func TestACLMatrix(t *testing.T) {
	sb := startSecure(t, true, nil)
	addr := sb.ListenerAddr("SASL_PLAINTEXT")
	admin := saslRaw(t, addr, "admin") // a super user
	served := servedAPIs(t, admin)

	// Fixtures, made by the super user: the topic with a record, a group
	// with a committed offset, a topic and a group to delete.
	adminOpts := []kgo.Opt{kgo.SASL(franzSASL("admin", "PLAIN"))}
	createTopicAs(t, addr, "admin", mTopic, "m-del")
	cl := tandemtest.Client(t, addr, adminOpts...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: mTopic, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	for _, g := range []string{mGroup, "m-del-group"} {
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: mTopic, Partition: 0, At: 1, LeaderEpoch: -1})
		if r, err := adm.CommitOffsets(ctx, g, os); err != nil || r.Error() != nil {
			t.Fatalf("commit offsets for %s: %v %v", g, err, r.Error())
		}
	}
	md, err := adm.Metadata(ctx, mTopic)
	if err != nil {
		t.Fatal(err)
	}
	topicID := md.Topics[mTopic].ID
	n := 0
	seq := func() string { n++; return fmt.Sprint(n) }
	matrix := aclMatrix(topicID, seq)
	maps.Copy(matrix, txnMirrorMatrix(topicID, seq))
	txnMirrorFixtures(t, addr, adminOpts)
	maps.Copy(matrix, shareMatrix(t, cl, topicID, seq))
	shareMatrixFixtures(t, cl)

	for key := range served {
		e, ok := matrix[key]
		if !ok {
			t.Errorf("api key %d (%s) is served but has no ACL matrix entry", key, apiName(key))
			continue
		}
		t.Run(apiName(key), func(t *testing.T) {
			bob := saslRaw(t, addr, "bob")
			do := func() int16 {
				resp, err := bob.roundTrip(versioned(e.req(), served))
				if err != nil {
					t.Fatalf("%s: connection closed: %v", kmsg.NameForKey(key), err)
				}
				return e.code(resp)
			}
			if !e.open {
				if code := do(); !authFailure(code) {
					t.Fatalf("without ACLs: error %v, want an authorization failure", kerr.ErrorForCode(code))
				}
				for i := range e.need {
					if !e.each {
						break
					}
					others := slices.Delete(slices.Clone(e.need), i, i+1)
					aclRequest(t, admin, served, "User:bob", kmsg.ACLPermissionTypeAllow, kmsg.ACLResourcePatternTypeLiteral, others)
					if code := do(); !authFailure(code) {
						t.Fatalf("without %+v: error %v, want an authorization failure", e.need[i], kerr.ErrorForCode(code))
					}
					dropACLs(t, admin, served, "User:bob")
				}
				aclRequest(t, admin, served, "User:bob", kmsg.ACLPermissionTypeAllow, kmsg.ACLResourcePatternTypeLiteral, e.need)
				defer dropACLs(t, admin, served, "User:bob")
			}
			if code := do(); code != 0 && !slices.Contains(e.ok, code) {
				t.Fatalf("with %+v: error %v", e.need, kerr.ErrorForCode(code))
			}
		})
	}
}

// TestACLSemantics: DENY wins over ALLOW, PREFIXED patterns, super users,
// wildcard principals, and KIP-679's idempotent producer with WRITE on a
// topic only.
func TestACLSemantics(t *testing.T) {
	sb := startSecure(t, true, nil)
	addr := sb.ListenerAddr("SASL_PLAINTEXT")
	admin := saslRaw(t, addr, "admin")
	served := servedAPIs(t, admin)
	createTopicAs(t, addr, "admin", "pre-a", "pre-b", "other")
	batch, _ := tandemtestBatch()
	produce := func(c *rawConn, topic string) int16 {
		r := kmsg.NewPtrProduceRequest()
		r.Acks, r.TimeoutMillis = 1, 5000
		r.SetVersion(9) // by name
		r.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Records: batch}}}}
		resp, err := c.roundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	want := func(what string, got int16, want *kerr.Error) {
		t.Helper()
		if (want == nil && got != 0) || (want != nil && got != want.Code) {
			t.Fatalf("%s: error %v, want %v", what, kerr.ErrorForCode(got), want)
		}
	}
	bob := saslRaw(t, addr, "bob")
	aclRequest(t, admin, served, "User:bob", kmsg.ACLPermissionTypeAllow, kmsg.ACLResourcePatternTypePrefixed,
		[]grant{{kmsg.ACLResourceTypeTopic, "pre-", kmsg.ACLOperationWrite}})
	want("prefixed ALLOW", produce(bob, "pre-a"), nil)
	want("outside the prefix", produce(bob, "other"), kerr.TopicAuthorizationFailed)
	aclRequest(t, admin, served, "User:bob", kmsg.ACLPermissionTypeDeny, kmsg.ACLResourcePatternTypeLiteral,
		[]grant{{kmsg.ACLResourceTypeTopic, "pre-b", kmsg.ACLOperationAll}})
	want("DENY ALL over prefixed ALLOW", produce(bob, "pre-b"), kerr.TopicAuthorizationFailed)
	want("ALLOW still applies elsewhere", produce(bob, "pre-a"), nil)
	want("super user without ACLs", produce(admin, "other"), nil)

	// KIP-679: WRITE on some topic allows an idempotent InitProducerId;
	// alice, without any binding, is refused.
	ipid := func(c *rawConn) int16 {
		resp, err := c.roundTrip(versioned(kmsg.NewPtrInitProducerIDRequest(), served))
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.InitProducerIDResponse).ErrorCode
	}
	want("idempotent producer with WRITE on a prefix", ipid(bob), nil)
	alice := saslRaw(t, addr, "alice")
	want("idempotent producer without ACLs", ipid(alice), kerr.ClusterAuthorizationFailed)

	// Metadata for all topics lists only what the principal may describe.
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	resp, _ := bob.roundTrip(md)
	var names []string
	for _, tp := range resp.(*kmsg.MetadataResponse).Topics {
		names = append(names, *tp.Topic)
	}
	if !slices.Equal(names, []string{"pre-a"}) { // WRITE implies DESCRIBE; pre-b is denied ALL
		t.Fatalf("bob sees topics %v, want [pre-a]", names)
	}

	// A wildcard principal, with host matching.
	aclRequest(t, admin, served, "User:*", kmsg.ACLPermissionTypeAllow, kmsg.ACLResourcePatternTypeLiteral,
		[]grant{{kmsg.ACLResourceTypeTopic, "other", kmsg.ACLOperationWrite}})
	want("User:* ALLOW", produce(alice, "other"), nil)
}

// createTopicAs creates one-partition topics as a SASL PLAIN user.
func createTopicAs(t testing.TB, addr, user string, topics ...string) {
	t.Helper()
	adm := kadm.NewClient(tandemtest.Client(t, addr, kgo.SASL(franzSASL(user, "PLAIN"))))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resps, err := adm.CreateTopics(ctx, 1, 1, nil, topics...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("creating topics %v: %v", topics, err)
	}
}

// throttleHook records the throttle times a broker returned.
type throttleHook struct {
	mu    sync.Mutex
	times []time.Duration
}

func (h *throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.times = append(h.times, d)
}

func (h *throttleHook) get() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.times)
}

// TestProduceQuota: a 1 MB/s producer_byte_rate quota on one client id
// throttles that client (ThrottleTimeMs in its Produce responses) while
// another client id is not throttled. The rate each reached is reported.
func TestProduceQuota(t *testing.T) {
	tandemtest.Long(t) // tens of seconds: the full tier only
	// Kafka's sensors measure over quota.window.num samples (11 by
	// default, at least 10 s), which lets a new client burst up to ten
	// seconds' worth first; 3 one-second samples keep the burst small.
	sb := startSecure(t, false, map[string]string{"quota.window.num": "3"})
	addr := sb.ListenerAddr("PLAINTEXT")
	tandemtest.CreateTopic(t, addr, "quota", 1)
	const quota = 1 << 20
	adm := kadm.NewClient(tandemtest.Client(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slow := "slow-client"
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
		Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &slow}},
		Ops:    []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: quota}},
	}})
	if err == nil && len(res) == 1 {
		err = res[0].Err
	}
	if err != nil {
		t.Fatalf("alter client quotas: %v", err)
	}
	desc, err := adm.DescribeClientQuotas(ctx, false, nil)
	if err != nil || len(desc) != 1 || desc[0].Values[0].Value != quota {
		t.Fatalf("describe client quotas: %+v %v", desc, err)
	}

	type result struct {
		bytes     int64
		elapsed   time.Duration
		throttles []time.Duration
	}
	run := func(clientID string, dur time.Duration, maxBytes int64) result {
		h := &throttleHook{}
		cl := tandemtest.Client(t, addr, kgo.ClientID(clientID), kgo.WithHooks(h), kgo.MaxBufferedRecords(64),
			kgo.ProducerLinger(0), kgo.DefaultProduceTopic("quota"), kgo.ProducerBatchCompression(kgo.NoCompression()))
		// The quota counts request bytes on the wire: incompressible
		// values, sent uncompressed, make them the bytes counted here.
		value := randBytes(16 << 10)
		var acked atomic.Int64
		start := time.Now()
		var last atomic.Int64
		for sent := int64(0); time.Since(start) < dur && sent < maxBytes; sent += int64(len(value)) {
			cl.Produce(ctx, &kgo.Record{Value: value}, func(r *kgo.Record, err error) {
				if err == nil {
					acked.Add(int64(len(r.Value)))
					last.Store(int64(time.Since(start)))
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			t.Errorf("%s: flush: %v", clientID, err)
		}
		return result{acked.Load(), time.Duration(last.Load()), h.get()}
	}
	var wg sync.WaitGroup
	var slowRes, fastRes result
	wg.Add(2)
	go func() { defer wg.Done(); slowRes = run(slow, 10*time.Second, 1<<40) }()
	go func() { defer wg.Done(); fastRes = run("fast-client", 10*time.Second, 40<<20) }()
	wg.Wait()

	rate := func(r result) float64 { return float64(r.bytes) / r.elapsed.Seconds() / (1 << 20) }
	var total, maxT time.Duration
	for _, d := range slowRes.throttles {
		total += d
		maxT = max(maxT, d)
	}
	t.Logf("throttled client: %.1f MiB in %v = %.2f MiB/s (quota 1 MiB/s), %d throttled responses totalling %v (max %v)",
		float64(slowRes.bytes)/(1<<20), slowRes.elapsed.Round(time.Millisecond), rate(slowRes), len(slowRes.throttles), total, maxT)
	t.Logf("unthrottled client: %.1f MiB in %v = %.2f MiB/s, %d throttled responses",
		float64(fastRes.bytes)/(1<<20), fastRes.elapsed.Round(time.Millisecond), rate(fastRes), len(fastRes.throttles))
	if len(slowRes.throttles) == 0 {
		t.Fatal("the client over its quota got no throttle time")
	}
	if len(fastRes.throttles) != 0 {
		t.Fatalf("the client without a quota was throttled: %v", fastRes.throttles)
	}
	// The broker admits at most the quota over its 10 s minimum window
	// plus one request; a client that got throttled ran at no more.
	if r := rate(slowRes); r > 1.2 {
		t.Fatalf("throttled client ran at %.2f MiB/s, more than the quota + 20%%", r)
	}
}

// TestServeSecurity: tandem serve turns SASL listeners and authorization
// on from --set properties, and the plugin can be compiled out.
func TestServeSecurity(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	saslAddr := ln.Addr().String()
	ln.Close()
	p := tandemtest.StartProcess(t, t.TempDir(),
		"--set", "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://"+saslAddr,
		"--set", "tandem.sasl.plain.users=admin:admin-secret,bob:bob-secret",
		"--set", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"--set", "super.users=User:admin")
	createTopicAs(t, saslAddr, "admin", "served")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := tandemtest.Client(t, saslAddr, kgo.SASL(franzSASL("admin", "PLAIN")))
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: "served", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("super user produce: %v", err)
	}
	bob := tandemtest.Client(t, saslAddr, kgo.SASL(franzSASL("bob", "PLAIN")), kgo.RecordRetries(0), kgo.ProduceRequestTimeout(5*time.Second))
	if err := bob.ProduceSync(ctx, &kgo.Record{Topic: "served", Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob produce without ACLs: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// Anonymous PLAINTEXT clients see no topics.
	md, err := kadm.NewClient(tandemtest.Client(t, p.Addr)).Metadata(ctx)
	if err != nil || len(md.Topics) != 0 {
		t.Fatalf("anonymous metadata: %v topics, %v", md.Topics.Names(), err)
	}

	out, err := exec.Command("go", "list", "-deps", "-tags", "tandem_omit_acl", "github.com/tandem-kafka/tandem/cmd/tandem").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "plugins/acl") {
		t.Fatal("-tags tandem_omit_acl still links plugins/acl")
	}
}

func mirrorG(name string, op kmsg.ACLOperation) grant {
	return grant{plugin.ACLResourceMirror, name, op}
}

// txnMirrorMatrix has the entries of the transactions and mirror APIs.
// Fixtures: transaction m-txn (committed), mirrors m-mirror (source: this
// broker) and m-del-mirror.
func txnMirrorMatrix(topicID [16]byte, seq func() string) map[int16]matrixEntry {
	txnG := func(op kmsg.ACLOperation) grant { return grant{kmsg.ACLResourceTypeTransactionalId, "m-txn", op} }
	const mm = "m-mirror"
	return map[int16]matrixEntry{
		// v4+ is broker to broker: Kafka checks CLUSTER_ACTION only (the
		// sending broker checked the client's ACLs).
		24: {need: []grant{clusterG(kmsg.ACLOperationClusterAction)}, req: func() kmsg.Request {
			r := kmsg.NewPtrAddPartitionsToTxnRequest() // v4+: broker to broker
			tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
			tx.TransactionalID, tx.ProducerID = "m-txn", 1
			tx.Topics = []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: mTopic, Partitions: []int32{0}}}
			r.Transactions = append(r.Transactions, tx)
			return r
		}, code: func(r kmsg.Response) int16 {
			ar := r.(*kmsg.AddPartitionsToTxnResponse)
			if ar.ErrorCode != 0 || len(ar.Transactions) == 0 {
				return ar.ErrorCode
			}
			return ar.Transactions[0].Topics[0].Partitions[0].ErrorCode
		}, ok: []int16{kerr.InvalidProducerIDMapping.Code, kerr.InvalidProducerEpoch.Code}},
		25: {need: []grant{txnG(kmsg.ACLOperationWrite), groupG(kmsg.ACLOperationRead)}, req: func() kmsg.Request {
			r := kmsg.NewPtrAddOffsetsToTxnRequest()
			r.TransactionalID, r.ProducerID, r.Group = "m-txn", 1, mGroup
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.AddOffsetsToTxnResponse).ErrorCode },
			ok: []int16{kerr.InvalidProducerIDMapping.Code, kerr.InvalidProducerEpoch.Code}},
		26: {need: []grant{txnG(kmsg.ACLOperationWrite)}, req: func() kmsg.Request {
			r := kmsg.NewPtrEndTxnRequest()
			r.TransactionalID, r.ProducerID = "m-txn", 1
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.EndTxnResponse).ErrorCode },
			ok: []int16{kerr.InvalidProducerIDMapping.Code, kerr.InvalidProducerEpoch.Code}},
		27: {need: []grant{clusterG(kmsg.ACLOperationClusterAction)}, req: func() kmsg.Request {
			r := kmsg.NewPtrWriteTxnMarkersRequest()
			m := kmsg.NewWriteTxnMarkersRequestMarker()
			m.ProducerID, m.CoordinatorEpoch = 1, 0
			m.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: "m-none", Partitions: []int32{0}}}
			r.Markers = append(r.Markers, m)
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.WriteTxnMarkersResponse).Markers[0].Topics[0].Partitions[0].ErrorCode
		}, ok: []int16{kerr.UnknownTopicOrPartition.Code}},
		65: {need: []grant{txnG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeTransactionsRequest()
			r.TransactionalIDs = []string{"m-txn"}
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.DescribeTransactionsResponse).TransactionStates[0].ErrorCode
		}},
		66: {need: []grant{txnG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return kmsg.NewPtrListTransactionsRequest()
		}, code: func(r kmsg.Response) int16 {
			lr := r.(*kmsg.ListTransactionsResponse)
			for _, s := range lr.TransactionStates {
				if s.TransactionalID == "m-txn" {
					return lr.ErrorCode
				}
			}
			return kerr.TransactionalIDAuthorizationFailed.Code // hidden
		}},

		mirrorproto.KeyCreateMirror: {need: []grant{mirrorG("m-new-", kmsg.ACLOperationCreate)}, req: func() kmsg.Request {
			name := "m-new-" + seq()
			return &mirrorproto.CreateMirrorRequest{MirrorName: &name, Configs: []mirrorproto.MirrorConfig{{Name: "bootstrap.servers", Value: kmsg.StringPtr("127.0.0.1:1")}}}
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.CreateMirrorResponse).ErrorCode }},
		mirrorproto.KeyAddTopicsToMirror: {need: []grant{mirrorG(mm, kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			return &mirrorproto.AddTopicsToMirrorRequest{Topics: []mirrorproto.AddTopic{{TopicName: "m-missing", MirrorName: kmsg.StringPtr(mm)}}}
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.AddTopicsToMirrorResponse).ErrorCode },
			ok: []int16{kerr.UnknownTopicOrPartition.Code}}, // authorized: the source has no m-missing
		mirrorproto.KeyRemoveTopicsFromMirror: {need: []grant{mirrorG(mm, kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			return &mirrorproto.RemoveTopicsFromMirrorRequest{MirrorName: mm, Topics: []mirrorproto.RemoveTopic{{TopicName: "m-none"}}}
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.RemoveTopicsFromMirrorResponse).ErrorCode },
			ok: []int16{mirrorproto.ErrTopicNotMirrored.Code}},
		mirrorproto.KeyLastMirroredOffsets: {need: []grant{topicG(kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return &mirrorproto.LastMirroredOffsetsRequest{MirrorName: mm, Topics: []mirrorproto.PartitionsTopic{{Name: mTopic, Partitions: []int32{0}}}}
		}, code: func(r kmsg.Response) int16 {
			lr := r.(*mirrorproto.LastMirroredOffsetsResponse)
			if lr.ErrorCode != 0 {
				return lr.ErrorCode
			}
			return lr.Topics[0].Partitions[0].ErrorCode
		}},
		mirrorproto.KeyListMirrors: {need: []grant{mirrorG(mm, kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return &mirrorproto.ListMirrorsRequest{}
		}, code: func(r kmsg.Response) int16 {
			lr := r.(*mirrorproto.ListMirrorsResponse)
			for _, m := range lr.Mirrors {
				if m.MirrorName == mm {
					return lr.ErrorCode
				}
			}
			return mirrorproto.ErrMirrorAuthorizationFailed.Code // hidden
		}},
		mirrorproto.KeyDescribeMirrors: {need: []grant{mirrorG(mm, kmsg.ACLOperationDescribe)}, req: func() kmsg.Request {
			return &mirrorproto.DescribeMirrorsRequest{MirrorNames: []string{mm}}
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.DescribeMirrorsResponse).Mirrors[0].ErrorCode }},
		mirrorproto.KeyReadMirrorStates: {need: []grant{clusterG(kmsg.ACLOperationClusterAction)}, req: func() kmsg.Request {
			return &mirrorproto.ReadMirrorStatesRequest{MirrorName: mm}
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.ReadMirrorStatesResponse).ErrorCode }},
		mirrorproto.KeyWriteMirrorStates: {need: []grant{clusterG(kmsg.ACLOperationClusterAction)}, req: func() kmsg.Request {
			return &mirrorproto.WriteMirrorStatesRequest{MirrorName: mm}
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.WriteMirrorStatesResponse).ErrorCode }},
		mirrorproto.KeyPauseMirrorTopics: {need: []grant{mirrorG(mm, kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			r := mirrorproto.NewPauseMirrorTopicsRequest()
			r.MirrorName = mm
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.MirrorTopicsResponse).ErrorCode }},
		mirrorproto.KeyResumeMirrorTopics: {need: []grant{mirrorG(mm, kmsg.ACLOperationAlter)}, req: func() kmsg.Request {
			r := mirrorproto.NewResumeMirrorTopicsRequest()
			r.MirrorName = mm
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.MirrorTopicsResponse).ErrorCode }},
		mirrorproto.KeyDeleteMirror: {need: []grant{mirrorG("m-del-mirror", kmsg.ACLOperationDelete)}, req: func() kmsg.Request {
			r := mirrorproto.NewDeleteMirrorRequest()
			r.MirrorName = "m-del-mirror"
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*mirrorproto.MirrorTopicsResponse).ErrorCode }},
		mirrorproto.KeyBumpLeaderEpochs: {need: []grant{clusterG(kmsg.ACLOperationClusterAction)}, req: func() kmsg.Request {
			// MinLeaderEpoch -1: the epoch stays max(0, current).
			return &mirrorproto.BumpLeaderEpochsRequest{Topics: []mirrorproto.BumpTopic{{TopicID: topicID,
				Partitions: []mirrorproto.BumpPartition{{PartitionIndex: 0, MinLeaderEpoch: -1}}}}}
		}, code: func(r kmsg.Response) int16 {
			return r.(*mirrorproto.BumpLeaderEpochsResponse).Topics[0].Partitions[0].ErrorCode
		}},
	}
}

// apiName names an API key, the mirror keys included (kmsg calls 94
// UnregisterController).
func apiName(key int16) string {
	if key >= mirrorproto.KeyCreateMirror && key <= mirrorproto.KeyBumpLeaderEpochs {
		return fmt.Sprintf("Mirror%d", key)
	}
	return kmsg.NameForKey(key)
}

// txnMirrorFixtures commits a transaction m-txn on m-topic and creates the
// mirrors m-mirror (source: this broker, as the super user) and
// m-del-mirror, for txnMirrorMatrix.
func txnMirrorFixtures(t *testing.T, addr string, adminOpts []kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx := tandemtest.Client(t, addr, append(adminOpts, kgo.TransactionalID("m-txn"), kgo.DefaultProduceTopic(mTopic))...)
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("in a transaction")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	ma := mirroradmin.New(tandemtest.Client(t, addr, append(adminOpts, mirroradmin.Opt())...))
	// The mirrors' source is another cluster: a cluster never mirrors
	// itself (issue 43).
	source := map[string]string{"bootstrap.servers": tandemtest.StartInProcess(t, nil).Addr()}
	for _, name := range []string{"m-mirror", "m-del-mirror"} {
		if err := ma.CreateMirror(ctx, name, source); err != nil {
			t.Fatalf("create mirror %s: %v", name, err)
		}
	}
}
