// Package mirror is Tandem's Cluster Mirroring (KIP-1279): mirror topics
// that copy a source cluster's topics byte for byte, with the same
// offsets, topic IDs and leader-epoch history, so that consumers fail over
// and fail back without offset translation.
//
// The plugin serves the mirror APIs (keys 94–105), keeps each mirror
// partition's state on the coordinator runtime over __mirror_state, makes
// mirror topics read-only through the engine's AppendValidator, and runs
// one fetch loop per mirror against the source cluster with franz-go.
//
// Its leaf packages: mirrorproto (the mirror APIs' messages), mirrorcfg (a
// mirror's configs), mirrorstate (a partition's state machine and its
// __mirror_state records) and admin (the Go client of the mirror APIs).
package mirror

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror/fetch"
	"github.com/tandem-kafka/tandem/plugins/mirror/metasync"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorapi"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrormetrics"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/statestore"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Topic is the internal topic holding mirror partition states.
const Topic = mirrorstate.Topic

// Config is the plugin's part of the broker properties.
type Config struct {
	Partitions        int32 // mirror.topic.num.partitions (50)
	ReplicationFactor int16 // mirror.topic.replication.factor (3, capped at the brokers registered): of __mirror_state
	TopicRF           int16 // default.replication.factor: of mirror topics, unless their mirror says otherwise; 0 when unset (min(3, live brokers))
	MinISR            int   // min.insync.replicas (1), the static broker default
	// Fetchers is mirror.num.replica.fetchers. Unset (0), a source
	// broker gets one fetcher per 20 ms of round trip to the source, at
	// least one and at most 8 (fetchtarget.go, fetcherCount).
	Fetchers          int
	RefreshInterval   time.Duration // mirror.metadata.refresh.interval.ms (30000)
	RequestTimeout    time.Duration // mirror.request.timeout.ms (30000)
	ConnectTimeout    time.Duration // mirror.socket.connection.setup.timeout.ms (10000)
	ReconnectBackoff  time.Duration // mirror.reconnect.backoff.ms (50), doubled per failure up to 1 s
	Backoff           time.Duration // mirror.replica.fetch.backoff.ms (1000): after a failed fetch
	FetchMaxBytes     int32         // replica.fetch.max.bytes (1048576)
	FetchMinBytes     int32         // replica.fetch.min.bytes (1)
	FetchRespMaxBytes int32         // replica.fetch.response.max.bytes (10485760)
	FetchMaxWait      time.Duration // replica.fetch.wait.max.ms (500)
	// FetchSizesFixed: replica.fetch.max.bytes or
	// replica.fetch.response.max.bytes was set. Then both are fixed
	// limits, as Kafka's; else the fetchers start at their defaults and
	// follow the link (plugins/mirror/fetch, sizes.go).
	FetchSizesFixed bool
	ThrottledRate   int64 // mirror.replication.throttled.rate bytes/s (0: unlimited); dynamic
}

// ParseConfig reads the plugin's keys from broker properties.
func ParseConfig(props map[string]string) (Config, error) {
	r := plugin.ReadProps(props)
	num := func(key string, def, min int64) int64 { return r.Int(key, def, min, math.MaxInt32) }
	ms := func(key string, def, min int64) time.Duration {
		return time.Duration(num(key, def, min)) * time.Millisecond
	}
	c := Config{
		Partitions:        int32(num("mirror.topic.num.partitions", 50, 1)),
		ReplicationFactor: int16(r.Int("mirror.topic.replication.factor", 3, 1, math.MaxInt16)),
		TopicRF:           int16(r.Int("default.replication.factor", 0, 1, math.MaxInt16)),
		MinISR:            int(num("min.insync.replicas", 1, 1)),
		Fetchers:          int(num("mirror.num.replica.fetchers", 0, 1)),
		RefreshInterval:   ms("mirror.metadata.refresh.interval.ms", 30000, 1),
		RequestTimeout:    ms("mirror.request.timeout.ms", 30000, 0),
		ConnectTimeout:    ms("mirror.socket.connection.setup.timeout.ms", 10000, 0),
		ReconnectBackoff:  ms("mirror.reconnect.backoff.ms", 50, 0),
		Backoff:           ms("mirror.replica.fetch.backoff.ms", 1000, 0),
		FetchMaxBytes:     int32(num("replica.fetch.max.bytes", 1048576, 0)),
		FetchMinBytes:     int32(num("replica.fetch.min.bytes", 1, 0)),
		FetchRespMaxBytes: int32(num("replica.fetch.response.max.bytes", 10485760, 0)),
		FetchMaxWait:      ms("replica.fetch.wait.max.ms", 500, 0),
		ThrottledRate:     r.Int("mirror.replication.throttled.rate", 0, 0, math.MaxInt64),
	}
	_, setMax := props["replica.fetch.max.bytes"]
	_, setResp := props["replica.fetch.response.max.bytes"]
	c.FetchSizesFixed = setMax || setResp
	return c, r.Err()
}

