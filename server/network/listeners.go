package network

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
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

// Listener is one named listener (Kafka's "listeners" entries).
type Listener struct {
	Name      string // e.g. "PLAINTEXT", "CLIENT"
	Protocol  string // one of the proto constants
	Bind      string // host:port to listen on
	Advertise string // host:port told to clients; "" = the bound address
	TLS       *tls.Config
	SASL      *security.SASLConfig // nil unless the protocol is SASL_*

	ln   net.Listener
	addr string // bound address
}

// IsSASL says whether clients authenticate with SASL on l.
func (l *Listener) IsSASL() bool { return l.SASL != nil }

// Addr is the bound address of l, "" until Bind.
func (l *Listener) Addr() string { return l.addr }

// Close closes l's socket, if Bind opened it: its accept loop ends.
func (l *Listener) Close() {
	if l.ln != nil {
		l.ln.Close()
	}
}

// ListenerProps looks keys up as Kafka does for listener-scoped
// settings: listener.name.<lowercase name>.<key> first, then <key>.
type ListenerProps struct {
	Props    map[string]string
	Listener string
}

// Get returns the value of key for the listener, trimmed; "" if unset.
func (p ListenerProps) Get(key string) string {
	if p.Listener != "" {
		if v, ok := p.Props["listener.name."+strings.ToLower(p.Listener)+"."+key]; ok {
			return strings.TrimSpace(v)
		}
	}
	return strings.TrimSpace(p.Props[key])
}

// ParseListeners builds the listeners from the listeners,
// advertised.listeners and listener.security.protocol.map properties, or a
// single PLAINTEXT listener on listen/advertise when listeners is unset.
func ParseListeners(m map[string]string, listen, advertise string) ([]*Listener, error) {
	spec := strings.TrimSpace(m["listeners"])
	if spec == "" {
		return []*Listener{{Name: protoPlaintext, Protocol: protoPlaintext, Bind: listen, Advertise: advertise}}, nil
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
	var ls []*Listener
	for _, name := range order {
		l := &Listener{Name: name, Protocol: protos[name], Bind: binds[name], Advertise: advs[name]}
		pp := ListenerProps{Props: m, Listener: name}
		switch l.Protocol {
		case protoPlaintext:
		case protoSSL, protoSASLSSL:
			if l.TLS, err = tlsConfig(pp); err != nil {
				return nil, fmt.Errorf("listener %s: %w", name, err)
			}
		case protoSASLPlaintext:
		default:
			return nil, fmt.Errorf("listener %s: no security protocol (listener.security.protocol.map)", name)
		}
		if l.Protocol == protoSASLPlaintext || l.Protocol == protoSASLSSL {
			if l.SASL, err = security.ParseSASL(pp.Get); err != nil {
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

// InterBroker returns the listener brokers use among themselves, whose
// address is the broker's registered host and port: the
// inter.broker.listener.name one, else the first.
func InterBroker(ls []*Listener, m map[string]string) *Listener {
	name := strings.ToUpper(strings.TrimSpace(m["inter.broker.listener.name"]))
	for _, l := range ls {
		if l.Name == name {
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
func tlsConfig(p ListenerProps) (*tls.Config, error) {
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
	switch strings.ToLower(p.Get("ssl.client.auth")) {
	case "", "none":
		cfg.ClientAuth = tls.NoClientCert
	case "requested":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("ssl.client.auth %q is not none, requested or required", p.Get("ssl.client.auth"))
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

func keystore(p ListenerProps) (tls.Certificate, error) {
	typ := strings.ToUpper(p.Get("ssl.keystore.type"))
	if chain := p.Get("ssl.keystore.certificate.chain"); chain != "" {
		c, err := pemOrFile(chain)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("ssl.keystore.certificate.chain: %w", err)
		}
		k, err := pemOrFile(p.Get("ssl.keystore.key"))
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("ssl.keystore.key: %w", err)
		}
		return tls.X509KeyPair(c, k)
	}
	loc := p.Get("ssl.keystore.location")
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
		blocks, err := pkcs12.ToPEM(data, p.Get("ssl.keystore.password"))
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

func truststore(p ListenerProps) (*x509.CertPool, error) {
	var data []byte
	if c := p.Get("ssl.truststore.certificates"); c != "" {
		data = []byte(c)
	} else if loc := p.Get("ssl.truststore.location"); loc != "" {
		var err error
		if data, err = os.ReadFile(loc); err != nil {
			return nil, fmt.Errorf("ssl.truststore.location: %w", err)
		}
		if t := strings.ToUpper(p.Get("ssl.truststore.type")); t == "" || t == "PKCS12" {
			certs, err := pkcs12TrustStore(data, p.Get("ssl.truststore.password"))
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

// ReauthMs parses connections.max.reauth.ms (0: no re-authentication).
func ReauthMs(m map[string]string) (time.Duration, error) {
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

// ControllerListener takes the listener named name ("": none) out of
// ls: Kafka's controller listener is the controller port, not a listener
// for clients. It returns the other listeners and where the controller
// port binds.
func ControllerListener(ls []*Listener, name string) ([]*Listener, string, error) {
	if name == "" {
		return ls, "", nil
	}
	i := slices.IndexFunc(ls, func(l *Listener) bool { return l.Name == name })
	if i < 0 || len(ls) == 1 {
		return nil, "", fmt.Errorf("server: controller.listener.names %s must name one of several listeners", name)
	}
	bind := ls[i].Bind
	return slices.Delete(ls, i, i+1), bind, nil
}

// Bind binds ls and returns their endpoints as registered
// (name://advertised address; an advertised port 0 is the bound one).
func Bind(ls []*Listener) (endpoints []string, err error) {
	for _, l := range ls {
		if l.ln, err = net.Listen("tcp", l.Bind); err != nil {
			return nil, fmt.Errorf("server: listener %s on %s: %w", l.Name, l.Bind, err)
		}
		l.addr = l.ln.Addr().String()
		if l.Advertise == "" {
			l.Advertise = l.addr
		} else if h, p, _ := net.SplitHostPort(l.Advertise); p == "0" {
			_, bound, _ := net.SplitHostPort(l.addr)
			l.Advertise = net.JoinHostPort(h, bound)
		}
		endpoints = append(endpoints, l.Name+"://"+l.Advertise)
	}
	return endpoints, nil
}
