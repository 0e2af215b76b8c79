package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/pkcs12"

	"github.com/tandem-kafka/tandem/server/security"
)

// Security protocols of a listener, as Kafka names them.
const (
	protoPlaintext     = "PLAINTEXT"
	protoSSL           = "SSL"
	protoSASLPlaintext = "SASL_PLAINTEXT"
	protoSASLSSL       = "SASL_SSL"
)

// listener is one named listener (Kafka's "listeners" entries).
type listener struct {
	name      string // e.g. "PLAINTEXT", "CLIENT"
	protocol  string // one of the proto constants
	bind      string // host:port to listen on
	advertise string // host:port told to clients; "" = the bound address
	tls       *tls.Config
	sasl      *security.SASLConfig // nil unless the protocol is SASL_*

	ln   net.Listener
	addr string // bound address
}

func (l *listener) isSASL() bool { return l.sasl != nil }

// securityProps are the keys this file reads; they are not reported as
// unknown properties.
var securityProps = regexp.MustCompile(`^(listeners|advertised\.listeners|listener\.security\.protocol\.map|inter\.broker\.listener\.name|listener\.name\..*|ssl\..*|sasl\..*|connections\.max\.reauth\.ms|tandem\.sasl\..*|super\.users|allow\.everyone\.if\.no\.acl\.found|authorizer\.class\.name|quota\.window\..*)$`)

// propsOf looks keys up as Kafka does for listener-scoped settings:
// listener.name.<lowercase name>.<key> first, then <key>.
type propsOf struct {
	m        map[string]string
	listener string
}

func (p propsOf) get(key string) string {
	if p.listener != "" {
		if v, ok := p.m["listener.name."+strings.ToLower(p.listener)+"."+key]; ok {
			return strings.TrimSpace(v)
		}
	}
	return strings.TrimSpace(p.m[key])
}

// parseListeners builds the listeners from the listeners,
// advertised.listeners and listener.security.protocol.map properties, or a
// single PLAINTEXT listener on listen/advertise when listeners is unset.
func parseListeners(m map[string]string, listen, advertise string) ([]*listener, error) {
	spec := strings.TrimSpace(m["listeners"])
	if spec == "" {
		return []*listener{{name: protoPlaintext, protocol: protoPlaintext, bind: listen, advertise: advertise}}, nil
	}
	protos := map[string]string{}
	for _, p := range []string{protoPlaintext, protoSSL, protoSASLPlaintext, protoSASLSSL} {
		protos[p] = p
	}
	if pm := strings.TrimSpace(m["listener.security.protocol.map"]); pm != "" {
		for _, kv := range strings.Split(pm, ",") {
			name, proto, ok := strings.Cut(strings.TrimSpace(kv), ":")
			if !ok {
				return nil, fmt.Errorf("listener.security.protocol.map: bad entry %q", kv)
			}
			protos[strings.ToUpper(name)] = strings.ToUpper(proto)
		}
	}
	parse := func(key, s string) (map[string]string, []string, error) {
		out, order := map[string]string{}, []string(nil)
		for _, e := range strings.Split(s, ",") {
			name, hp, ok := strings.Cut(strings.TrimSpace(e), "://")
			if !ok {
				return nil, nil, fmt.Errorf("%s: %q is not NAME://host:port", key, e)
			}
			name = strings.ToUpper(name)
			if _, dup := out[name]; dup {
				return nil, nil, fmt.Errorf("%s: listener %s appears twice", key, name)
			}
			if _, _, err := net.SplitHostPort(hp); err != nil {
				return nil, nil, fmt.Errorf("%s: %s: %w", key, e, err)
			}
			out[name], order = hp, append(order, name)
		}
		return out, order, nil
	}
	binds, order, err := parse("listeners", spec)
	if err != nil {
		return nil, err
	}
	var advs map[string]string
	if a := strings.TrimSpace(m["advertised.listeners"]); a != "" {
		if advs, _, err = parse("advertised.listeners", a); err != nil {
			return nil, err
		}
	}
	var ls []*listener
	for _, name := range order {
		l := &listener{name: name, protocol: protos[name], bind: binds[name], advertise: advs[name]}
		pp := propsOf{m: m, listener: name}
		switch l.protocol {
		case protoPlaintext:
		case protoSSL, protoSASLSSL:
			if l.tls, err = tlsConfig(pp); err != nil {
				return nil, fmt.Errorf("listener %s: %w", name, err)
			}
		case protoSASLPlaintext:
		default:
			return nil, fmt.Errorf("listener %s: no security protocol (listener.security.protocol.map)", name)
		}
		if l.protocol == protoSASLPlaintext || l.protocol == protoSASLSSL {
			if l.sasl, err = security.ParseSASL(pp.get); err != nil {
				return nil, fmt.Errorf("listener %s: %w", name, err)
			}
		}
		ls = append(ls, l)
	}
	if ib := strings.ToUpper(strings.TrimSpace(m["inter.broker.listener.name"])); ib != "" {
		if _, ok := binds[ib]; !ok {
			return nil, fmt.Errorf("inter.broker.listener.name %s is not in listeners", ib)
		}
	}
	return ls, nil
}

// interBroker returns the listener brokers use among themselves, whose
// address is the broker's registered host and port: the
// inter.broker.listener.name one, else the first.
func interBroker(ls []*listener, m map[string]string) *listener {
	name := strings.ToUpper(strings.TrimSpace(m["inter.broker.listener.name"]))
	for _, l := range ls {
		if l.name == name {
			return l
		}
	}
	return ls[0]
}