// Plugin is the cluster mirroring plugin: a plugin.APIHandler,
// plugin.MetadataObserver, plugin.ConfigResourceHandler,
// plugin.TopicGuard and engine.AppendValidator, and through its
// plugin.Coordinator (over __mirror_state) a plugin.Lifecycle,
// plugin.LeaderObserver and plugin.CoordinatorLocator.
type Plugin struct {
	*plugin.Coordinator
	// The mirror APIs and the MIRROR config resource, over apiBackend.
	*mirrorapi.Handler
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	ctx     context.Context // nil until Start, canceled by Stop
	cancel  context.CancelFunc
	runs    map[string]*mirrorRun // by mirror name
	metrics *mirrormetrics.Set
	meta    *metasync.Manager // metadata sync of the mirrors this broker coordinates
	store   *statestore.Store // the mirror partitions' states on __mirror_state
	// fetchBudget bounds the answers of all this broker's mirror
	// fetchers together.
	fetchBudget *fetch.Budget

	stopHook func(topic string, partition int32, step StopStep)
}

// Option configures a Plugin beyond the broker properties.
type Option func(*Plugin)

// WithStopHook calls fn after each durable step of a partition's failover
// sequence (STOPPING), on the goroutine that runs it; fn may block it.
// Tests use it to kill a broker between two steps.
func WithStopHook(fn func(topic string, partition int32, step StopStep)) Option {
	return func(p *Plugin) { p.stopHook = fn }
}

var (
	_ plugin.APIHandler            = (*Plugin)(nil)
	_ plugin.CoordinatorLocator    = (*Plugin)(nil)
	_ plugin.CoordinatorAuthorizer = (*Plugin)(nil)
	_ plugin.LeaderObserver        = (*Plugin)(nil)
	_ plugin.MetadataObserver      = (*Plugin)(nil)
	_ plugin.Lifecycle             = (*Plugin)(nil)
	_ plugin.ConfigResourceHandler = (*Plugin)(nil)
	_ plugin.PropsOwner            = (*Plugin)(nil)
	_ plugin.TopicGuard            = (*Plugin)(nil)
	_ engine.AppendValidator       = (*Plugin)(nil)
)

// New returns the plugin configured from broker properties; an invalid
// property makes Start fail. log is the broker's logger.
func New(props map[string]string, log *slog.Logger, opts ...Option) *Plugin {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := ParseConfig(props)
	p := &Plugin{cfg: cfg, log: log.With("plugin", "mirror"), runs: map[string]*mirrorRun{}, fetchBudget: fetch.NewBudget(fetch.DefaultBudget),
		stopHook: func(string, int32, StopStep) {}}
	for _, o := range opts {
		o(p)
	}
	p.meta = metasync.NewManager(metasyncPlugin{p}, metasync.Config{Log: p.log, RefreshInterval: cfg.RefreshInterval,
		RequestTimeout: cfg.RequestTimeout, ConnectTimeout: cfg.ConnectTimeout})
	if err != nil {
		err = fmt.Errorf("mirror: %w", err)
	}
	p.Coordinator = plugin.NewCoordinator(plugin.CoordinatorConfig{
		KeyType: plugin.CoordinatorMirror,
		Topic:   plugin.InternalTopic{Name: Topic, Partitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor},
		New:     func(int32) coord.StateMachine { return mirrorstate.NewShard() },
		Logger:  p.log,
		Err:     err,
	})
	p.store = statestore.New(storeCoordinator{p.Coordinator}, cfg.RequestTimeout)
	p.Handler = mirrorapi.New(apiBackend{p})
	return p
}

// Start implements plugin.Lifecycle.
func (p *Plugin) Start(ctx context.Context, host plugin.Host) error {
	if err := p.Coordinator.Start(ctx, host); err != nil {
		return err
	}
	p.mu.Lock()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.metrics = mirrormetrics.New(host.MetricsSet())
	p.mu.Unlock()
	img := host.Metadata().Image()
	p.sync(img)
	p.meta.Sync(img)
	return nil
}

// Stop implements plugin.Lifecycle: the fetch loops, the metadata syncs
// and the coordinator runtime have ended when it returns.
func (p *Plugin) Stop(ctx context.Context) error {
	p.mu.Lock()
	if p.cancel != nil {
		p.cancel()
	}
	runs := p.runs
	p.runs = map[string]*mirrorRun{}
	p.mu.Unlock()
	for _, r := range runs {
		r.stop()
	}
	p.meta.Stop()
	return p.Coordinator.Stop(ctx)
}

// OnLeaderChange implements plugin.LeaderObserver: the shards of
// __mirror_state follow leadership, and the fetch loops look again at
// the partitions they serve.
func (p *Plugin) OnLeaderChange(c plugin.LeaderChange) {
	if c.Topic == Topic {
		p.Coordinator.OnLeaderChange(c)
		return
	}
	p.poke()
}

