package kafkaclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSeeds(t *testing.T) {
	got, err := Seeds(" a:9092, b:9093 ,,c:9094")
	if err != nil || !slices.Equal(got, []string{"a:9092", "b:9093", "c:9094"}) {
		t.Fatalf("Seeds: %q %v", got, err)
	}
	for _, bad := range []string{"", " , ", "a", "a:0", "a:x", ":9092", "a:9092,b"} {
		if _, err := Seeds(bad); err == nil {
			t.Errorf("Seeds(%q): no error", bad)
		}
	}
}

// selfSigned returns a PEM certificate and its PEM key.
func selfSigned(t *testing.T) (cert, key []byte) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func TestSecurityOpts(t *testing.T) {
	cert, key := selfSigned(t)
	dir := t.TempDir()
	ca, both := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem")
	os.WriteFile(ca, cert, 0o600)
	os.WriteFile(both, append(append([]byte{}, key...), cert...), 0o600)
	jaas := JAAS("SCRAM-SHA-512", "alice", "s3cret")
	if u, p := JAASCredentials(jaas); u != "alice" || p != "s3cret" || !strings.Contains(jaas, "ScramLoginModule") {
		t.Fatalf("JAAS %q reads back as %q %q", jaas, u, p)
	}
	for _, c := range []struct {
		props map[string]string
		opts  int    // options returned
		err   string // in the error; "" for none
	}{
		{map[string]string{}, 0, ""},
		{map[string]string{"security.protocol": "plaintext"}, 0, ""},
		{map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas}, 1, ""},
		{map[string]string{"security.protocol": "SASL_SSL", "sasl.jaas.config": JAAS("PLAIN", "u", "p"), "ssl.truststore.location": ca}, 2, ""},
		{map[string]string{"security.protocol": "SSL", "ssl.keystore.location": both, "ssl.truststore.certificates": string(cert)}, 1, ""},
		{map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token": "t"}, 2, ""},
		{map[string]string{"security.protocol": "BOGUS"}, 0, "security.protocol"},
		{map[string]string{"sasl.mechanism": "PLAIN"}, 0, "needs security.protocol SASL_PLAINTEXT or SASL_SSL"},
		{map[string]string{"security.protocol": "SASL_PLAINTEXT"}, 0, "sasl.jaas.config"},
		{map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.jaas.config": jaas}, 0, "sasl.mechanism"},
		{map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, 0, "sasl.oauthbearer.token"},
		{map[string]string{"security.protocol": "SSL", "ssl.truststore.type": "JKS", "ssl.truststore.location": ca}, 0, "ssl.truststore.type JKS is not supported"},
		{map[string]string{"security.protocol": "SSL", "ssl.truststore.location": filepath.Join(dir, "none")}, 0, "ssl.truststore.location"},
		{map[string]string{"security.protocol": "SSL", "ssl.truststore.certificates": "not a pem"}, 0, "no PEM certificate"},
		{map[string]string{"security.protocol": "SSL", "ssl.keystore.location": ca}, 0, "ssl.keystore"},
	} {
		opts, err := SecurityOpts(c.props)
		switch {
		case c.err == "" && (err != nil || len(opts) != c.opts):
			t.Errorf("%v: %d options, %v; want %d", c.props, len(opts), err, c.opts)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: error %v, want one saying %q", c.props, err, c.err)
		}
	}
	tc, err := TLSConfig(map[string]string{"ssl.keystore.location": both, "ssl.endpoint.identification.algorithm": ""})
	if err != nil || len(tc.Certificates) != 1 || !tc.InsecureSkipVerify {
		t.Fatalf("TLSConfig with a PEM keystore file: %+v %v", tc, err)
	}
}
