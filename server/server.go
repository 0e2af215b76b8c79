// Package server is Tandem's Kafka wire-protocol front end: dispatch,
// and the handlers that turn Kafka requests into engine and metadata
// operations; the client connections (listeners, framing,
// authentication) are package network's. Broker is the embeddable broker
// type.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/admin"
	"github.com/tandem-kafka/tandem/server/datadir"
	"github.com/tandem-kafka/tandem/server/network"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/quota"
	"github.com/tandem-kafka/tandem/server/replication"
	"github.com/tandem-kafka/tandem/server/security"
	"github.com/tandem-kafka/tandem/server/wire"
)

// Config configures a Broker.
type Config struct {
	NodeID  int32  // default 1
	DataDir string // required
	// Listen is the address of the single PLAINTEXT listener used when
	// the "listeners" property is unset: default "127.0.0.1:9092"; port
	// 0 picks a free port.
	Listen    string
	Advertise string            // host:port told to clients; default the bound address
	Props     map[string]string // Kafka-style broker properties
	Plugins   []any             // hook implementations, found by type assertion
	Logger    *slog.Logger
	FS        vfs.FS // nil = disk; tests may pass a Pebble mem FS
	// Dial opens every connection this broker makes to other nodes of
	// its cluster (the controller port, replica fetches); nil is
	// net.Dialer. Tests cut the network between brokers here.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Broker is one Kafka broker: a listener, a storage engine and a member of
// the metadata quorum.
type Broker struct {
	cfg      Config
	log      *slog.Logger
	props    Props
	engine   *engine.Engine
	meta     *raftmeta.Controller
	apis     *apiTable
	admin    *admin.Admin // the admin and cluster metadata APIs
	metrics  *prom.Set
	m        *brokerMetrics
	fetch    *fetcher           // Fetch
	produce  *producer          // Produce
	coord    *coordinators      // FindCoordinator
	topics   *internalTopics    // Host.EnsureTopic
	applier  *applier           // the metadata apply loop
	reqBytes *wire.Budget       // queued.max.request.bytes
	throttle *security.Throttle // of failed SASL authentications

	// Hooks found in cfg.Plugins.
	metaObs    []*metaQueue
	lifecycles []plugin.Lifecycle
	plugins    *pluginState       // names, and which failed (contain.go)
	started    []plugin.Lifecycle // lifecycles whose Start succeeded, stopped in Close

	dirLock   *os.File            // held from Start to Close
	listeners []*network.Listener // the first one's address is Addr
	ibAuth    *interBrokerAuth    // how this broker connects to the others
	authz     plugin.Authorizer   // nil: everything is allowed
	// networkCfg is what the client connections take of the broker,
	// made by New; Start adds the metadata quorum and starts network.
	networkCfg network.Config
	network    *network.Server // nil until Start starts serving

	// A cluster member's state (cluster_*.go); zero for a standalone
	// broker, whose member only configures the metadata quorum.
	member   *membership          // registration, session, controlled shutdown
	repl     *replication.Manager // partitions led and followed; set by Start
	links    *peerLinks           // inter-broker clients, failing peers
	peers    peerClients          // Send's connections to other brokers
	aborting bool                 // Abort: no controlled shutdown

	addr     string
	ctx      context.Context // canceled by Close
	cancel   context.CancelFunc
	loops    sync.WaitGroup // metadata loop and observer queues
	applied  appliedState
	closeMu  sync.Mutex
	closed   bool
	closeErr error
}

// New validates cfg and returns a broker that Start will open.
func New(cfg Config) (*Broker, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("server: Config.DataDir is required")
	}
	if cfg.NodeID == 0 {
		cfg.NodeID = 1
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:9092"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	props, err := ParseProps(cfg.Props)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	b := &Broker{
		cfg:     cfg,
		log:     cfg.Logger.With("node", cfg.NodeID),
		props:   props,
		metrics: prom.NewSet(),
	}
	props.Unknown = slices.DeleteFunc(props.Unknown, func(k string) bool {
		return securityProps.MatchString(k) || ownedProp(cfg.Plugins, k)
	})
	controllerAddr, err := b.parseListeners(props.Cluster)
	if err != nil {
		return nil, err
	}
	b.member = &membership{nodeID: cfg.NodeID, dataDir: cfg.DataDir, props: props.Cluster, limits: props.PartitionLimits,
		controllerAddr: controllerAddr, dial: cfg.Dial, auth: b.ibAuth, log: b.log}
	b.links = &peerLinks{nodeID: cfg.NodeID, fetchResponseBytes: props.Cluster.FetchResponseBytes, auth: b.ibAuth, dial: cfg.Dial, log: b.log}
	reauth, err := network.ReauthMs(cfg.Props)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	quotas, err := quota.New(cfg.Props)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	b.reqBytes = wire.NewBudget(props.QueuedMaxRequestBytes)
	b.throttle = security.NewThrottle(props.FailedAuthDelay)
	b.produce = &producer{nodeID: cfg.NodeID, plugins: cfg.Plugins, log: b.log, applied: &b.applied, reqBytes: b.reqBytes}
	b.topics = &internalTopics{log: b.log, applied: &b.applied}
	b.coord = &coordinators{plugins: cfg.Plugins, log: b.log, applied: &b.applied, ensureTopic: b.topics.ensure}
	b.fetch = &fetcher{nodeID: cfg.NodeID, sessions: newFetchSessions(fetchSessionSlots), applied: &b.applied}
	b.admin = &admin.Admin{
		NodeID: cfg.NodeID, DataDir: cfg.DataDir, Log: b.log, Plugins: cfg.Plugins, Static: props.static,
		AutoCreateTopics: props.AutoCreateTopics, NumPartitions: props.NumPartitions,
		DefaultReplicationFactor: props.DefaultReplicationFactor, DeleteTopicEnable: props.DeleteTopicEnable,
		PartitionLimits: props.PartitionLimits,
		Image:           b.applied.get, WaitApplied: b.applied.wait, LedPartition: b.produce.ledPartition,
	}
	core := coreServers{nodeID: cfg.NodeID, plugins: cfg.Plugins, applied: &b.applied,
		produce: b.produce, fetch: b.fetch, admin: b.admin, coord: b.coord}
	if b.apis, err = newAPITable(core, func() *pluginState { return b.plugins }); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	b.peers.links, b.peers.apis = b.links, b.apis
	if err := checkCapabilities(cfg.Props, cfg.Plugins, b.apis); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if len(props.Unknown) > 0 {
		b.log.Warn("ignoring unknown broker properties", "keys", props.Unknown)
	}
	b.applied.init()
	b.m = newBrokerMetrics(b)
	b.fetch.m, b.produce.m = b.m, b.m
	b.plugins = newPluginState(b)
	registerHealthMetrics(b)
	for _, o := range plugin.All[plugin.MetadataObserver](cfg.Plugins) {
		b.metaObs = append(b.metaObs, newMetaQueue(o, b))
	}
	b.lifecycles = plugin.All[plugin.Lifecycle](cfg.Plugins)
	b.applier = &applier{nodeID: cfg.NodeID, log: b.log, applied: &b.applied, admin: b.admin, plugins: b.plugins, leaderObs: plugin.All[plugin.LeaderObserver](cfg.Plugins), metaObs: b.metaObs}
	switch authz := plugin.All[plugin.Authorizer](cfg.Plugins); len(authz) {
	case 0:
	case 1:
		b.authz = authz[0]
	default:
		return nil, fmt.Errorf("server: two authorizers, %T and %T", authz[0], authz[1])
	}
	b.networkCfg = network.Config{
		Log: b.log, Listeners: b.listeners, Metrics: b.m.net, APIs: servedAPIs{b.apis},
		Requests: b.reqBytes, MaxFrame: props.SocketRequestMaxBytes, ReadTimeout: props.RequestReadTimeout,
		FailedAuthDelay: props.FailedAuthDelay, Throttle: b.throttle, Quotas: quotas, Reauth: reauth,
		Authorizer: b.authz, Now: time.Now, Applied: b.applied.get,
	}
	return b, nil
}

