// Package kafkaclient turns the settings of a Kafka client, named as
// Apache Kafka's client properties name them (bootstrap.servers,
// security.protocol, sasl.mechanism, sasl.jaas.config, ssl.*), into
// franz-go options. The tandem CLI (--bootstrap-server, --command-config)
// and a mirror's connection to its source cluster both build their
// clients with it, so that one file of properties means the same thing
// to both.
//
// TLS material is PEM, as Go reads it: ssl.truststore.type and
// ssl.keystore.type PEM (the default here), with the certificates inline
// (ssl.truststore.certificates, ssl.keystore.certificate.chain and
// ssl.keystore.key) or in files (ssl.truststore.location,
// ssl.keystore.location holding the key and its chain). Java keystores
// (JKS, PKCS12) are refused with what to do instead.
package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Seeds splits a bootstrap list, "host:port,host:port" as Kafka's tools
// take it (spaces around entries allowed), into its addresses. An empty
// list, or an entry that is not host:port with a port of 1-65535, is an
// error naming the entry.
func Seeds(list string) ([]string, error) {
	var seeds []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			return nil, fmt.Errorf("%q is not host:port", s)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return nil, fmt.Errorf("%q: port %q is not 1-65535", s, port)
		}
		seeds = append(seeds, s)
	}
	if len(seeds) == 0 {
		return nil, errors.New("no host:port")
	}
	return seeds, nil
}

// Keys are the properties SecurityOpts reads.
var Keys = []string{
	"security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.oauthbearer.token",
	"ssl.truststore.type", "ssl.truststore.certificates", "ssl.truststore.location",
	"ssl.keystore.type", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.keystore.location",
	"ssl.endpoint.identification.algorithm", "ssl.protocol", "ssl.enabled.protocols",
}

// SecurityOpts returns the franz-go options that the security properties
// of props ask for (see Security). Other keys are left to the caller. An
// error names the property at fault.
func SecurityOpts(props map[string]string) ([]kgo.Opt, error) {
	sec, err := Security(props)
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if sec.SASL != nil {
		opts = append(opts, kgo.SASL(sec.SASL))
	}
	if sec.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(sec.TLS))
	}
	return opts, nil
}

// Settings are a client's security settings as values, for a connection
// that is not a franz-go client's (the mirror's fetchers read their
// answers into buffers of their own).
type Settings struct {
	TLS  *tls.Config    // nil: plaintext
	SASL sasl.Mechanism // nil: no SASL
}

