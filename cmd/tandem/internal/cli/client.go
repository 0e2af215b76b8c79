package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/internal/kafkaclient"
	"github.com/tandem-kafka/tandem/internal/properties"
)

// ClientFlags are the flags of every command that talks to a cluster:
// where it is and how to log in, as Kafka's tools take them. The flags
// become Kafka client properties, over those of --command-config, and
// kafkaclient turns the properties into franz-go options: one meaning for
// a file that Kafka's tools read too.
type ClientFlags struct {
	what          string // "cluster", "destination cluster": for help and errors
	bootstrap     string
	commandConfig string
	protocol      string
	mechanism     string
	user          string
	password      string
	tlsCA         string
	tlsCert       string
	tlsKey        string
}

// defaultBootstrap is the cluster a command talks to when neither
// --bootstrap-server nor the --command-config file names one: the one
// `tandem serve` starts with no flags.
const defaultBootstrap = "127.0.0.1:9092"

// Register adds the flags to fs; what names the cluster in their help.
func (c *ClientFlags) Register(fs *Flags, what string) {
	c.what = what
	fs.StringVar(&c.bootstrap, "bootstrap-server", "", what+" `HOST:PORT[,HOST:PORT...]`, as tandem cluster prints it (default "+defaultBootstrap+", or bootstrap.servers of --command-config)")
	fs.StringVar(&c.commandConfig, "command-config", "", "Kafka client properties `FILE`: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ssl.keystore.location (PEM), ... (docs/cli.md)")
	fs.StringVar(&c.protocol, "security-protocol", "", "`PROTOCOL`: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (default: what the SASL and TLS flags imply)")
	fs.StringVar(&c.mechanism, "sasl-mechanism", "", "SASL `MECHANISM`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with --sasl-username and --sasl-password")
	fs.StringVar(&c.user, "sasl-username", "", "SASL `USER`")
	fs.StringVar(&c.password, "sasl-password", "", "SASL `PASSWORD` (visible to ps: --command-config keeps it in a file)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "TLS: PEM `FILE` of the certificates to trust (default: the system's, with --security-protocol SSL)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "TLS: PEM `FILE` of the client certificate chain, with --tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "TLS: PEM `FILE` of the client's unencrypted private key")
}

// commandConfigKeys are the keys --command-config may hold: the ones
// kafkaclient reads, the bootstrap list and the client ID. Any other key
// is refused: a mistyped ssl.* key silently ignored would connect in
// plaintext.
var commandConfigKeys = append([]string{"bootstrap.servers", "client.id"}, kafkaclient.Keys...)

// props returns the client properties the flags describe.
func (c *ClientFlags) props() (map[string]string, error) {
	props := map[string]string{}
	if c.commandConfig != "" {
		f, err := os.Open(c.commandConfig)
		if err != nil {
			return nil, UsageErrorf("--command-config: %v", err)
		}
		props, err = properties.Read(f)
		f.Close()
		if err != nil {
			return nil, UsageErrorf("--command-config %s: %v", c.commandConfig, err)
		}
		for k := range props {
			if !slices.Contains(commandConfigKeys, k) {
				return nil, UsageErrorf("--command-config %s: %s is not a setting tandem reads (it reads %s)", c.commandConfig, k, strings.Join(commandConfigKeys, ", "))
			}
		}
	}
	if c.bootstrap != "" {
		props["bootstrap.servers"] = c.bootstrap
	}
	if props["bootstrap.servers"] == "" {
		props["bootstrap.servers"] = defaultBootstrap
	}
	tls := c.tlsCA != "" || c.tlsCert != "" || c.tlsKey != ""
	sasl := c.mechanism != "" || c.user != "" || c.password != ""
	if c.protocol != "" {
		props["security.protocol"] = strings.ToUpper(c.protocol)
	} else if tls || sasl {
		proto := strings.ToUpper(props["security.protocol"])
		switch {
		case tls && sasl || tls && strings.HasPrefix(proto, "SASL") || sasl && strings.HasSuffix(proto, "SSL"):
			proto = "SASL_SSL"
		case tls:
			proto = "SSL"
		default:
			proto = "SASL_PLAINTEXT"
		}
		props["security.protocol"] = proto
	}
	proto := props["security.protocol"]
	if sasl {
		mech := strings.ToUpper(c.mechanism)
		switch mech {
		case "":
			mech = strings.ToUpper(props["sasl.mechanism"])
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return nil, UsageErrorf("--sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (OAUTHBEARER: sasl.oauthbearer.token in --command-config)", c.mechanism)
		}
		if mech != "" {
			props["sasl.mechanism"] = mech
		}
		if c.user != "" || c.password != "" {
			if c.user == "" || c.password == "" || strings.ContainsRune(c.user+c.password, '"') {
				return nil, UsageErrorf("--sasl-username and --sasl-password go together (and hold no double quote)")
			}
			props["sasl.jaas.config"] = kafkaclient.JAAS(mech, c.user, c.password)
		} else if props["sasl.jaas.config"] == "" {
			return nil, UsageErrorf("--sasl-mechanism %s needs --sasl-username and --sasl-password (or sasl.jaas.config in --command-config)", CmpOr(mech, "PLAIN"))
		}
		if !strings.HasPrefix(proto, "SASL") {
			return nil, UsageErrorf("SASL flags with --security-protocol %s: want SASL_PLAINTEXT or SASL_SSL", proto)
		}
	}
	if tls {
		if !strings.HasSuffix(proto, "SSL") {
			return nil, UsageErrorf("TLS flags with --security-protocol %s: want SSL or SASL_SSL", proto)
		}
		if c.tlsCA != "" {
			props["ssl.truststore.type"], props["ssl.truststore.location"] = "PEM", c.tlsCA
			delete(props, "ssl.truststore.certificates")
		}
		if (c.tlsCert == "") != (c.tlsKey == "") {
			return nil, UsageErrorf("--tls-cert and --tls-key go together")
		}
		if c.tlsCert != "" {
			chain, err := os.ReadFile(c.tlsCert)
			if err != nil {
				return nil, UsageErrorf("--tls-cert: %v", err)
			}
			key, err := os.ReadFile(c.tlsKey)
			if err != nil {
				return nil, UsageErrorf("--tls-key: %v", err)
			}
			props["ssl.keystore.type"], props["ssl.keystore.certificate.chain"], props["ssl.keystore.key"] = "PEM", string(chain), string(key)
			delete(props, "ssl.keystore.location")
		}
	}
	return props, nil
}

// CmpOr is a, or b when a is empty.
func CmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// opts returns the franz-go options of the flags and the seed addresses.
// Every error is a UsageError: nothing was sent.
func (c *ClientFlags) opts() ([]kgo.Opt, []string, error) {
	props, err := c.props()
	if err != nil {
		return nil, nil, err
	}
	seeds, err := kafkaclient.Seeds(props["bootstrap.servers"])
	if err != nil {
		return nil, nil, UsageErrorf("--bootstrap-server %q: %v", props["bootstrap.servers"], err)
	}
	security, err := kafkaclient.SecurityOpts(props)
	if err != nil {
		where := "the security flags"
		if c.commandConfig != "" {
			where = "--command-config " + c.commandConfig
		}
		return nil, nil, UsageErrorf("%s: %v", where, err)
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DialTimeout(5 * time.Second), kgo.RetryTimeout(30 * time.Second),
		kgo.ClientID(CmpOr(props["client.id"], "tandem-cli"))}, security...)
	return opts, seeds, nil
}

// Check reports a usage error in the flags without connecting.
func (c *ClientFlags) Check() error {
	_, _, err := c.opts()
	return err
}

// TLSConfig is the TLS configuration the flags ask for, nil for none.
func (c *ClientFlags) TLSConfig() (*tls.Config, error) {
	props, err := c.props()
	if err != nil || !strings.HasSuffix(strings.ToUpper(props["security.protocol"]), "SSL") {
		return nil, err
	}
	return kafkaclient.TLSConfig(props)
}

// Connect builds a client and makes sure the cluster answers (a
// broker-only Metadata request), so that an address that cannot be
// reached is said in words, once, before anything is asked:
// "cannot reach any of a:9092, b:9093: connection refused".
func (c *ClientFlags) Connect(ctx context.Context, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, seeds, err := c.opts()
	if err != nil {
		return nil, err
	}
	dials := &dialErrors{errs: map[string]error{}}
	cl, err := kgo.NewClient(slices.Concat(opts, []kgo.Opt{kgo.WithHooks(dials)}, extra)...)
	if err != nil {
		return nil, UsageError{err}
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	for {
		dials.mu.Lock()
		clear(dials.errs) // this try's causes
		dials.mu.Unlock()
		err := cl.Ping(pctx)
		if err == nil {
			return cl, nil
		}
		// A broker that is starting refuses connections for a moment,
		// so the command right after `tandem serve &` in a script would
		// fail: a refused connection is tried again for a few seconds,
		// as Kafka's tools retry until their timeout.
		if !dials.refused(seeds) || time.Since(start) > refusedRetry || pctx.Err() != nil {
			cl.Close()
			return nil, dials.reachError(c.what, seeds, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// refusedRetry is how long a cluster that refuses connections is tried.
const refusedRetry = 5 * time.Second

// refused reports whether every seed refused the connection: nothing
// listens there yet (a broker starting), as against a name that does not
// resolve or an address that does not answer.
func (d *dialErrors) refused(seeds []string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range seeds {
		if err := d.errs[s]; err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return false
		}
	}
	return true
}

// dialErrors records why each address could not be dialed.
type dialErrors struct {
	mu   sync.Mutex
	errs map[string]error
}

func (d *dialErrors) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		d.mu.Lock()
		d.errs[net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))] = err
		d.mu.Unlock()
	}
}

// reachError says why no seed answered: the cause once when every seed
// failed the same way, each seed's otherwise.
func (d *dialErrors) reachError(what string, seeds []string, last error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) == 0 { // reached, but it did not answer
		return fmt.Errorf("%s %s: %w", what, strings.Join(seeds, ", "), last)
	}
	causes := map[string]bool{}
	var each []string
	for _, s := range seeds {
		why := "not tried"
		if err, ok := d.errs[s]; ok {
			why = DialCause(err)
		}
		causes[why] = true
		each = append(each, s+" ("+why+")")
	}
	switch {
	case len(seeds) == 1:
		return fmt.Errorf("cannot reach %s %s: %s", what, seeds[0], DialCause(d.errs[seeds[0]]))
	case len(causes) == 1:
		return fmt.Errorf("cannot reach any of %s: %s", strings.Join(seeds, ", "), DialCause(d.errs[seeds[0]]))
	}
	return fmt.Errorf("cannot reach any of %s", strings.Join(each, ", "))
}