// parseListeners sets the broker's client listeners and its
// inter-broker login from its properties, and returns the controller
// listener's address, taken out of them.
func (b *Broker) parseListeners(cluster ClusterProps) (controllerAddr string, err error) {
	cfg := b.cfg
	if b.listeners, err = network.ParseListeners(cfg.Props, cfg.Listen, cfg.Advertise); err != nil {
		return "", fmt.Errorf("server: %w", err)
	}
	if b.listeners, controllerAddr, err = network.ControllerListener(b.listeners, cluster.ControllerListener); err != nil {
		return "", err
	}
	if b.ibAuth, err = parseInterBrokerAuth(network.InterBroker(b.listeners, cfg.Props), cfg.Props); err != nil {
		if len(cluster.Voters) > 0 {
			return "", fmt.Errorf("server: inter-broker security: %w", err)
		}
		// A standalone broker has no peers to log in to.
		b.ibAuth = &interBrokerAuth{}
	}
	return controllerAddr, nil
}

// Start locks the data dir, binds the listeners, opens the engine and the
// metadata quorum, registers this broker, starts the plugins, reconciles
// stored partitions and leadership with the metadata image, and starts
// serving (the order package plugin documents). On error everything
// opened so far is closed again.
func (b *Broker) Start(ctx context.Context) (err error) {
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.applied.closed = b.ctx.Done()
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	// The data dir first: a dir in use or another node's must not be
	// touched, and must be refused before raft would wait forever.
	var meta datadir.Meta
	if b.dirLock, meta, err = datadir.Open(b.cfg.DataDir, b.cfg.NodeID); err != nil {
		return err
	}
	// Listen before opening storage, so that a port in use fails at once,
	// and before registering: the registration carries the bound ports.
	// Connections wait in the backlog until the accept loops start.
	endpoints, err := network.Bind(b.listeners)
	if err != nil {
		return err
	}
	b.addr = b.listeners[0].Addr()
	adv := network.InterBroker(b.listeners, b.cfg.Props).Advertise
	host, portStr, err := net.SplitHostPort(adv)
	if err != nil {
		return fmt.Errorf("server: advertised address %q: %w", adv, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("server: advertised port %q: %w", portStr, err)
	}
	b.engine, err = engine.Open(engine.Config{
		Dir:                    filepath.Join(b.cfg.DataDir, "data"),
		FS:                     b.cfg.FS,
		SyncWrites:             b.props.SyncWrites,
		Logger:                 b.log,
		Validators:             plugin.All[plugin.AppendValidator](b.cfg.Plugins),
		Observers:              plugin.All[plugin.AppendObserver](b.cfg.Plugins),
		RetentionCheckInterval: b.props.RetentionCheckInterval,
		MemoryBudget:           b.props.MemoryBudget,
	})
	if err != nil {
		return fmt.Errorf("server: open engine: %w", err)
	}
	b.meta, err = raftmeta.Open(ctx, b.member.metaConfig(b.engine, meta, host))
	if err != nil {
		return fmt.Errorf("server: open metadata: %w", err)
	}
	b.admin.Meta, b.admin.Engine = b.meta, b.engine
	b.topics.meta = b.meta
	reg := metadata.Broker{ID: b.cfg.NodeID, Host: host, Port: int32(port), Endpoints: strings.Join(endpoints, ",")}
	if b.meta.Clustered() {
		if err := b.member.join(ctx, b.meta, meta, reg, b.DiskFull); err != nil {
			return err
		}
	} else {
		if err := datadir.CheckClusterID(b.cfg.DataDir, meta, b.cfg.NodeID, b.meta.Image().ClusterID); err != nil {
			return err
		}
		if err := b.meta.RegisterBroker(ctx, reg); err != nil {
			return fmt.Errorf("server: register broker %d: %w", b.cfg.NodeID, err)
		}
	}
	// Replication needs the engine, the controller and the registration,
	// and plugins may ask it (CheckWritable, AwaitReplicated) from Start.
	b.repl = b.newReplication()
	b.fetch.engine, b.fetch.repl = b.engine, b.repl
	b.produce.engine, b.produce.repl = b.engine, b.repl
	// Plugins start before anything calls them: before leadership is
	// reported and before a request can reach them.
	for _, l := range b.lifecycles {
		if err := l.Start(ctx, pluginHost{b: b, name: b.plugins.name(l)}); err != nil {
			return fmt.Errorf("server: start plugin %T: %w", l, err)
		}
		b.started = append(b.started, l)
	}
	b.applier.engine, b.applier.meta, b.applier.repl, b.applier.done = b.engine, b.meta, b.repl, b.ctx.Done()
	if err := b.applier.reconcile(ctx); err != nil {
		return err
	}
	b.loops.Add(1 + len(b.metaObs))
	for _, q := range b.metaObs {
		go func() { defer b.loops.Done(); q.run(b.ctx) }()
	}
	go func() { defer b.loops.Done(); b.applier.loop() }()
	if b.member.session != nil {
		b.loops.Add(1)
		go func() { defer b.loops.Done(); b.repl.ISRLoop(b.ctx) }()
	}
	cfg := b.networkCfg
	cfg.Image = b.meta.Image
	b.network = network.New(cfg)
	b.network.Start(b.ctx)
	b.log.Info("broker started", "addr", b.addr, "advertised", adv, "cluster", b.meta.Image().ClusterID)
	return nil
}

// newReplication is the broker's replication, made once its engine,
// metadata quorum and registration are open (Start): what it takes of
// the broker is replication.Config.
func (b *Broker) newReplication() *replication.Manager {
	cfg := replication.Config{
		NodeID:             b.cfg.NodeID,
		Log:                b.log,
		Loops:              &b.loops,
		Engine:             b.engine,
		Controller:         b.meta,
		Images:             &b.applied,
		Peers:              b.links,
		Layers:             b.admin.Layers,
		ReplicaLagMax:      b.props.Cluster.ReplicaLagMax,
		FetchWait:          b.props.Cluster.FetchWait,
		FetchMaxBytes:      b.props.Cluster.FetchMaxBytes,
		FetchResponseBytes: b.props.Cluster.FetchResponseBytes,
		ThrottledFollower:  b.m.throttledFollower,
		ThrottledMirror:    b.m.throttledMirror,
	}
	if b.member.session != nil { // not a nil *raftmeta.Session in the interface
		cfg.Session = b.member.session
	}
	return replication.New(b.ctx, cfg)
}

// DiskFull reports whether the data directory is short of space: writes
// from clients and mirrors are refused with KAFKA_STORAGE_ERROR, while
// reads, metadata, coordinators, DeleteRecords and DeleteTopics go on.
func (b *Broker) DiskFull() bool { return b.engine != nil && b.engine.DiskFull() }

// SetProcessMemoryLimit keeps the process within the broker's memory
// budget (tandem.memory.budget): three quarters of it become the Go
// runtime's soft memory limit (the rest is for what the runtime does not
// count, such as the binary's pages, and for the runtime overshooting its
// soft limit under a burst of requests),
// unless the GOMEMLIMIT environment variable sets one. The limit is
// process-wide: for processes that run one broker, such as tandem serve,
// not for programs that embed several.
func (b *Broker) SetProcessMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		b.applier.memory.own(b.props.MemoryBudget)
	}
}

