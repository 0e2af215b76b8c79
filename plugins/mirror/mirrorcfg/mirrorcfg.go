// Package mirrorcfg is a mirror's configs (the MIRROR config resource):
// their keys, their validation, and the client options for its source
// cluster. It imports nothing of Tandem's but kafkaclient and
// plugins/mirror/mirrorproto, so the CLI can build a client of a mirror's
// source cluster, and check a mirror's configs, without the plugin.
package mirrorcfg

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/internal/kafkaclient"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// The configs of a mirror (the MIRROR config resource, type 64): each key
// Tandem knows, with what makes a value valid. Every key is checked when
// a mirror is created or its configs altered, so that a typo cannot
// silently connect in plaintext or stop the metadata sync. Keys of the
// KIP's table that Tandem does not implement are refused by name, with
// the reason, rather than accepted and ignored.
var mirrorConfigs = map[string]func(v string, c map[string]string) error{
	"bootstrap.servers":                     validBootstrap,
	"security.protocol":                     oneOf("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
	"sasl.mechanism":                        oneOf("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
	"sasl.jaas.config":                      validJAAS,
	"sasl.oauthbearer.token":                required("a bearer token"),
	"ssl.truststore.certificates":           validPEMCerts,
	"ssl.truststore.location":               validReadable,
	"ssl.truststore.type":                   oneOf("PEM"),
	"ssl.keystore.type":                     oneOf("PEM"),
	"ssl.keystore.certificate.chain":        validPEMCerts,
	"ssl.keystore.key":                      validKeyPair,
	"ssl.endpoint.identification.algorithm": oneOf("https", ""),
	"ssl.protocol":                          oneOf("TLS", "TLSv1.2", "TLSv1.3"),
	"ssl.enabled.protocols":                 listOf("TLSv1.2", "TLSv1.3"),
	"mirror.topics.include":                 validRegexps,
	"mirror.topics.exclude":                 validRegexps,
	"mirror.groups.include":                 validRegexps,
	"mirror.groups.exclude":                 validRegexps,
	"mirror.acl.include":                    func(v string, _ map[string]string) error { _, err := ParseACLRules(v); return err },
	"mirror.topic.properties.exclude":       func(string, map[string]string) error { return nil },
	"mirror.metadata.refresh.interval.ms":   positiveInt,
	"mirror.topic.replication.factor":       validRF,
	TopicPrefix:                             validPrefix,
}

// unsupportedConfigs are keys of the KIP's mirror table Tandem does not
// implement, with what to do instead.
var unsupportedConfigs = map[string]string{
	"sasl.kerberos.service.name":         "GSSAPI (Kerberos) is not supported",
	"sasl.client.callback.handler.class": "Java classes cannot be loaded; use sasl.oauthbearer.token for OAUTHBEARER",
	"sasl.login.callback.handler.class":  "Java classes cannot be loaded; use sasl.oauthbearer.token for OAUTHBEARER",
	"sasl.login.class":                   "Java classes cannot be loaded",
	"ssl.keystore.location":              "give the client certificate as PEM in ssl.keystore.certificate.chain and ssl.keystore.key",
	"ssl.keystore.password":              "give an unencrypted PEM key in ssl.keystore.key",
	"ssl.key.password":                   "give an unencrypted PEM key in ssl.keystore.key",
	"ssl.truststore.password":            "the truststore is PEM (ssl.truststore.certificates or ssl.truststore.location): it has no password",
	"ssl.provider":                       "Go's TLS is the only provider",
	"ssl.engine.factory.class":           "Java classes cannot be loaded",
	"ssl.keymanager.algorithm":           "Go's TLS is used",
	"ssl.trustmanager.algorithm":         "Go's TLS is used",
	"ssl.secure.random.implementation":   "Go's crypto/rand is used",
	"ssl.cipher.suites":                  "Go's TLS chooses the cipher suites",
}

// Validate checks a mirror's complete configs; the error is
// INVALID_CONFIG naming the first bad key and why.
func Validate(c map[string]string) error {
	if _, ok := c["bootstrap.servers"]; !ok {
		return fmt.Errorf("mirror config bootstrap.servers is required: %w", kerr.InvalidConfig)
	}
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if why, ok := unsupportedConfigs[k]; ok || strings.HasPrefix(k, "sasl.kerberos.") || strings.HasPrefix(k, "sasl.login.") {
			if why == "" {
				why = "not supported by Tandem"
			}
			return fmt.Errorf("mirror config %s: %s: %w", k, why, kerr.InvalidConfig)
		}
		valid, ok := mirrorConfigs[k]
		if !ok {
			return fmt.Errorf("mirror config %s: unknown key: %w", k, kerr.InvalidConfig)
		}
		if err := valid(c[k], c); err != nil {
			v := c[k]
			if Secret(k) {
				v = "(hidden)"
			}
			return fmt.Errorf("mirror config %s=%q: %v: %w", k, v, err, kerr.InvalidConfig)
		}
	}
	proto := strings.ToUpper(c["security.protocol"])
	if mech := strings.ToUpper(c["sasl.mechanism"]); mech != "" && !strings.HasPrefix(proto, "SASL") {
		return fmt.Errorf("mirror config sasl.mechanism=%s needs security.protocol SASL_PLAINTEXT or SASL_SSL, not %q: %w", mech, proto, kerr.InvalidConfig)
	}
	if strings.HasPrefix(proto, "SASL") {
		mech := cmp.Or(strings.ToUpper(c["sasl.mechanism"]), "PLAIN")
		if mech == "OAUTHBEARER" && c["sasl.oauthbearer.token"] == "" {
			return fmt.Errorf("mirror config sasl.oauthbearer.token is required for sasl.mechanism OAUTHBEARER: %w", kerr.InvalidConfig)
		}
		if mech != "OAUTHBEARER" && c["sasl.jaas.config"] == "" {
			return fmt.Errorf("mirror config sasl.jaas.config is required for sasl.mechanism %s: %w", mech, kerr.InvalidConfig)
		}
	}
	if (c["ssl.keystore.key"] == "") != (c["ssl.keystore.certificate.chain"] == "") {
		return fmt.Errorf("mirror config ssl.keystore.key and ssl.keystore.certificate.chain go together: %w", kerr.InvalidConfig)
	}
	return nil
}

// Secret reports whether a mirror config holds a secret: it is
// described as sensitive with a null value, never in clear.
func Secret(k string) bool {
	switch k {
	case "sasl.jaas.config", "ssl.keystore.key", "basic.auth.user.info", "sasl.oauthbearer.token":
		return true
	}
	return strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.Contains(k, "token")
}

func oneOf(values ...string) func(string, map[string]string) error {
	return func(v string, _ map[string]string) error {
		for _, w := range values {
			if strings.EqualFold(v, w) {
				return nil
			}
		}
		return fmt.Errorf("want one of %s", strings.Join(quoted(values), ", "))
	}
}

func listOf(values ...string) func(string, map[string]string) error {
	one := oneOf(values...)
	return func(v string, c map[string]string) error {
		for _, e := range strings.Split(v, ",") {
			if err := one(strings.TrimSpace(e), c); err != nil {
				return fmt.Errorf("%q: %w", e, err)
			}
		}
		return nil
	}
}

func quoted(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.Quote(v)
	}
	return out
}