// DialCause is why a dial failed, in the words of the system: "connection
// refused", "no such host", "i/o timeout".
func DialCause(err error) string {
	var dns *net.DNSError
	var sys *os.SyscallError
	var op *net.OpError
	switch {
	case err == nil:
		return "no answer"
	case errors.As(err, &dns):
		return dns.Err
	case errors.As(err, &sys):
		return sys.Err.Error()
	case errors.As(err, &op):
		return op.Err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	}
	return err.Error()
}

// AdminCmd is one run of a command that talks to a cluster: its flags,
// the connection flags among them, and --json for a listing.
type AdminCmd struct {
	*Flags
	Client ClientFlags
	AsJSON bool
}

// NewAdminCmd returns the flag set of `tandem NAME` with the connection
// flags, and --json when listing is true.
func NewAdminCmd(name, doc string, listing bool) *AdminCmd {
	c := &AdminCmd{Flags: NewFlags(name, doc)}
	c.Client.Register(c.Flags, "cluster")
	if listing {
		c.BoolVar(&c.AsJSON, "json", false, "print JSON (shapes in docs/cli.md)")
	}
	return c
}

// Run parses args, runs check (the command line alone: a usage error
// exits 2 with nothing sent), connects and runs do with a client and its
// kadm view, within timeout (0: until SIGINT or SIGTERM). It returns the
// exit code.
func (c *AdminCmd) Run(args []string, stdout, stderr io.Writer, timeout time.Duration, check func() error,
	do func(ctx context.Context, cl *kgo.Client, adm *kadm.Client) error, extra ...kgo.Opt) int {
	if code, done := c.ParseArgs(args, stdout, stderr); done {
		return code
	}
	if check == nil {
		check = func() error { return c.NoArgs() }
	}
	if err := check(); err != nil {
		return Exit(stderr, c.Name(), err)
	}
	if err := c.Client.Check(); err != nil {
		return Exit(stderr, c.Name(), err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cl, err := c.Client.Connect(ctx, extra...)
	if err != nil {
		return Exit(stderr, c.Name(), err)
	}
	defer cl.Close()
	return Exit(stderr, c.Name(), do(ctx, cl, kadm.NewClient(cl)))
}

// NoArgs is the check of a command that takes no arguments.
func (c *AdminCmd) NoArgs() error {
	if c.NArg() > 0 {
		return UsageErrorf("unexpected arguments %q", c.Args())
	}
	return nil
}