// Addr is the bound address of the first listener, host:port.
func (b *Broker) Addr() string { return b.addr }

// ListenerAddr returns the bound address of the named listener, "" if
// there is none.
func (b *Broker) ListenerAddr(name string) string {
	for _, l := range b.listeners {
		if l.Name == strings.ToUpper(name) {
			return l.Addr()
		}
	}
	return ""
}

// Close stops the listeners, closes connections and waits for their
// requests, waits for the metadata loop and the metadata observers, stops
// the plugins, and closes the metadata quorum and then the engine. It is
// safe to call twice.
func (b *Broker) Close() error {
	b.member.controlledShutdown(b.meta, func() bool {
		b.closeMu.Lock()
		defer b.closeMu.Unlock()
		return b.aborting || b.closed
	})
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return b.closeErr
	}
	b.closed = true
	for _, l := range b.listeners {
		l.Close()
	}
	if b.network != nil {
		b.network.Close()
	}
	b.closeMu.Unlock()

	// Nothing calls a plugin once its Stop begins: requests and
	// observers end first (canceling ctx ends their waits).
	if b.cancel != nil {
		b.cancel()
	}
	b.loops.Wait()
	if b.network != nil {
		b.network.Wait()
	}
	if b.member.session != nil {
		replication.Checkpoint(b.engine, b.log)
	}
	defer b.peers.close() // plugins may Send while they stop
	var errs []error
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := len(b.started) - 1; i >= 0; i-- {
		if err := b.plugins.stop(stopCtx, b.started[i]); err != nil {
			errs = append(errs, fmt.Errorf("stop plugin %T: %w", b.started[i], err))
		}
	}
	b.reqBytes.Stop()
	if b.member.session != nil {
		b.member.session.Close()
	}
	if b.meta != nil {
		if err := b.meta.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close metadata: %w", err))
		}
	}
	if b.engine != nil {
		if err := b.engine.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close engine: %w", err))
		}
	}
	if b.dirLock != nil {
		b.dirLock.Close()
	}
	b.closeMu.Lock()
	b.closeErr = errors.Join(errs...)
	b.closeMu.Unlock()
	return b.closeErr
}

