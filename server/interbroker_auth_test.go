package server_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestInterBrokerCredentialsAtStart: a cluster node whose inter-broker
// listener needs SASL is refused at start, naming the setting, when its
// own login is missing, uses a mechanism the listener does not enable, or
// (PLAIN, whose users are the broker's own settings) would be refused by
// its peers. A standalone broker has no peers and needs none.
func TestInterBrokerCredentialsAtStart(t *testing.T) {
	base := map[string]string{
		"controller.quorum.voters":   "1@127.0.0.1:1",
		"listeners":                  "SASL_PLAINTEXT://127.0.0.1:0",
		"inter.broker.listener.name": "SASL_PLAINTEXT",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config": `org.apache.kafka.common.security.plain.PlainLoginModule required ` +
			`username="broker" password="pw" user_broker="pw" user_alice="a";`,
	}
	for _, tc := range []struct {
		name    string
		props   map[string]string
		wantErr string // "" = accepted
	}{
		{"plain ok", nil, ""},
		{"plain wrong password", map[string]string{"listener.name.sasl_plaintext.plain.sasl.jaas.config": `x required username="broker" password="nope" user_broker="pw";`},
			`inter-broker user "broker" of listener SASL_PLAINTEXT is not a PLAIN user`},
		{"plain unknown user", map[string]string{"listener.name.sasl_plaintext.plain.sasl.jaas.config": `x required username="bob" password="pw" user_broker="pw";`},
			`inter-broker user "bob"`},
		{"no login", map[string]string{"listener.name.sasl_plaintext.plain.sasl.jaas.config": `x required user_broker="pw";`},
			`no username="..." option`},
		{"scram without jaas", map[string]string{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
			`needs its own credentials in listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config`},
		{"mechanism not enabled", map[string]string{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256", "sasl.enabled.mechanisms": "PLAIN"},
			`SCRAM-SHA-256 is not enabled on the inter-broker listener SASL_PLAINTEXT`},
		{"scram with jaas", map[string]string{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
			"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": `x required username="broker" password="s";`}, ""},
		{"standalone needs no login", map[string]string{"controller.quorum.voters": "",
			"listener.name.sasl_plaintext.plain.sasl.jaas.config": `x required user_broker="pw";`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props := map[string]string{}
			for k, v := range base {
				props[k] = v
			}
			for k, v := range tc.props {
				props[k] = v
			}
			_, err := server.New(server.Config{NodeID: 1, DataDir: t.TempDir(), Props: props})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("accepted, want an error with %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

// TestClusterInterBrokerTLS: the inter-broker listener is SSL with
// ssl.client.auth=required, so brokers must present their keystore's
// certificate to each other, on the Kafka listener and on the controller
// port, which then speaks TLS too. A topic of replication factor 3
// replicates (every ISR full) and its records are read back; a plaintext
// connection to a controller port gets no answer.
func TestClusterInterBrokerTLS(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(k)
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	c := tandemtest.StartCluster(t, 3, map[string]string{
		"listeners":                      "SSL://127.0.0.1:0",
		"inter.broker.listener.name":     "SSL",
		"ssl.keystore.certificate.chain": string(chain),
		"ssl.keystore.key":               string(keyPEM),
		"ssl.truststore.certificates":    string(caPEM),
		"ssl.client.auth":                "required",
	})
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cert, err := tls.X509KeyPair(chain, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, nil, "tls"); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "tls", Value: fmt.Appendf(nil, "r%02d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitFor("a full ISR", func(img *metadata.Image) bool {
		tp := img.Topics["tls"]
		return tp != nil && len(tp.Partitions[0].ISR) == 3
	})
	// Every replica has the 50 records, byte for byte.
	c.WaitFor("every replica's high watermark at 50", func(img *metadata.Image) bool {
		for _, b := range c.Brokers {
			ep := b.Broker().Engine().Partition(img.Topics["tls"].ID, 0)
			if ep == nil || ep.Offsets().HighWatermark != 50 {
				return false
			}
		}
		return true
	})
	logs := replicaLogs(t, c, "tls", 0)
	for id, l := range logs {
		if len(l) != 50 || !slices.EqualFunc(l, logs[1], bytes.Equal) {
			t.Fatalf("broker %d has %d batches, unlike broker 1's %d", id, len(l), len(logs[1]))
		}
	}
	// The controller port: a client without TLS gets nothing back.
	conn, err := net.DialTimeout("tcp", c.Broker(1).ControllerAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	conn.Write([]byte("\x00\x00\x00\x02{}"))
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	if bytes.Contains(buf[:n], []byte("{")) {
		t.Fatalf("the controller port answered a plaintext frame: %q", buf[:n])
	}
}
