package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/console"
	"github.com/tandem-kafka/tandem/internal/properties"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/server"
)

type serveOptions struct {
	dataDir   string
	listen    string
	advertise string
	nodeID    int
	httpAddr  string
	config    string
	readyFile string
	logLevel  string
	sets      []string
}

const serveDoc = `Runs a broker. With no flags: data in ./tandem-data, Kafka on 127.0.0.1:9092,
HTTP (/metrics, /healthz) on 127.0.0.1:9644. SIGTERM or Ctrl-C stops it.

Usage: tandem serve [flags]

Broker properties use Kafka's names (auto.create.topics.enable,
num.partitions, message.max.bytes, log.retention.ms, ...). They come from
--config FILE (server.properties format), overridden by --set key=value.
In the file, node.id (or broker.id), log.dirs (or log.dir, first entry),
listeners and advertised.listeners (first entry, "NAME://" stripped) set
--node-id, --data-dir, --listen and --advertise, unless those flags are
given on the command line. Several listeners, or SSL and SASL ones
(listeners=PLAINTEXT://:9092,SASL_SSL://:9093 with
listener.security.protocol.map, ssl.keystore.*, ssl.truststore.*,
ssl.client.auth, sasl.enabled.mechanisms, tandem.sasl.plain.users=u:pw,...)
are passed to the broker as they are. Authorization is on when
authorizer.class.name is set (super.users, allow.everyone.if.no.acl.found).

Exit status: 0 after a clean stop, 2 when the command line or the
configuration is invalid or names what cannot be used (a data dir in use
or another node's, an address in use: nothing was started), 1 when the
broker failed.
`

func serve(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlags("serve", serveDoc)
	var o serveOptions
	fs.StringVar(&o.dataDir, "data-dir", "tandem-data", "directory holding the broker's data")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9092", "Kafka listener address (port 0 picks a free port)")
	fs.StringVar(&o.advertise, "advertise", "", "host:port told to clients (default: the bound listener address)")
	fs.IntVar(&o.nodeID, "node-id", 1, "this broker's node ID")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:9644", "HTTP address serving /metrics and /healthz (empty: none)")
	fs.StringVar(&o.config, "config", "", "broker properties `FILE` (server.properties format)")
	fs.StringVar(&o.readyFile, "ready-file", "", "once serving, write {\"kafka\":ADDR,\"http\":ADDR,\"pid\":N} as JSON to this `FILE`")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Func("set", "broker property `key=value`, overriding --config (repeatable)", func(s string) error {
		if _, _, err := parseSet(s); err != nil {
			return errors.New("want key=value")
		}
		o.sets = append(o.sets, s)
		return nil
	})
	if code, done := fs.ParseArgs(args, stdout, stderr); done {
		return code
	}
	return cli.Exit(stderr, "serve", o.run(fs, stderr))
}