// WritePrometheus writes the broker's metrics in Prometheus text format.
func (b *Broker) WritePrometheus(w io.Writer) { b.metrics.WritePrometheus(w) }

// brokerMetrics are the broker's own metrics, in its own set so that
// many brokers can run in one process.
type brokerMetrics struct {
	net                        *network.Metrics // of the client connections
	produceBytes, fetchBytes   *metrics.Counter
	produceErrors, fetchErrors *metrics.Counter
	// throttledBytes are the bytes replicated under each replication
	// throttle (server/replication/throttle.go), by side.
	throttledLeader, throttledFollower, throttledMirror *metrics.Counter
}

// brokerFamilies are the families of brokerMetrics and of the engine's
// figures (docs/metrics.md).
var brokerFamilies = []prom.Family{
	{Name: "tandem_server_connections", Type: prom.Gauge, Help: "Open client connections."},
	{Name: "tandem_server_received_bytes_total", Type: prom.Counter, Help: "Bytes of request frames read from client connections."},
	{Name: "tandem_server_sent_bytes_total", Type: prom.Counter, Help: "Bytes of response frames written to client connections."},
	{Name: "tandem_server_produce_bytes_total", Type: prom.Counter, Help: "Bytes of record batches appended by Produce requests."},
	{Name: "tandem_server_fetch_bytes_total", Type: prom.Counter, Help: "Bytes of record batches returned by Fetch requests."},
	{Name: "tandem_server_replication_throttled_bytes_total", Type: prom.Counter, Help: "Bytes of record batches replicated under a replication throttle, by side: leader, follower or mirror."},
	{Name: "tandem_server_produce_errors_total", Type: prom.Counter, Help: "Partitions of Produce requests answered with an error."},
	{Name: "tandem_server_fetch_errors_total", Type: prom.Counter, Help: "Partitions of Fetch requests answered with an error."},
	{Name: "tandem_server_requests_total", Type: prom.Counter, Help: "Requests handled, by API (label api)."},
	{Name: "tandem_server_request_duration_seconds", Type: prom.Histogram, Help: "Time from reading a request to writing its response, by API (label api), in seconds."},
	{Name: "tandem_server_request_panics_total", Type: prom.Counter, Help: "Requests whose handling panicked; each closed its connection."},
	{Name: "tandem_server_failed_authentication_total", Type: prom.Counter, Help: "Failed SASL authentications."},
	{Name: "tandem_server_authentication_throttled_total", Type: prom.Counter, Help: "SASL authentications refused unchecked because too many were waiting for the throttle."},
	{Name: "tandem_server_authentication_throttle_seconds_total", Type: prom.Counter, Help: "Seconds SASL authentications waited for the throttle."},
	{Name: "tandem_server_queued_request_bytes", Type: prom.Gauge, Help: "Bytes of requests read and not yet handled, and of their records being decompressed (bounded by queued.max.request.bytes)."},
	{Name: "tandem_engine_written_bytes_total", Type: prom.Counter, Help: "Bytes of record batches appended to partition logs."},
	{Name: "tandem_engine_appends_total", Type: prom.Counter, Help: "Appends to partition logs (duplicates excluded)."},
	{Name: "tandem_engine_partitions", Type: prom.Gauge, Help: "Partitions open on this broker."},
	{Name: "tandem_engine_open_segment_files", Type: prom.Gauge, Help: "Segment files open (bounded by half the process's open-file limit)."},
	{Name: "tandem_engine_disk_usage_bytes", Type: prom.Gauge, Help: "Bytes the storage engine's files take on disk (segment files and Pebble)."},
	{Name: "tandem_engine_disk_free_bytes", Type: prom.Gauge, Help: "Bytes free on the data directory's filesystem, as last measured."},
	{Name: "tandem_engine_disk_full", Type: prom.Gauge, Help: "1 while client writes are refused because the data directory's filesystem is below its reserve of free space, else 0."},
}

