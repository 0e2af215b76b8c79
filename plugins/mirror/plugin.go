// Package mirror is Tandem's Cluster Mirroring (KIP-1279): mirror topics
// that copy a source cluster's topics byte for byte, with the same
// offsets, topic IDs and leader-epoch history, so that consumers fail over
// and fail back without offset translation.
//
// The plugin serves the mirror APIs (keys 94–105), keeps each mirror
// partition's state on the coordinator runtime over __mirror_state, makes
// mirror topics read-only through the engine's AppendValidator, and runs
// one fetch loop per mirror against the source cluster with franz-go.
package mirror

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server"
)

// Topic is the internal topic holding mirror partition states.
const Topic = "__mirror_state"

// divergedSuffix names the topic that keeps the records a truncation took
// from a mirror topic: <topic>.diverged.
const divergedSuffix = ".diverged"

// Leader epoch bump constants of the KIP: the destination epoch is set to
// SLE + bumpIncrement whenever SLE > DLE - bumpThreshold.
const (
	bumpIncrement = 10
	bumpThreshold = 3
)

// Config is the plugin's part of the broker properties.
type Config struct {
	Partitions        int32         // mirror.topic.num.partitions (50)
	ReplicationFactor int16         // mirror.topic.replication.factor (3, capped at the brokers registered)
	Fetchers          int           // mirror.num.replica.fetchers (1)
	RefreshInterval   time.Duration // mirror.metadata.refresh.interval.ms (30000)
	RequestTimeout    time.Duration // mirror.request.timeout.ms (30000)
	ConnectTimeout    time.Duration // mirror.socket.connection.setup.timeout.ms (10000)
	ReconnectBackoff  time.Duration // mirror.reconnect.backoff.ms (50), doubled per failure up to 1 s
	Backoff           time.Duration // mirror.replica.fetch.backoff.ms (1000): after a failed fetch
	FetchMaxBytes     int32         // replica.fetch.max.bytes (1048576)
	FetchMinBytes     int32         // replica.fetch.min.bytes (1)
	FetchRespMaxBytes int32         // replica.fetch.response.max.bytes (10485760)
	FetchMaxWait      time.Duration // replica.fetch.wait.max.ms (500)
	ThrottledRate     int64         // mirror.replication.throttled.rate bytes/s (0: unlimited); dynamic
}

// ParseConfig reads the plugin's keys from broker properties.
func ParseConfig(props map[string]string) (Config, error) {
	var errs []error
	num := func(key string, def int64) int64 {
		s, ok := props[key]
		if !ok {
			return def
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a non-negative integer", key, s))
			return def
		}
		return n
	}
	ms := func(key string, def int64) time.Duration { return time.Duration(num(key, def)) * time.Millisecond }
	c := Config{
		Partitions:        int32(num("mirror.topic.num.partitions", 50)),
		ReplicationFactor: int16(num("mirror.topic.replication.factor", 3)),
		Fetchers:          int(num("mirror.num.replica.fetchers", 1)),
		RefreshInterval:   ms("mirror.metadata.refresh.interval.ms", 30000),
		RequestTimeout:    ms("mirror.request.timeout.ms", 30000),
		ConnectTimeout:    ms("mirror.socket.connection.setup.timeout.ms", 10000),
		ReconnectBackoff:  ms("mirror.reconnect.backoff.ms", 50),
		Backoff:           ms("mirror.replica.fetch.backoff.ms", 1000),
		FetchMaxBytes:     int32(num("replica.fetch.max.bytes", 1048576)),
		FetchMinBytes:     int32(num("replica.fetch.min.bytes", 1)),
		FetchRespMaxBytes: int32(num("replica.fetch.response.max.bytes", 10485760)),
		FetchMaxWait:      ms("replica.fetch.wait.max.ms", 500),
		ThrottledRate:     num("mirror.replication.throttled.rate", 0),
	}
	if c.Partitions <= 0 || c.ReplicationFactor <= 0 || c.RefreshInterval <= 0 {
		errs = append(errs, errors.New("mirror.topic.num.partitions, mirror.topic.replication.factor and mirror.metadata.refresh.interval.ms must be positive"))
	}
	return c, errors.Join(errs...)
}