// run runs `tandem serve` with the parsed options until SIGTERM or
// SIGINT, logging to stderr.
func (o *serveOptions) run(fs *cli.Flags, stderr io.Writer) error {
	if fs.NArg() > 0 {
		return cli.UsageErrorf("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return cli.UsageErrorf("--log-level: %v", err)
	}
	explicit := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	cfg, err := o.brokerConfig(explicit)
	if err != nil {
		return cli.Usage(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	b, err := tandem.NewBroker(cfg)
	if err != nil {
		return cli.Usage(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runServer(ctx, stop, b, cfg, o.httpAddr, o.readyFile)
}

// brokerConfig merges the properties file, the --set overrides and the
// flags into a server.Config. Precedence: flag > --set > file > default.
func (o *serveOptions) brokerConfig(explicit map[string]bool) (server.Config, error) {
	props := make(map[string]string)
	if o.config != "" {
		f, err := os.Open(o.config)
		if err != nil {
			return server.Config{}, fmt.Errorf("--config: %w", err)
		}
		props, err = properties.Read(f)
		f.Close()
		if err != nil {
			return server.Config{}, fmt.Errorf("--config %s: %w", o.config, err)
		}
	}
	for _, s := range o.sets {
		k, v, err := parseSet(s)
		if err != nil {
			return server.Config{}, err
		}
		props[k] = v
	}
	if err := applyFileKeys(props, o, explicit); err != nil {
		return server.Config{}, err
	}
	if o.dataDir == "" {
		return server.Config{}, errors.New("--data-dir is empty")
	}
	if o.nodeID < 0 || o.nodeID > 1<<31-1 {
		return server.Config{}, fmt.Errorf("--node-id %d out of range", o.nodeID)
	}
	return server.Config{
		NodeID:    int32(o.nodeID),
		DataDir:   o.dataDir,
		Listen:    o.listen,
		Advertise: o.advertise,
		Props:     props,
	}, nil
}

// runServer runs the broker and its HTTP endpoint until ctx is done, then
// shuts both down. stop restores default signal handling once shutdown
// begins, so that a second SIGTERM/SIGINT kills a stuck shutdown.
func runServer(ctx context.Context, stop func(), b *server.Broker, cfg server.Config, httpAddr, readyFile string) error {
	log := cfg.Logger
	// The HTTP endpoint listens before the broker starts, so that a busy
	// port fails fast and /healthz can say "not yet"; but a second broker
	// on a data dir in use hears of the data dir, not of the HTTP port.
	// What the command line names cannot be used (a data dir in use or
	// another node's, a port in use): nothing was started, exit 2.
	_, statErr := os.Stat(cfg.DataDir)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	if err := b.CheckDataDir(); err != nil {
		return cli.Usage(err)
	}
	// Nothing started: a data dir this run made (meta.properties, .lock)
	// goes again, so that the next try is a first start too.
	unused := func(err error) error {
		if fresh {
			os.RemoveAll(cfg.DataDir)
		}
		return cli.Usage(err)
	}
	b.SetProcessMemoryLimit()
	var started atomic.Bool
	var httpLn net.Listener
	con := console.New(b, log, started.Load)
	if httpAddr != "" {
		var err error
		if httpLn, err = net.Listen("tcp", httpAddr); err != nil {
			return unused(fmt.Errorf("http listener: %w", err))
		}
		hs := &http.Server{Handler: httpHandler(b, &started, con), ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(httpLn)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hs.Shutdown(sctx)
		}()
	}

	if err := b.Start(ctx); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return unused(err)
		}
		return err
	}
	started.Store(true)
	// The console samples its lag history until the broker closes.
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		if httpLn != nil {
			con.Run(sctx)
		}
	}()
	closeBroker := func() error {
		stopSampling()
		<-sampled
		return b.Close()
	}
	attrs := []any{"kafka", b.Addr(), "data_dir", cfg.DataDir, "node_id", cfg.NodeID}
	ready := readyInfo{Kafka: b.Addr(), PID: os.Getpid()}
	if httpLn != nil {
		ready.HTTP = httpLn.Addr().String()
		attrs = append(attrs, "http", ready.HTTP)
	}
	log.Info("tandem serving", attrs...)
	if readyFile != "" {
		if err := writeReadyFile(readyFile, ready); err != nil {
			closeBroker()
			return err
		}
		defer os.Remove(readyFile)
	}

	<-ctx.Done()
	stop()
	log.Info("shutting down")
	started.Store(false)
	if err := closeBroker(); err != nil {
		return fmt.Errorf("closing broker: %w", err)
	}
	log.Info("stopped")
	return nil
}

// httpHandler serves /healthz and /metrics, open to whoever reaches the
// address (as Kafka's JMX exporters are), and the console at "/".
func httpHandler(b *server.Broker, started *atomic.Bool, con http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", con)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !started.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if b.DiskFull() {
			// Not a reason to restart it: reads go on, and writes resume
			// once space is freed (DeleteRecords, DeleteTopics, disk).
			http.Error(w, "disk full: writes refused, reads served", http.StatusServiceUnavailable)
			return
		}
		if failed := b.PluginFailures(); len(failed) > 0 {
			// The broker serves on without the failed plugin, but
			// a restart is what brings it back.
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, strings.Join(failed, "\n"))
			return
		}
		// A cluster member stays serving while peers are unreachable or
		// refuse it; it says so, once per problem, under "ok".
		io.WriteString(w, "ok")
		for _, h := range b.Health() {
			fmt.Fprintf(w, "\nwarning: %s", h)
		}
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		if started.Load() {
			b.WritePrometheus(w)
		}
		prom.WriteProcessMetrics(w)
	})
	return mux
}

// readyInfo is what --ready-file holds: how to reach the started broker.
type readyInfo struct {
	Kafka string `json:"kafka"`
	HTTP  string `json:"http,omitempty"`
	PID   int    `json:"pid"`
}

// writeReadyFile writes atomically (rename), so that a reader never sees a
// half-written file.
func writeReadyFile(path string, info readyInfo) error {
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*")
	if err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("ready file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}