func newBrokerMetrics(b *Broker) *brokerMetrics {
	s := b.metrics
	s.Describe(brokerFamilies...)
	engineGauge := func(name string, f func(engine.Stats) float64) {
		s.NewGauge(name, func() float64 {
			if b.engine == nil {
				return 0
			}
			return f(b.engine.Metrics())
		})
	}
	engineGauge("tandem_engine_written_bytes_total", func(st engine.Stats) float64 { return float64(st.BytesWritten) })
	engineGauge("tandem_engine_appends_total", func(st engine.Stats) float64 { return float64(st.Appends) })
	engineGauge("tandem_engine_partitions", func(st engine.Stats) float64 { return float64(st.Partitions) })
	engineGauge("tandem_engine_open_segment_files", func(st engine.Stats) float64 { return float64(st.OpenFiles) })
	engineGauge("tandem_engine_disk_free_bytes", func(st engine.Stats) float64 { return float64(st.DiskFree) })
	s.NewGauge("tandem_engine_disk_full", func() float64 {
		if b.DiskFull() {
			return 1
		}
		return 0
	})
	engineGauge("tandem_engine_disk_usage_bytes", func(st engine.Stats) float64 { return float64(st.DiskUsage) })
	s.NewGauge("tandem_server_queued_request_bytes", func() float64 { return float64(b.reqBytes.InUse()) })
	clusterMetrics(b, s)
	return &brokerMetrics{
		net: &network.Metrics{
			Set:              s,
			Conns:            s.NewGauge("tandem_server_connections", nil),
			BytesIn:          s.NewCounter("tandem_server_received_bytes_total"),
			BytesOut:         s.NewCounter("tandem_server_sent_bytes_total"),
			Panics:           s.NewCounter("tandem_server_request_panics_total"),
			AuthFailures:     s.NewCounter("tandem_server_failed_authentication_total"),
			AuthThrottled:    s.NewCounter("tandem_server_authentication_throttled_total"),
			AuthThrottleWait: s.NewFloatCounter("tandem_server_authentication_throttle_seconds_total"),
		},
		produceBytes:      s.NewCounter("tandem_server_produce_bytes_total"),
		fetchBytes:        s.NewCounter("tandem_server_fetch_bytes_total"),
		throttledLeader:   s.NewCounter(`tandem_server_replication_throttled_bytes_total{side="leader"}`),
		throttledFollower: s.NewCounter(`tandem_server_replication_throttled_bytes_total{side="follower"}`),
		throttledMirror:   s.NewCounter(`tandem_server_replication_throttled_bytes_total{side="mirror"}`),
		produceErrors:     s.NewCounter("tandem_server_produce_errors_total"),
		fetchErrors:       s.NewCounter("tandem_server_fetch_errors_total"),
	}
}

// CheckDataDir reports whether Start can use the data dir: nil if it is
// free and this node's (or new), else the error Start would return. A
// program that binds other ports before Start (tandem serve's HTTP
// endpoint) calls it first, so that a data dir in use, the real cause, is
// reported rather than the port its first broker also holds.
func (b *Broker) CheckDataDir() error {
	lock, _, err := datadir.Open(b.cfg.DataDir, b.cfg.NodeID)
	if err != nil {
		return err
	}
	return lock.Close()
}