// Security returns what the security properties of props ask for: SASL
// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 with the username and password of
// sasl.jaas.config; OAUTHBEARER with sasl.oauthbearer.token) over
// security.protocol SASL_PLAINTEXT or SASL_SSL, and TLS for SSL and
// SASL_SSL. An error names the property at fault.
func Security(props map[string]string) (Settings, error) {
	var out Settings
	proto := strings.ToUpper(strings.TrimSpace(props["security.protocol"]))
	switch proto {
	case "", "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL":
	default:
		return out, fmt.Errorf("security.protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", props["security.protocol"])
	}
	mech := strings.ToUpper(strings.TrimSpace(props["sasl.mechanism"]))
	if mech != "" && !strings.HasPrefix(proto, "SASL") {
		return out, fmt.Errorf("sasl.mechanism %s needs security.protocol SASL_PLAINTEXT or SASL_SSL, not %q", mech, cmpOr(proto, "PLAINTEXT"))
	}
	if strings.HasPrefix(proto, "SASL") {
		user, pass := JAASCredentials(props["sasl.jaas.config"])
		if mech != "OAUTHBEARER" && (user == "" || pass == "") {
			return out, fmt.Errorf(`sasl.jaas.config: sasl.mechanism %s wants a login module with username="..." and password="..."`, cmpOr(mech, "PLAIN"))
		}
		switch mech {
		case "", "PLAIN":
			out.SASL = plain.Auth{User: user, Pass: pass}.AsMechanism()
		case "SCRAM-SHA-256":
			out.SASL = scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			out.SASL = scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
		case "OAUTHBEARER":
			token := strings.TrimSpace(props["sasl.oauthbearer.token"])
			if token == "" {
				return out, errors.New("sasl.oauthbearer.token is required for sasl.mechanism OAUTHBEARER")
			}
			out.SASL = oauth.Auth{Token: token}.AsMechanism()
		default:
			return out, fmt.Errorf("sasl.mechanism %q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", props["sasl.mechanism"])
		}
	}
	if strings.HasSuffix(proto, "SSL") {
		tc, err := TLSConfig(props)
		if err != nil {
			return out, err
		}
		out.TLS = tc
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TLSConfig is the TLS client configuration the ssl.* properties of props
// describe: the trusted certificates (the system's when none are given),
// a client certificate, the minimum version, and no hostname check when
// ssl.endpoint.identification.algorithm is set empty (as Kafka allows).
func TLSConfig(props map[string]string) (*tls.Config, error) {
	for _, k := range []string{"ssl.truststore.type", "ssl.keystore.type"} {
		if t := props[k]; t != "" && !strings.EqualFold(t, "PEM") {
			return nil, fmt.Errorf("%s %s is not supported: give PEM files (keytool -exportcert -rfc, or openssl pkcs12 -nodes, converts a Java keystore)", k, t)
		}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if p := props["ssl.enabled.protocols"]; p != "" && !strings.Contains(p, "1.2") || props["ssl.protocol"] == "TLSv1.3" {
		tc.MinVersion = tls.VersionTLS13
	}
	trust := []byte(props["ssl.truststore.certificates"])
	if loc := props["ssl.truststore.location"]; len(trust) == 0 && loc != "" {
		var err error
		if trust, err = os.ReadFile(loc); err != nil {
			return nil, fmt.Errorf("ssl.truststore.location: %w", err)
		}
	}
	if len(trust) > 0 {
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(trust) {
			return nil, errors.New("ssl.truststore: no PEM certificate in it")
		}
	}
	chain, key := []byte(props["ssl.keystore.certificate.chain"]), []byte(props["ssl.keystore.key"])
	if loc := props["ssl.keystore.location"]; len(chain) == 0 && loc != "" {
		data, err := os.ReadFile(loc)
		if err != nil {
			return nil, fmt.Errorf("ssl.keystore.location: %w", err)
		}
		chain, key = splitPEM(data)
	}
	if len(chain) > 0 || len(key) > 0 {
		cert, err := tls.X509KeyPair(chain, key)
		if err != nil {
			return nil, fmt.Errorf("ssl.keystore: want an unencrypted PEM private key and its certificate chain: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if alg, set := props["ssl.endpoint.identification.algorithm"]; set && alg == "" {
		tc.InsecureSkipVerify = true // the operator disabled hostname verification, as Kafka allows
	}
	return tc, nil
}

// splitPEM separates the certificates of a PEM file from its private key.
func splitPEM(data []byte) (certs, key []byte) {
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return certs, key
		}
		if strings.Contains(b.Type, "PRIVATE KEY") {
			key = append(key, pem.EncodeToMemory(b)...)
		} else {
			certs = append(certs, pem.EncodeToMemory(b)...)
		}
	}
}

var jaasField = regexp.MustCompile(`(\w+)\s*=\s*"([^"]*)"`)

// JAASCredentials reads username and password from a JAAS line, e.g.
// `org.apache.kafka.common.security.plain.PlainLoginModule required
// username="alice" password="secret";`.
func JAASCredentials(s string) (user, pass string) {
	fields := map[string]string{}
	for _, m := range jaasField.FindAllStringSubmatch(s, -1) {
		fields[m[1]] = m[2]
	}
	return fields["username"], fields["password"]
}

// JAAS is the sasl.jaas.config line for a username and password, with
// the login module of the mechanism. Neither may hold a double quote,
// which JAAS cannot quote.
func JAAS(mechanism, user, pass string) string {
	module := "org.apache.kafka.common.security.plain.PlainLoginModule"
	if strings.HasPrefix(strings.ToUpper(mechanism), "SCRAM") {
		module = "org.apache.kafka.common.security.scram.ScramLoginModule"
	}
	return fmt.Sprintf(`%s required username="%s" password="%s";`, module, user, pass)
}