func required(what string) func(string, map[string]string) error {
	return func(v string, _ map[string]string) error {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("want %s", what)
		}
		return nil
	}
}

func positiveInt(v string, _ map[string]string) error {
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil || n <= 0 {
		return fmt.Errorf("want a positive integer")
	}
	return nil
}

// validRF is a replication factor: 1 to 32767 (Kafka's int16).
func validRF(v string, _ map[string]string) error {
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 16); err != nil || n <= 0 {
		return fmt.Errorf("want a replication factor from 1 to %d", math.MaxInt16)
	}
	return nil
}

func validBootstrap(v string, _ map[string]string) error {
	_, err := kafkaclient.Seeds(v)
	return err
}

func validRegexps(v string, _ map[string]string) error {
	_, err := Regexps("", v)
	return err
}

func validJAAS(v string, c map[string]string) error {
	if strings.ToUpper(c["sasl.mechanism"]) == "OAUTHBEARER" {
		return nil
	}
	if user, pass := kafkaclient.JAASCredentials(v); user == "" || pass == "" {
		return fmt.Errorf(`want a login module with username="..." and password="..."`)
	}
	return nil
}

func validPEMCerts(v string, _ map[string]string) error {
	if !x509.NewCertPool().AppendCertsFromPEM([]byte(v)) {
		return fmt.Errorf("no PEM certificate in it")
	}
	return nil
}

func validReadable(v string, _ map[string]string) error {
	pem, err := os.ReadFile(v)
	if err != nil {
		return err
	}
	return validPEMCerts(string(pem), nil)
}

func validKeyPair(v string, c map[string]string) error {
	if _, err := tls.X509KeyPair([]byte(c["ssl.keystore.certificate.chain"]), []byte(v)); err != nil {
		return fmt.Errorf("not an unencrypted PEM key matching ssl.keystore.certificate.chain: %v", err)
	}
	return nil
}

// Timeouts are those of a client of a mirror's source cluster: the
// broker properties mirror.socket.connection.setup.timeout.ms (Connect)
// and mirror.request.timeout.ms (Request), which the mirror plugin reads.
type Timeouts struct {
	Connect time.Duration
	Request time.Duration
}

// DefaultTimeouts are those properties' defaults (10000 and 30000 ms).
var DefaultTimeouts = Timeouts{Connect: 10 * time.Second, Request: 30 * time.Second}

// ClientOpts returns franz-go options for a client of a mirror's source
// cluster, from the mirror's configs (bootstrap.servers, security.protocol,
// SASL, TLS), validated as CreateMirror does.
func ClientOpts(configs map[string]string) ([]kgo.Opt, error) {
	return DefaultTimeouts.ClientOpts(configs)
}

// ClientOpts turns a mirror's (validated) configs into franz-go options
// for a client of the source cluster. bootstrap.servers is a comma-
// separated list, as Kafka's.
func (t Timeouts) ClientOpts(c map[string]string) ([]kgo.Opt, error) {
	if err := Validate(c); err != nil {
		return nil, err
	}
	seeds, err := kafkaclient.Seeds(c["bootstrap.servers"])
	if err != nil {
		return nil, fmt.Errorf("mirror config bootstrap.servers: %v: %w", err, kerr.InvalidConfig)
	}
	security, err := kafkaclient.SecurityOpts(c)
	if err != nil {
		return nil, fmt.Errorf("mirror config %v: %w", err, kerr.InvalidConfig)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MaxVersions(mirrorproto.ClientVersions()), kgo.DialTimeout(t.Connect), kgo.RequestRetries(0),
		kgo.RetryTimeout(t.Request), kgo.MetadataMinAge(100 * time.Millisecond)}
	return append(opts, security...), nil
}