// OnMetadataUpdate implements plugin.MetadataObserver.
func (p *Plugin) OnMetadataUpdate(_ metadata.Delta, img *metadata.Image) {
	p.sync(img)
	p.meta.Sync(img)
}

// started is the plugin's context, nil before Start and done after Stop.
func (p *Plugin) started() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.ctx.Err() != nil {
		return nil
	}
	return p.ctx
}

// sync starts a fetch loop for every mirror of img and stops those of
// mirrors that are gone or whose configs changed.
func (p *Plugin) sync(img *metadata.Image) {
	var stale []*mirrorRun
	defer func() {
		for _, r := range stale { // outside p.mu: their loops take it
			r.stop()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.ctx.Err() != nil {
		return
	}
	for name, r := range p.runs {
		m := img.Mirrors[name]
		if m == nil || !maps.Equal(m.Configs, r.configs) {
			stale = append(stale, r)
			delete(p.runs, name)
		}
	}
	for name, m := range img.Mirrors {
		if p.runs[name] == nil {
			r := newRun(p, m)
			p.runs[name] = r
			r.start()
		}
	}
	for _, r := range p.runs {
		r.poke()
	}
}

func (p *Plugin) poke() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.runs {
		r.poke()
	}
}

func (p *Plugin) run(name string) *mirrorRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[name]
}

// LocateCoordinator implements plugin.CoordinatorLocator: MIRROR keys are
// statestore.Key strings (or a mirror name for its metadata sync).
func (p *Plugin) LocateCoordinator(keyType int8, key string) (plugin.InternalTopic, int32, bool) {
	_, partition, ok := p.Coordinator.LocateCoordinator(keyType, key)
	return p.stateTopic(), partition, ok
}

// AuthorizeCoordinator implements plugin.CoordinatorAuthorizer: finding
// the coordinator of a mirror's key needs DESCRIBE on the mirror, as
// describing the mirror does.
func (p *Plugin) AuthorizeCoordinator(rc *plugin.RequestContext, _ int8, key string) error {
	name, _, _ := strings.Cut(key, ":") // statestore.Key: mirror:topic-id:partition, or the mirror's name
	return mirrorapi.Authorized(rc, kmsg.ACLOperationDescribe, name)
}

// stateTopic is __mirror_state as it is created: its replication factor
// capped at the brokers registered (a single broker gets 1, as Kafka's
// offsets.topic.replication.factor is in a one-broker setup).
func (p *Plugin) stateTopic() plugin.InternalTopic {
	t := p.Topic()
	if img := p.Image(); img != nil {
		t.ReplicationFactor = min(t.ReplicationFactor, int16(max(1, len(img.Brokers))))
	}
	return t
}

// ensureStateTopic creates __mirror_state if needed and returns once
// every partition has a leader, whose shard then loads on its first use.
func (p *Plugin) ensureStateTopic(ctx context.Context) error {
	if _, err := p.Host().EnsureTopic(ctx, p.stateTopic()); err != nil {
		return fmt.Errorf("mirror state: %w", err)
	}
	return nil
}

// epochCheck applies the KIP's rules to a mirrored batch's source leader
// epoch (SLE) and the destination's (DLE): above DLE the partition is
// fenced (EPOCH_FENCING) until DLE is bumped; within
// mirrorstate.BumpThreshold of it a proactive bump is scheduled.
func epochCheck(sle, dle int32) (fence, bump bool) {
	return sle > dle, sle <= dle && sle > dle-mirrorstate.BumpThreshold
}

// bumpMinEpoch is the BumpLeaderEpochs minimum for a source epoch: the
// controller sets max(min+1, current), so DLE becomes at least SLE +
// mirrorstate.BumpIncrement.
func bumpMinEpoch(sle int32) int32 { return sle + mirrorstate.BumpIncrement - 1 }

// maxBatchEpoch is the largest partition leader epoch of the record
// batches in b (-1 if none).
func maxBatchEpoch(b []byte) int32 {
	e := int32(-1)
	engine.LeadingBatches(b, func(h engine.BatchHeader) bool {
		e = max(e, h.PartitionLeaderEpoch)
		return true
	})
	return e
}

// code is err's Kafka error code (plugin.ErrorCode), 0 for nil, and its
// message.
func code(err error) (int16, string) {
	if err == nil {
		return 0, ""
	}
	return plugin.ErrorCode(err), err.Error()
}

// OwnsProp implements plugin.PropsOwner: the mirror.* properties and the
// replica.fetch.* ones the mirror fetchers use.
func (p *Plugin) OwnsProp(key string) bool {
	return strings.HasPrefix(key, "mirror.") || strings.HasPrefix(key, "replica.fetch.")
}