// tlsConfig builds the server TLS config from Kafka's ssl.* properties.
// Keystores: PEM (ssl.keystore.location of type PEM, or
// ssl.keystore.certificate.chain + ssl.keystore.key as PEM text or file
// paths) or PKCS12 (ssl.keystore.location + ssl.keystore.password;
// legacy 3DES/RC2 encryption only, as golang.org/x/crypto/pkcs12 reads
// it). JKS is not supported. Truststores: PEM or PKCS12 likewise.
func tlsConfig(p propsOf) (*tls.Config, error) {
	cert, err := keystore(p)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	pool, err := truststore(p)
	if err != nil {
		return nil, err
	}
	cfg.ClientCAs = pool
	switch strings.ToLower(p.get("ssl.client.auth")) {
	case "", "none":
		cfg.ClientAuth = tls.NoClientCert
	case "requested":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("ssl.client.auth %q is not none, requested or required", p.get("ssl.client.auth"))
	}
	if cfg.ClientAuth != tls.NoClientCert && pool == nil {
		return nil, errors.New("ssl.client.auth needs a truststore (ssl.truststore.location or ssl.truststore.certificates)")
	}
	return cfg, nil
}

// pemOrFile returns v itself when it is PEM text, else the file it names.
func pemOrFile(v string) ([]byte, error) {
	if strings.HasPrefix(v, "-----BEGIN") {
		return []byte(v), nil
	}
	return os.ReadFile(v)
}

func keystore(p propsOf) (tls.Certificate, error) {
	typ := strings.ToUpper(p.get("ssl.keystore.type"))
	if chain := p.get("ssl.keystore.certificate.chain"); chain != "" {
		c, err := pemOrFile(chain)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("ssl.keystore.certificate.chain: %w", err)
		}
		k, err := pemOrFile(p.get("ssl.keystore.key"))
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("ssl.keystore.key: %w", err)
		}
		return tls.X509KeyPair(c, k)
	}
	loc := p.get("ssl.keystore.location")
	if loc == "" {
		return tls.Certificate{}, errors.New("TLS listener without a keystore (ssl.keystore.location or ssl.keystore.certificate.chain)")
	}
	data, err := os.ReadFile(loc)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("ssl.keystore.location: %w", err)
	}
	switch typ {
	case "PEM":
		return tls.X509KeyPair(data, data)
	case "", "PKCS12":
		blocks, err := pkcs12.ToPEM(data, p.get("ssl.keystore.password"))
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("ssl.keystore.location %s: %w", loc, err)
		}
		var all []byte
		for _, b := range blocks {
			all = append(all, pem.EncodeToMemory(b)...)
		}
		return tls.X509KeyPair(all, all)
	}
	return tls.Certificate{}, fmt.Errorf("ssl.keystore.type %s is not PEM or PKCS12", typ)
}

func truststore(p propsOf) (*x509.CertPool, error) {
	var data []byte
	if c := p.get("ssl.truststore.certificates"); c != "" {
		data = []byte(c)
	} else if loc := p.get("ssl.truststore.location"); loc != "" {
		var err error
		if data, err = os.ReadFile(loc); err != nil {
			return nil, fmt.Errorf("ssl.truststore.location: %w", err)
		}
		if t := strings.ToUpper(p.get("ssl.truststore.type")); t == "" || t == "PKCS12" {
			certs, err := pkcs12TrustStore(data, p.get("ssl.truststore.password"))
			if err != nil {
				return nil, fmt.Errorf("ssl.truststore.location %s: %w", loc, err)
			}
			pool := x509.NewCertPool()
			for _, c := range certs {
				pool.AddCert(c)
			}
			return pool, nil
		}
	} else {
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("truststore holds no PEM certificate")
	}
	return pool, nil
}

func pkcs12TrustStore(data []byte, password string) ([]*x509.Certificate, error) {
	blocks, err := pkcs12.ToPEM(data, password)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for _, b := range blocks {
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// tlsPrincipal is Kafka's default principal for a TLS client: User: and
// the certificate's subject distinguished name.
func tlsPrincipal(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return anonymous
	}
	return "User:" + cs.PeerCertificates[0].Subject.String()
}

const anonymous = "User:ANONYMOUS"

// reauthMs parses connections.max.reauth.ms (0: no re-authentication).
func reauthMs(m map[string]string) (time.Duration, error) {
	v := strings.TrimSpace(m["connections.max.reauth.ms"])
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, fmt.Errorf("connections.max.reauth.ms %q is not a non-negative number", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// controllerListener takes the listener named name ("": none) out of
// ls: Kafka's controller listener is the controller port, not a listener
// for clients. It returns the other listeners and where the controller
// port binds.
func controllerListener(ls []*listener, name string) ([]*listener, string, error) {
	if name == "" {
		return ls, "", nil
	}
	i := slices.IndexFunc(ls, func(l *listener) bool { return l.name == name })
	if i < 0 || len(ls) == 1 {
		return nil, "", fmt.Errorf("server: controller.listener.names %s must name one of several listeners", name)
	}
	bind := ls[i].bind
	return slices.Delete(ls, i, i+1), bind, nil
}

// ListenerAddr returns the bound address of the named listener, "" if
// there is none.
func (b *Broker) ListenerAddr(name string) string {
	for _, l := range b.listeners {
		if l.name == strings.ToUpper(name) {
			return l.addr
		}
	}
	return ""
}