// Plugin is the cluster mirroring plugin. It implements server.APIHandler,
// server.CoordinatorLocator, server.LeaderObserver,
// server.MetadataObserver, server.Lifecycle, server.ConfigResourceHandler,
// server.TopicGuard and engine.AppendValidator.
type Plugin struct {
	cfg    Config
	cfgErr error
	log    *slog.Logger
	rt     *coord.Runtime

	mu      sync.Mutex
	host    server.Host // nil until Start
	ctx     context.Context
	cancel  context.CancelFunc
	runs    map[string]*run // by mirror name
	metrics *pluginMetrics
	meta    *metaManager // metadata sync of the mirrors this broker coordinates

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
	_ server.APIHandler            = (*Plugin)(nil)
	_ server.CoordinatorLocator    = (*Plugin)(nil)
	_ server.LeaderObserver        = (*Plugin)(nil)
	_ server.MetadataObserver      = (*Plugin)(nil)
	_ server.Lifecycle             = (*Plugin)(nil)
	_ server.ConfigResourceHandler = (*Plugin)(nil)
	_ server.PropsOwner            = (*Plugin)(nil)
	_ server.TopicGuard            = (*Plugin)(nil)
	_ engine.AppendValidator       = (*Plugin)(nil)
)

// New returns the plugin configured from broker properties; an invalid
// property makes Start fail. log is the broker's logger.
func New(props map[string]string, log *slog.Logger, opts ...Option) *Plugin {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := ParseConfig(props)
	p := &Plugin{cfg: cfg, cfgErr: err, log: log.With("plugin", "mirror"), runs: map[string]*run{},
		stopHook: func(string, int32, StopStep) {}}
	for _, o := range opts {
		o(p)
	}
	p.meta = newMetaManager(p)
	p.rt = coord.New(coord.Config{Topic: Topic, Partitions: cfg.Partitions, Logger: p.log,
		New: func(int32) coord.StateMachine {
			return &shard{parts: map[pkey]*pstate{}, diverged: map[dkey]*manifestEntry{}}
		}})
	return p
}

// Start implements server.Lifecycle.
func (p *Plugin) Start(_ context.Context, host server.Host) error {
	if p.cfgErr != nil {
		return fmt.Errorf("mirror: %w", p.cfgErr)
	}
	p.mu.Lock()
	p.host = host
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.metrics = newPluginMetrics(p, host.MetricsSet())
	p.mu.Unlock()
	p.rt.Start(host.Engine())
	p.sync(host.Metadata().Image())
	p.meta.sync(host.Metadata().Image())
	return nil
}

// Stop implements server.Lifecycle.
func (p *Plugin) Stop(context.Context) error {
	p.mu.Lock()
	if p.cancel != nil {
		p.cancel()
	}
	runs := p.runs
	p.runs = map[string]*run{}
	p.mu.Unlock()
	for _, r := range runs {
		r.stop()
	}
	p.meta.stop()
	p.rt.Stop()
	return nil
}

// OnLeaderChange implements server.LeaderObserver.
func (p *Plugin) OnLeaderChange(c server.LeaderChange) {
	if c.Topic == Topic {
		p.rt.SetLeader(c.TopicID, c.Partition, c.Leader, c.LeaderEpoch)
		return
	}
	p.poke()
}

// OnMetadataUpdate implements server.MetadataObserver.
func (p *Plugin) OnMetadataUpdate(_ raftmeta.Delta, img *raftmeta.Image) {
	p.sync(img)
	p.meta.sync(img)
}

func (p *Plugin) image() *raftmeta.Image {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.host == nil {
		return nil
	}
	return p.host.Metadata().Image()
}

