package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tandem-kafka/tandem/server/network"
	"github.com/tandem-kafka/tandem/server/security"
)

// interBrokerAuth is how this broker connects to the others: as a client
// of their inter-broker listener (inter.broker.listener.name, else the
// first listener), with that listener's security protocol. It is worked
// out once in New, so that missing or contradictory settings refuse the
// start instead of failing every replica fetch.
type interBrokerAuth struct {
	listener string
	protocol string
	tls      *tls.Config // client side; nil unless SSL or SASL_SSL
	// ctrlTLS is the server side of the controller port: the
	// listener's keystore, and client certificates verified by its
	// truststore (when it has one), since the controller port has no
	// SASL.
	ctrlTLS  *tls.Config
	mech     sasl.Mechanism // nil unless SASL_*
	mechName string
	user     string
}

// jaasOption matches a key="value" option of a JAAS login module line.
var jaasOption = regexp.MustCompile(`(\w+)\s*=\s*"([^"]*)"`)

// parseInterBrokerAuth reads Kafka's settings for the client side of the
// inter-broker listener l:
//   - TLS: the listener's truststore (ssl.truststore.*) verifies the
//     peers, its keystore is presented when they ask for a client
//     certificate (ssl.client.auth);
//   - SASL: sasl.mechanism.inter.broker.protocol (PLAIN unless set: Kafka's
//     default, GSSAPI, is not supported) with the username and password
//     of listener.name.<l>.<mechanism>.sasl.jaas.config (or
//     <mechanism>.sasl.jaas.config), as Kafka's brokers log in.
func parseInterBrokerAuth(l *network.Listener, m map[string]string) (*interBrokerAuth, error) {
	a := &interBrokerAuth{listener: l.Name, protocol: l.Protocol}
	pp := network.ListenerProps{Props: m, Listener: l.Name}
	if l.TLS != nil {
		a.tls = &tls.Config{
			MinVersion:   tls.VersionTLS12,
			RootCAs:      l.TLS.ClientCAs, // the listener's truststore; nil: the system's roots
			Certificates: l.TLS.Certificates,
		}
		a.ctrlTLS = l.TLS.Clone()
		if a.ctrlTLS.ClientCAs != nil {
			a.ctrlTLS.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	if !l.IsSASL() {
		return a, nil
	}
	a.mechName = strings.ToUpper(strings.TrimSpace(m["sasl.mechanism.inter.broker.protocol"]))
	if a.mechName == "" {
		a.mechName = security.MechPlain
	}
	if !slices.Contains(l.SASL.Mechanisms, a.mechName) {
		return nil, fmt.Errorf("sasl.mechanism.inter.broker.protocol %s is not enabled on the inter-broker listener %s (sasl.enabled.mechanisms: %s)",
			a.mechName, l.Name, strings.Join(l.SASL.Mechanisms, ","))
	}
	key := strings.ToLower(a.mechName) + ".sasl.jaas.config"
	jaas := pp.Get(key)
	if jaas == "" {
		return nil, fmt.Errorf("inter-broker listener %s is %s: this broker needs its own credentials in listener.name.%s.%s (username=\"...\" password=\"...\")",
			l.Name, l.Protocol, strings.ToLower(l.Name), key)
	}
	opts := map[string]string{}
	for _, o := range jaasOption.FindAllStringSubmatch(jaas, -1) {
		opts[o[1]] = o[2]
	}
	user, pw := opts["username"], opts["password"]
	if user == "" {
		return nil, fmt.Errorf("listener.name.%s.%s: no username=\"...\" option for the broker's own login", strings.ToLower(l.Name), key)
	}
	a.user = user
	switch a.mechName {
	case security.MechPlain:
		// PLAIN users are this broker's own settings, so a broker that
		// could not log in to its peers is detected here.
		if want, ok := l.SASL.Plain[user]; !ok || want != pw {
			return nil, fmt.Errorf("inter-broker user %q of listener %s is not a PLAIN user of that listener with this password (user_%s in %s or tandem.sasl.plain.users)",
				user, l.Name, user, "plain.sasl.jaas.config")
		}
		a.mech = plain.Auth{User: user, Pass: pw}.AsMechanism()
	case security.MechScram256:
		// SCRAM credentials live in the cluster metadata: a wrong
		// password shows at run time, per peer, in Health.
		a.mech = scram.Auth{User: user, Pass: pw}.AsSha256Mechanism()
	case security.MechScram512:
		a.mech = scram.Auth{User: user, Pass: pw}.AsSha512Mechanism()
	default:
		return nil, fmt.Errorf("sasl.mechanism.inter.broker.protocol %s is not supported between brokers (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", a.mechName)
	}
	return a, nil
}

// opts returns the client options that connect and authenticate as this
// broker, dialing through dial (nil: the default dialer).
func (a *interBrokerAuth) opts(dial func(ctx context.Context, network, addr string) (net.Conn, error)) []kgo.Opt {
	var out []kgo.Opt
	if a.mech != nil {
		out = append(out, kgo.SASL(a.mech))
	}
	if a.tls == nil {
		if dial != nil {
			out = append(out, kgo.Dialer(dial))
		}
		return out
	}
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	// TLS over the given dialer (kgo's DialTLSConfig excludes a Dialer).
	cfg := a.tls
	return append(out, kgo.Dialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName, _, err = net.SplitHostPort(addr); err != nil {
			conn.Close()
			return nil, err
		}
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		return tc, nil
	}))
}

// errAuthFailure reports whether err is a peer refusing this broker's
// credentials or TLS identity: retrying soon will not help.
func errAuthFailure(err error) bool {
	var cv *tls.CertificateVerificationError
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	return errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.IllegalSaslState) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.As(err, &cv) || errors.As(err, &ue) || errors.As(err, &he)
}