// sync starts a fetch loop for every mirror of img and stops those of
// mirrors that are gone or whose configs changed.
func (p *Plugin) sync(img *raftmeta.Image) {
	var stale []*run
	defer func() {
		for _, r := range stale { // outside p.mu: their loops take it
			r.stop()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.host == nil || p.ctx.Err() != nil {
		return
	}
	for name, r := range p.runs {
		m := img.Mirrors[name]
		if m == nil || !equalConfigs(m.Configs, r.configs) {
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

func (p *Plugin) run(name string) *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[name]
}

func equalConfigs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// LocateCoordinator implements server.CoordinatorLocator: MIRROR keys are
// coordKey strings (or a mirror name for its metadata sync).
func (p *Plugin) LocateCoordinator(keyType int8, key string) (server.InternalTopic, int32, bool) {
	if keyType != server.CoordinatorMirror {
		return server.InternalTopic{}, 0, false
	}
	return p.internalTopic(), p.rt.PartitionFor(key), true
}

// AuthorizeCoordinator implements server.CoordinatorAuthorizer: finding
// the coordinator of a mirror's key needs DESCRIBE on the mirror, as
// describing the mirror does.
func (p *Plugin) AuthorizeCoordinator(rc *server.RequestContext, _ int8, key string) error {
	name, _, _ := strings.Cut(key, ":") // coordKey: mirror:topic-id:partition, or the mirror's name
	return mirrorAuthorized(rc, kmsg.ACLOperationDescribe, name)
}

// internalTopic is __mirror_state as it is created: its replication
// factor capped at the brokers registered (a single broker gets 1, as
// Kafka's offsets.topic.replication.factor is in a one-broker setup).
func (p *Plugin) internalTopic() server.InternalTopic {
	rf := p.cfg.ReplicationFactor
	if img := p.image(); img != nil {
		rf = min(rf, int16(max(1, len(img.Brokers))))
	}
	return server.InternalTopic{Name: Topic, Partitions: p.cfg.Partitions, ReplicationFactor: rf,
		Configs: map[string]string{"cleanup.policy": "compact"}}
}

// ensureStateTopic creates __mirror_state if needed and waits until this
// broker serves its shards (single-node: it leads them all).
func (p *Plugin) ensureStateTopic(ctx context.Context) error {
	host := p.host
	img := host.Metadata().Image()
	if img.Topics[Topic] == nil {
		it := p.internalTopic()
		errs := host.Metadata().CreateTopics(ctx, []raftmeta.TopicSpec{{Name: it.Name, Partitions: it.Partitions,
			ReplicationFactor: it.ReplicationFactor, Configs: it.Configs, Internal: true}}, false)
		if err := errs[0]; err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create %s: %w", Topic, err)
		}
	}
	for {
		ok := true
		for i := range p.cfg.Partitions {
			if err := p.rt.Do(ctx, i, func(*coord.Shard) error { return nil }); err != nil {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to load: %w", Topic, kerr.CoordinatorLoadInProgress)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// epochCheck applies the KIP's rules to a mirrored batch's source leader
// epoch (SLE) and the destination's (DLE): above DLE the partition is
// fenced (EPOCH_FENCING) until DLE is bumped; within bumpThreshold of it
// a proactive bump is scheduled.
func epochCheck(sle, dle int32) (fence, bump bool) {
	return sle > dle, sle <= dle && sle > dle-bumpThreshold
}

// bumpMinEpoch is the BumpLeaderEpochs minimum for a source epoch: the
// controller sets max(min+1, current), so DLE becomes at least SLE +
// bumpIncrement.
func bumpMinEpoch(sle int32) int32 { return sle + bumpIncrement - 1 }

// maxBatchEpoch is the largest partition leader epoch of the record
// batches in b (-1 if none).
func maxBatchEpoch(b []byte) int32 {
	e := int32(-1)
	for len(b) >= 61 {
		n := int(binary.BigEndian.Uint32(b[8:])) + 12
		e = max(e, int32(binary.BigEndian.Uint32(b[12:])))
		if n > len(b) || n < 12 {
			break
		}
		b = b[n:]
	}
	return e
}

// code is err's Kafka error code (UNKNOWN_SERVER_ERROR without one), 0 for
// nil, and its message.
func code(err error) (int16, string) {
	if err == nil {
		return 0, ""
	}
	return server.ErrorCode(err), err.Error()
}

// APIVersions implements server.APIHandler.
func (p *Plugin) APIVersions() []kmsg.ApiVersionsResponseApiKey {
	var out []kmsg.ApiVersionsResponseApiKey
	for k := KeyCreateMirror; k <= KeyBumpLeaderEpochs; k++ {
		out = append(out, kmsg.ApiVersionsResponseApiKey{ApiKey: k})
	}
	return out
}

// NewRequest implements server.APIHandler.
func (p *Plugin) NewRequest(key int16) kmsg.Request { return NewRequest(key) }

// OwnsProp implements server.PropsOwner: the mirror.* properties and the
// replica.fetch.* ones the mirror fetchers use.
func (p *Plugin) OwnsProp(key string) bool {
	return strings.HasPrefix(key, "mirror.") || strings.HasPrefix(key, "replica.fetch.")
}
