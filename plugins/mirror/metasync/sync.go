// Package metasync is the mirror's metadata sync (KIP-1279's
// MirrorMetadataManager): for every mirror whose metadata coordinator
// this broker is, a loop that every mirror.metadata.refresh.interval.ms
// checks the source cluster ID, discovers topics (mirror.topics.include
// and exclude) and creates them with the source's topic IDs, partition
// counts and configs, grows them, syncs their configs
// (mirror.topic.properties.exclude aside), stops those deleted or
// excluded on the source, bumps leader epochs the source is catching up
// with, and copies committed consumer and share group offsets and ACLs.
//
// It reaches the mirror plugin only through Plugin, a few methods the
// plugin implements (plugins/mirror, metadatasync.go), so that it does not
// import the plugin; the broker through plugin.Host.
package metasync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Plugin is what the metadata sync needs of the mirror plugin, which
// implements it (plugins/mirror, metadatasync.go). The sync reads and writes
// mirror partition states through it rather than through
// __mirror_state itself, since only the plugin knows which broker
// coordinates each partition.
type Plugin interface {
	// Host is the broker, nil before Start.
	Host() plugin.Host
	// Image is the latest metadata image, nil before Start.
	Image() *metadata.Image
	// Started is the plugin's context, nil before Start and after
	// Stop: the loops run under it.
	Started() context.Context
	// Contain runs a loop so that a panic in it fails the plugin, not
	// the process (plugin.Host.Contain).
	Contain(f func())
	// PartitionFor is the __mirror_state partition a key hashes to: the
	// leader of a mirror name's partition runs the mirror's sync.
	PartitionFor(key string) int32
	// ReadState is a mirror partition's state, from its coordinator.
	ReadState(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error)
	// SetTopicStates moves every partition of topics with update
	// (refused unless the KIP allows the transition) and wakes the
	// mirror's fetch loop, which carries the move out.
	SetTopicStates(ctx context.Context, mirror string, topics []string, update func(*mirrorstate.PartitionState) error) error
	// TopicRF is the replication factor of the topics mirror m creates
	// here.
	TopicRF(m *metadata.Mirror) int16
	// Poke wakes the fetch loops: topics were created or grown.
	Poke()
}

// Config is the broker properties the sync follows.
type Config struct {
	Log             *slog.Logger  // the plugin's: each mirror's loop adds mirror and component=metadata
	RefreshInterval time.Duration // mirror.metadata.refresh.interval.ms, unless the mirror sets its own
	RequestTimeout  time.Duration // mirror.request.timeout.ms: bounds one refresh's requests to the source
	ConnectTimeout  time.Duration // mirror.socket.connection.setup.timeout.ms
}

// Manager is KIP-1279's MirrorMetadataManager: for every mirror whose
// metadata coordinator this broker is (the leader of the __mirror_state
// partition the mirror's name hashes to), a loop that every
// mirror.metadata.refresh.interval.ms checks the source cluster ID,
// discovers, creates, grows, reconfigures and stops mirror topics, copies
// committed consumer group offsets and ACLs, and bumps leader epochs
// that the source is catching up with.
type Manager struct {
	p     Plugin
	cfg   Config
	mu    sync.Mutex
	syncs map[string]*mirrorSync // by mirror name
}

// NewManager returns a manager with no loop running: Sync starts them.
func NewManager(p Plugin, cfg Config) *Manager {
	return &Manager{p: p, cfg: cfg, syncs: map[string]*mirrorSync{}}
}

// Sync starts the loops of the mirrors this broker coordinates in img and
// stops the others. Never called with the plugin's lock held: stopping a
// loop waits for it, and loops take that lock (through Plugin).
func (mm *Manager) Sync(img *metadata.Image) {
	ctx := mm.p.Started()
	if ctx == nil {
		return
	}
	host := mm.p.Host()
	var stale []*mirrorSync
	mm.mu.Lock()
	for name, s := range mm.syncs {
		if img.Mirrors[name] == nil || !mm.coordinates(img, host, name) {
			stale = append(stale, s)
			delete(mm.syncs, name)
		}
	}
	for name := range img.Mirrors {
		if mm.syncs[name] == nil && mm.coordinates(img, host, name) {
			s := newMirrorSync(mm, ctx, name)
			mm.syncs[name] = s
			go mm.p.Contain(s.loop)
		}
	}
	mm.mu.Unlock()
	for _, s := range stale {
		s.stop()
	}
}

// coordinates reports whether this broker leads the __mirror_state
// partition that mirror's metadata sync hashes to.
func (mm *Manager) coordinates(img *metadata.Image, host plugin.Host, mirror string) bool {
	t := img.Topics[mirrorstate.Topic]
	i := mm.p.PartitionFor(mirror)
	return t != nil && int(i) < len(t.Partitions) && t.Partitions[i].Leader == host.NodeID()
}

// Stop stops every loop, and returns once they have ended.
func (mm *Manager) Stop() {
	mm.mu.Lock()
	syncs := mm.syncs
	mm.syncs = map[string]*mirrorSync{}
	mm.mu.Unlock()
	for _, s := range syncs {
		s.stop()
	}
}

// Status returns why a mirror's metadata sync is halted ("" if it is
// not) and how its ACL sync fares ("" when well or not configured), for
// DescribeMirrors and the console.
func (mm *Manager) Status(mirror string) (halt, aclSync string) {
	mm.mu.Lock()
	s := mm.syncs[mirror]
	mm.mu.Unlock()
	if s == nil {
		return "", ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.halt, s.aclSync
}

// mirrorSync is the metadata sync loop of one mirror.
type mirrorSync struct {
	mm     *Manager
	p      Plugin
	cfg    Config
	name   string
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	cl     *kgo.Client // to the source, created lazily
	clConf map[string]string
	// gone counts, per mirror topic, the consecutive refreshes in which
	// the source said its topic ID is unknown: two mean deleted.
	gone map[string]int
	// noACLs is set once the source is found not to serve DescribeAcls.
	noACLs bool
	// skipped are the source topics discovery left out last cycle because
	// their topic IDs are topics here under other names (logged once).
	skipped map[string]string

	mu      sync.Mutex
	halt    string // why sync is halted (a changed source cluster ID)
	aclSync string // how the ACL sync fares, for DescribeMirrors

	refreshErrs, configErrs, groupErrs, aclErrs *metrics.Counter
	duration                                    *metrics.PrometheusHistogram
	lastSuccess, mismatch                       *metrics.Gauge
	set                                         *prom.Set // where they are registered: the broker's
	names                                       []string
}

func newMirrorSync(mm *Manager, parent context.Context, name string) *mirrorSync {
	s := &mirrorSync{mm: mm, p: mm.p, cfg: mm.cfg, name: name, log: mm.cfg.Log.With("mirror", name, "component", "metadata"), done: make(chan struct{}),
		gone: map[string]int{}}
	s.ctx, s.cancel = context.WithCancel(parent)
	set := mm.p.Host().MetricsSet()
	s.set = set
	label := fmt.Sprintf("{mirror=%q}", name)
	metric := func(family string) string {
		s.names = append(s.names, family+label)
		return family + label
	}
	s.refreshErrs = set.GetOrCreateCounter(metric("tandem_mirror_metadata_refresh_errors_total"))
	s.configErrs = set.GetOrCreateCounter(metric("tandem_mirror_topic_config_sync_errors_total"))
	s.groupErrs = set.GetOrCreateCounter(metric("tandem_mirror_group_offset_sync_errors_total"))
	s.aclErrs = set.GetOrCreateCounter(metric("tandem_mirror_acl_sync_errors_total"))
	s.duration = set.GetOrCreatePrometheusHistogram(metric("tandem_mirror_metadata_sync_duration_seconds"))
	s.lastSuccess = set.GetOrCreateGauge(metric("tandem_mirror_metadata_sync_last_success_timestamp_seconds"), nil)
	s.mismatch = set.GetOrCreateGauge(metric("tandem_mirror_source_cluster_id_mismatch"), nil)
	return s
}

func (s *mirrorSync) stop() {
	s.cancel()
	<-s.done
	for _, n := range s.names {
		s.set.UnregisterMetric(n)
	}
}

func (s *mirrorSync) loop() {
	defer close(s.done)
	defer func() {
		if s.cl != nil {
			s.cl.Close()
		}
	}()
	for s.ctx.Err() == nil {
		if err := s.cycle(); err != nil && s.ctx.Err() == nil {
			s.log.Warn("mirror metadata sync", "err", err)
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(s.interval()):
		}
	}
}

// interval is mirror.metadata.refresh.interval.ms: the mirror's own
// (dynamic, through the MIRROR config resource), else the broker's.
func (s *mirrorSync) interval() time.Duration {
	if img := s.p.Image(); img != nil && img.Mirrors[s.name] != nil {
		if n, err := strconv.ParseInt(img.Mirrors[s.name].Configs["mirror.metadata.refresh.interval.ms"], 10, 64); err == nil && n > 0 {
			return time.Duration(n) * time.Millisecond
		}
	}
	return s.cfg.RefreshInterval
}

// connKeys are the mirror configs that shape the source connection; a
// change to another key keeps the client.
func connConfigs(c map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range c {
		if k == "bootstrap.servers" || strings.HasPrefix(k, "security.") || strings.HasPrefix(k, "sasl.") || strings.HasPrefix(k, "ssl.") {
			out[k] = v
		}
	}
	return out
}

func (s *mirrorSync) client(m *metadata.Mirror) (*kgo.Client, error) {
	conf := connConfigs(m.Configs)
	if s.cl != nil && maps.Equal(conf, s.clConf) {
		return s.cl, nil
	}
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
	opts, err := mirrorcfg.Timeouts{Connect: s.cfg.ConnectTimeout, Request: s.cfg.RequestTimeout}.ClientOpts(m.Configs)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.ClientID("mirror-metadata-"+s.name))...)
	if err != nil {
		return nil, fmt.Errorf("source client: %w", err)
	}
	s.cl, s.clConf = cl, conf
	return cl, nil
}

func anyMatch(res []*regexp.Regexp, s string) bool {
	return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(s) })
}

// filters are a mirror's include/exclude settings, parsed.
type filters struct {
	topicsIn, topicsEx, groupsIn, groupsEx []*regexp.Regexp
	propsEx                                map[string]bool
	acls                                   []mirrorcfg.ACLRule
}

func parseFilters(c map[string]string) (filters, error) {
	var f filters
	var errs [4]error
	f.topicsIn, errs[0] = mirrorcfg.Regexps("mirror.topics.include", c["mirror.topics.include"])
	f.topicsEx, errs[1] = mirrorcfg.Regexps("mirror.topics.exclude", c["mirror.topics.exclude"])
	groups, ok := c["mirror.groups.include"]
	if !ok {
		groups = ".*"
	}
	f.groupsIn, errs[2] = mirrorcfg.Regexps("mirror.groups.include", groups)
	var err error
	if f.groupsEx, err = mirrorcfg.Regexps("mirror.groups.exclude", c["mirror.groups.exclude"]); err != nil {
		errs[2] = err
	}
	acls, ok := c["mirror.acl.include"]
	if !ok {
		acls = "*"
	}
	f.acls, errs[3] = mirrorcfg.ParseACLRules(acls)
	f.propsEx = ExcludedProps(c)
	return f, errors.Join(errs[:]...)
}

// defaultExclude is mirror.topic.properties.exclude's default.
const defaultExclude = "follower.replication.throttled.replicas,leader.replication.throttled.replicas,message.timestamp.difference.max.ms," +
	"log.message.timestamp.before.max.ms,log.message.timestamp.after.max.ms,message.timestamp.type,unclean.leader.election.enable,min.insync.replicas,mirror.name"

// ExcludedProps is mirror.topic.properties.exclude (the KIP's default
// list when unset), always with mirror.name: the topic configs the sync
// leaves to this cluster, which the plugin lets clients alter on a mirror
// topic and AddTopicsToMirror does not copy.
func ExcludedProps(c map[string]string) map[string]bool {
	ex, ok := c["mirror.topic.properties.exclude"]
	if !ok {
		ex = defaultExclude
	}
	// This cluster's own, whatever the mirror says: min.insync.replicas
	// goes with the replication factor, which is the destination's.
	out := map[string]bool{metadata.MirrorNameConfig: true, "mirror.replication.throttled.replicas": true, "min.insync.replicas": true}
	for _, k := range strings.Split(ex, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out[k] = true
		}
	}
	return out
}

// topicPartition names a partition of a mirror topic.
type topicPartition struct {
	topic     string
	partition int32
}

// srcTopic is a topic as the source's Metadata describes it.
type srcTopic struct {
	id     uuid.UUID
	epochs []int32 // leader epoch per partition
	err    int16   // the topic's error code: its other fields are not to be trusted
}

// internalTopics are the internal topics of Kafka and Tandem: never
// mirrored, whatever the source says of them. Other names starting with
// "__" are ordinary topics.
var internalTopics = []string{"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata",
	"__remote_log_metadata", mirrorstate.Topic}

// IsInternal reports whether a source topic is internal (flagged so by
// the source, or one of Kafka's and Tandem's): never mirrored, neither
// discovered nor added by hand.
func IsInternal(name string, flagged bool) bool {
	return flagged || slices.Contains(internalTopics, name)
}

// cycle is one refresh. A changed source cluster ID halts it before it
// alters anything; otherwise each part runs even if another failed, and
// each failure counts in its metric.
func (s *mirrorSync) cycle() error {
	start := time.Now()
	img := s.p.Image()
	m := img.Mirrors[s.name]
	if m == nil {
		return nil
	}
	paused, all := s.paused(img, m)
	if all {
		return nil // a PAUSED mirror has no metadata sync at all
	}
	f, err := parseFilters(m.Configs)
	if err != nil {
		s.refreshErrs.Inc()
		return err
	}
	cl, err := s.client(m)
	if err != nil {
		s.refreshErrs.Inc()
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest() // nil Topics: all of them
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		s.refreshErrs.Inc()
		return fmt.Errorf("source metadata: %v: %w", err, mirrorproto.ErrMirrorSourceUnavailable)
	}
	if err := s.checkClusterID(ctx, m, resp); err != nil {
		s.refreshErrs.Inc()
		return err
	}
	src := map[string]srcTopic{}
	for _, t := range resp.Topics {
		if t.Topic == nil || IsInternal(*t.Topic, t.IsInternal) {
			continue
		}
		st := srcTopic{id: t.TopicID, epochs: make([]int32, len(t.Partitions)), err: t.ErrorCode}
		for _, pp := range t.Partitions {
			if int(pp.Partition) < len(st.epochs) {
				st.epochs[pp.Partition] = pp.LeaderEpoch
			}
		}
		src[*t.Topic] = st
	}
	var errs []error
	if err := s.syncTopics(ctx, cl, m, f, src, s.deleted(ctx, cl, m, src), paused); err != nil {
		errs = append(errs, err)
	}
	if err := s.syncGroups(ctx, cl, f, src, paused); err != nil {
		s.groupErrs.Inc()
		errs = append(errs, err)
	}
	if err := s.syncShareGroups(ctx, cl, f, paused); err != nil { // share.go
		s.groupErrs.Inc()
		errs = append(errs, err)
	}
	if err := s.syncACLs(ctx, cl, f); err != nil {
		s.aclErrs.Inc()
		errs = append(errs, err)
		s.setACLSync(err.Error())
	}
	s.duration.UpdateDuration(start)
	if len(errs) == 0 {
		s.lastSuccess.Set(float64(time.Now().UnixMilli()) / 1000)
	}
	return errors.Join(errs...)
}

// paused returns the mirror's PAUSED (or PAUSING) partitions, and those
// stopping at a consistent cut (whose group offsets are clamped to the
// cut, not synced past it), which get no metadata sync (configs,
// partitions, epochs, group offsets), and
// whether every active partition is paused: then the mirror gets none at
// all, ACLs and discovery included.
func (s *mirrorSync) paused(img *metadata.Image, m *metadata.Mirror) (map[topicPartition]bool, bool) {
	paused, active := map[topicPartition]bool{}, 0
	for name, mt := range m.Topics {
		t := img.Topics[name]
		if mt.Stopped || t == nil {
			continue
		}
		for i := range t.Partitions {
			active++
			st, err := s.p.ReadState(s.ctx, mirrorstate.PartitionKey{Mirror: s.name, Topic: name, Partition: int32(i)}, t.ID)
			if err == nil && (st.State == mirrorstate.Paused || st.State == mirrorstate.Pausing || st.State == mirrorstate.Stopping && st.Cut.Set != "") {
				paused[topicPartition{name, int32(i)}] = true
			}
		}
	}
	return paused, active > 0 && len(paused) == active
}

// topicPaused reports whether any partition of topic is paused: the
// topic-wide sync (configs, growth, deletion) leaves it alone.
func topicPaused(paused map[topicPartition]bool, topic string) bool {
	for k := range paused {
		if k.topic == topic {
			return true
		}
	}
	return false
}

// checkClusterID compares the source's cluster ID with the one recorded
// when the mirror first reached it; a different one halts the sync.
func (s *mirrorSync) checkClusterID(ctx context.Context, m *metadata.Mirror, resp *kmsg.MetadataResponse) error {
	id := ""
	if resp.ClusterID != nil {
		id = *resp.ClusterID
	}
	if m.SourceClusterID != "" && id != m.SourceClusterID {
		msg := fmt.Sprintf("source cluster ID changed from %s to %s (bootstrap.servers %s): metadata sync halted", m.SourceClusterID, id, m.Configs["bootstrap.servers"])
		s.mu.Lock()
		first := s.halt == ""
		s.halt = msg
		s.mu.Unlock()
		s.mismatch.Set(1)
		if first {
			s.log.Error("mirror source cluster ID changed: metadata sync halted", "want", m.SourceClusterID, "got", id)
		}
		return fmt.Errorf("%s: %w", msg, kerr.InconsistentClusterID)
	}
	s.mu.Lock()
	s.halt = ""
	s.mu.Unlock()
	s.mismatch.Set(0)
	if m.SourceClusterID == "" && id != "" {
		if err := s.p.Host().Metadata().SetMirrorSync(ctx, s.name, id, m.ManagedACLs); err != nil {
			return fmt.Errorf("record source cluster ID: %w", err)
		}
	}
	return nil
}

// deleted returns the mirror topics the source says are gone: their
// topic ID unknown (UNKNOWN_TOPIC_ID or UNKNOWN_TOPIC_OR_PARTITION when
// asked by ID) on two consecutive refreshes. A topic the full listing
// shows with its ID is there; any other answer (an error, a timeout, a
// leaderless topic) proves nothing and resets nothing.
func (s *mirrorSync) deleted(ctx context.Context, cl *kgo.Client, m *metadata.Mirror, src map[string]srcTopic) map[string]bool {
	req := kmsg.NewPtrMetadataRequest()
	var asked []string
	for name, mt := range m.Topics {
		if st, ok := src[mt.SourceName(name)]; mt.Stopped || ok && st.err == 0 && st.id == mt.ID {
			delete(s.gone, name)
			continue
		}
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = mt.ID
		req.Topics = append(req.Topics, rt)
		asked = append(asked, name)
	}
	out := map[string]bool{}
	if len(asked) == 0 {
		return out
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return out
	}
	for _, name := range asked {
		id := m.Topics[name].ID
		i := slices.IndexFunc(resp.Topics, func(t kmsg.MetadataResponseTopic) bool { return t.TopicID == id })
		if i < 0 {
			continue
		}
		switch resp.Topics[i].ErrorCode {
		case kerr.UnknownTopicID.Code, kerr.UnknownTopicOrPartition.Code:
			if s.gone[name]++; s.gone[name] >= 2 {
				out[name] = true
			}
		case 0:
			delete(s.gone, name) // there, under this ID (renamed, or filtered from the listing)
		}
	}
	return out
}

// syncTopics discovers, creates, grows, reconfigures and stops mirror
// topics, and bumps destination epochs the source is closing in on.
// Topics are named here by their names here; src, the patterns and the
// source's configs by the source's names (mirror.topic.prefix).
func (s *mirrorSync) syncTopics(ctx context.Context, cl *kgo.Client, m *metadata.Mirror, f filters, src map[string]srcTopic, deleted map[string]bool, paused map[topicPartition]bool) error {
	meta := s.p.Host().Metadata()
	img := meta.Image()
	var errs []error
	var stop, active []string
	for name, mt := range m.Topics {
		if mt.Stopped {
			continue
		}
		st, ok := src[mt.SourceName(name)]
		switch {
		case topicPaused(paused, name):
		case deleted[name]:
			s.log.Warn("source topic deleted: stopping its mirror partitions; the destination topic is kept", "topic", name)
			stop = append(stop, name)
		case anyMatch(f.topicsEx, mt.SourceName(name)):
			s.log.Info("topic excluded by mirror.topics.exclude: stopping its mirror", "topic", name)
			stop = append(stop, name)
		case ok && st.err == 0 && st.id == mt.ID:
			active = append(active, name)
		}
	}
	added, err := s.discover(ctx, cl, m, f, src, img)
	if err != nil {
		errs = append(errs, err)
	}
	slices.Sort(stop)
	for _, name := range stop {
		reason := "source topic deleted"
		if !deleted[name] {
			reason = "excluded by mirror.topics.exclude"
		}
		if err := s.stopTopic(name, reason); err != nil {
			errs = append(errs, err)
		}
	}

	srcNames := make([]string, 0, len(active)+len(added))
	for _, name := range active {
		srcNames = append(srcNames, m.Topics[name].SourceName(name))
	}
	configs, mirrored, err := s.sourceConfigs(ctx, cl, append(srcNames, added...), f.propsEx)
	if err != nil {
		s.configErrs.Inc()
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, s.createDiscovered(ctx, m, added, src, configs, mirrored)...)
	errs = append(errs, s.syncActive(ctx, m, active, src, configs, f.propsEx)...)
	return errors.Join(errs...)
}

// createDiscovered creates the topics discovery added: each with the
// source's ID, partition count and configs, in the same metadata batch
// as its mirror membership.
func (s *mirrorSync) createDiscovered(ctx context.Context, m *metadata.Mirror, added []string, src map[string]srcTopic, configs map[string]map[string]string, mirrored map[string]bool) []error {
	meta := s.p.Host().Metadata()
	var errs []error
	prefix := mirrorcfg.Prefix(m.Configs)
	for _, name := range added {
		if prefix != "" && mirrored[name] {
			continue // a mirror topic on the source (its mirror.name says): never copied with a prefix
		}
		st := src[name]
		spec := metadata.TopicSpec{Name: prefix + name, ID: st.id, Partitions: int32(len(st.epochs)), ReplicationFactor: s.p.TopicRF(m), Configs: maps.Clone(configs[name])}
		if prefix != "" {
			spec.Source = name
		}
		if err := meta.AddMirrorTopics(ctx, s.name, []metadata.TopicSpec{spec}); err != nil {
			s.refreshErrs.Inc()
			errs = append(errs, fmt.Errorf("create mirror topic %s: %w", spec.Name, err))
			continue
		}
		s.log.Info("mirror topic discovered and created", "topic", spec.Name, "source_topic", name, "partitions", spec.Partitions)
	}
	if len(added) > 0 {
		s.p.Poke()
	}
	return errs
}

// syncActive brings the mirror topics still copied in line with their
// source: partitions added there, configs, and the periodic leader
// epoch bump.
func (s *mirrorSync) syncActive(ctx context.Context, m *metadata.Mirror, active []string, src map[string]srcTopic, configs map[string]map[string]string, propsEx map[string]bool) []error {
	meta := s.p.Host().Metadata()
	var errs []error
	img := meta.Image()
	for _, name := range active {
		srcName := m.Topics[name].SourceName(name)
		t, st := img.Topics[name], src[srcName]
		if t == nil {
			continue
		}
		if n := len(st.epochs); n > len(t.Partitions) {
			if err := meta.CreatePartitions(ctx, name, int32(n), false); err != nil {
				s.refreshErrs.Inc()
				errs = append(errs, fmt.Errorf("grow mirror topic %s to %d partitions: %w", name, n, err))
			} else {
				s.log.Info("mirror topic grown", "topic", name, "partitions", n)
				s.p.Poke()
			}
		}
		// mirror.name is the controller's, set and cleared with the
		// membership: a cycle that began before a failover finished
		// must not name the topic again.
		changes := configChanges(name, t.Configs, configs[srcName], propsEx)
		if len(changes) > 0 {
			if err := meta.AlterConfigs(ctx, changes); err != nil {
				s.configErrs.Inc()
				errs = append(errs, fmt.Errorf("sync configs of %s: %w", name, err))
			}
		}
		// Periodic epoch bump (the KIP's third trigger): keep the
		// destination epoch ahead of the source's by the bump threshold,
		// the topic's partitions in one batch.
		bumps := map[int32]int32{}
		for i, sle := range st.epochs {
			if i < len(t.Partitions) && sle > t.Partitions[i].LeaderEpoch-mirrorstate.BumpThreshold {
				bumps[int32(i)] = sle + mirrorstate.BumpIncrement - 1
			}
		}
		if len(bumps) > 0 {
			if _, err := meta.BumpLeaderEpochs(ctx, t.ID, bumps); err != nil {
				errs = append(errs, fmt.Errorf("bump epochs of %d partitions of %s: %w", len(bumps), name, err))
			}
		}
	}
	return errs
}

// discover returns the source topics (by source name) the mirror's
// patterns select that it does not hold yet and may create: not a name
// here another mirror holds, with a prefix not a mirror topic of the
// source, nor a topic whose ID this cluster holds under another name
// (logged once: the source's copy of one of ours, failed over there).
func (s *mirrorSync) discover(ctx context.Context, cl *kgo.Client, m *metadata.Mirror, f filters, src map[string]srcTopic, img *metadata.Image) ([]string, error) {
	var candidates []string
	for _, name := range slices.Sorted(maps.Keys(src)) {
		if st := src[name]; st.err == 0 && anyMatch(f.topicsIn, name) && !anyMatch(f.topicsEx, name) && !strings.HasSuffix(name, mirrorstate.DivergedSuffix) {
			candidates = append(candidates, name)
		}
	}
	prefix := mirrorcfg.Prefix(m.Configs)
	held := m.BySource()
	var sourceMirrors SourceMirrors
	if needSourceMirrors(prefix, candidates, held) {
		var err error
		if sourceMirrors, err = SourceMirrorTopics(ctx, cl); err != nil {
			return nil, fmt.Errorf("the source's mirror topics: %v: %w", err, mirrorproto.ErrMirrorSourceUnavailable)
		}
	}
	idHere := map[string]string{} // source name to the topic here holding its ID under another name
	taken := func(dest string) bool { return img.MirrorOf(dest) != "" }
	out := discoverable(candidates, prefix, held, sourceMirrors.Topics, taken)
	if prefix != "" {
		out = slices.DeleteFunc(out, func(name string) bool {
			if t := img.TopicsByID[src[name].id]; t != nil && t.Name != prefix+name {
				idHere[name] = t.Name
				return true
			}
			return false
		})
	}
	s.noteSkipped(idHere)
	return out, nil
}

// noteSkipped logs, once per topic, a source topic discovery leaves out
// because this cluster holds its topic ID under another name.
func (s *mirrorSync) noteSkipped(idHere map[string]string) {
	for name, holder := range idHere {
		if s.skipped[name] != holder {
			s.log.Info("source topic not discovered: its topic ID is already a topic here (a copy of this cluster's own topic)", "source_topic", name, "topic", holder)
		}
	}
	s.skipped = idHere
}

// stopTopic moves a mirror topic's partitions to STOPPING; the mirror's
// fetch loop finishes the stop (epoch bump, LME, barrier) and records
// STOPPED, and the topic stays with its data.
func (s *mirrorSync) stopTopic(topic, reason string) error {
	err := s.p.SetTopicStates(s.ctx, s.name, []string{topic}, func(st *mirrorstate.PartitionState) error {
		if st.State != mirrorstate.Stopping && st.State != mirrorstate.Stopped {
			st.State, st.Reason = mirrorstate.Stopping, reason
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stop mirror topic %s (%s): %w", topic, reason, err)
	}
	return nil
}

// sourceConfigs describes topics' configs on the source and keeps those
// set on the topic that are not excluded; mirrored are the topics whose
// mirror.name is set there (mirror topics of the source).
func (s *mirrorSync) sourceConfigs(ctx context.Context, cl *kgo.Client, topics []string, exclude map[string]bool) (out map[string]map[string]string, mirrored map[string]bool, err error) {
	out, mirrored = map[string]map[string]string{}, map[string]bool{}
	if len(topics) == 0 {
		return out, mirrored, nil
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range topics {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, t
		req.Resources = append(req.Resources, r)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("describe topic configs on the source: %v: %w", err, mirrorproto.ErrMirrorSourceUnavailable)
	}
	var errs []error
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			errs = append(errs, fmt.Errorf("describe configs of source topic %s: %w", r.ResourceName, kerr.ErrorForCode(r.ErrorCode)))
			continue
		}
		c := map[string]string{}
		for _, e := range r.Configs {
			if e.Name == metadata.MirrorNameConfig && e.Value != nil && *e.Value != "" {
				mirrored[r.ResourceName] = true
			}
			if e.Source == kmsg.ConfigSourceDynamicTopicConfig && e.Value != nil && !exclude[e.Name] {
				c[e.Name] = *e.Value
			}
		}
		out[r.ResourceName] = c
	}
	return out, mirrored, errors.Join(errs...)
}

// configChanges aligns a destination topic's configs with the source's:
// every key that is not excluded takes the source's value, or is removed
// when the source does not set it. Excluded keys are left alone.
func configChanges(topic string, dest, src map[string]string, exclude map[string]bool) []metadata.ConfigChange {
	var out []metadata.ConfigChange
	for _, k := range slices.Sorted(maps.Keys(src)) {
		if v, ok := dest[k]; !ok || v != src[k] {
			out = append(out, metadata.ConfigChange{Resource: metadata.ConfigResourceTopic, Name: topic, Key: k, Value: kmsg.StringPtr(src[k])})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(dest)) {
		if _, ok := src[k]; !ok && !exclude[k] {
			out = append(out, metadata.ConfigChange{Resource: metadata.ConfigResourceTopic, Name: topic, Key: k})
		}
	}
	return out
}

// syncGroups copies the committed offsets of the source's consumer groups
// (classic and consumer protocol; share groups' start offsets are
// syncShareGroups') for the mirror's active topics: a source topic's
// offsets go to its topic here (mirror.topic.prefix + its name). Groups active here are skipped;
// each offset is clamped to max(log start, min(source offset, log end))
// of the destination partition and carries its leader epoch.
func (s *mirrorSync) syncGroups(ctx context.Context, cl *kgo.Client, f filters, src map[string]srcTopic, paused map[topicPartition]bool) error {
	host := s.p.Host()
	gos, ok := plugin.Find[plugin.GroupOffsets](host.Plugins())
	if !ok {
		return nil
	}
	img := host.Metadata().Image()
	m := img.Mirrors[s.name]
	if m == nil {
		return nil
	}
	mirrored := map[string]*metadata.Topic{} // by source name: group offsets name the source's topics
	for name, mt := range m.Topics {
		if t := img.Topics[name]; !mt.Stopped && t != nil && t.ID == mt.ID {
			mirrored[mt.SourceName(name)] = t
		}
	}
	if len(mirrored) == 0 {
		return nil
	}
	var own map[string]*metadata.Topic
	if mirrorcfg.Prefix(m.Configs) != "" {
		own = ownCopies(img, src)
	}
	adm := kadm.NewClient(cl)
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("list source groups: %w", err)
	}
	if err := s.ensureGroupsTopic(ctx, gos); err != nil {
		return err
	}
	var errs []error
	for _, g := range listed.Sorted() {
		if g.GroupType == "share" || g.GroupType == "streams" || !anyMatch(f.groupsIn, g.Group) || anyMatch(f.groupsEx, g.Group) {
			continue
		}
		if err := s.syncGroup(ctx, adm, gos, g.Group, mirrored, own, paused); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", g.Group, err))
		}
	}
	return errors.Join(errs...)
}

// syncGroup copies one group's offsets: those of the mirror's topics
// (mirrored, by source name), and those of the source's copies of this
// cluster's own topics (own, by source name; a prefixed mirror only),
// which only ever move forward: the topic is written here, and a group
// of this cluster's that read further must not read again.
func (s *mirrorSync) syncGroup(ctx context.Context, adm *kadm.Client, gos plugin.GroupOffsets, group string, mirrored, own map[string]*metadata.Topic, paused map[topicPartition]bool) error {
	srcOffs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return fmt.Errorf("fetch source offsets: %w", err)
	}
	cur, state, err := gos.CommittedOffsets(ctx, group)
	if err != nil {
		return fmt.Errorf("destination offsets: %w", err)
	}
	if state != "Empty" && state != "Dead" {
		return nil // active here: the destination's consumers own its offsets
	}
	eng := s.p.Host()
	commit := map[plugin.TopicPartition]plugin.CommittedOffset{}
	srcOffs.Each(func(o kadm.OffsetResponse) {
		t, forward := mirrored[o.Topic], false
		if t == nil {
			t, forward = own[o.Topic], true
		}
		if o.Err != nil || t == nil || o.At < 0 || paused[topicPartition{t.Name, o.Partition}] {
			return
		}
		ep := eng.Partition(t.ID, o.Partition)
		if ep == nil {
			return // not hosted here: a later cycle, or another broker's partition
		}
		offs := ep.Offsets()
		at, epoch := max(offs.LogStart, min(o.At, offs.LogEnd)), o.LeaderEpoch
		if at != o.At { // clamped: the epoch of the record before it here
			epoch = -1
			if at > offs.LogStart {
				epoch = ep.EpochAt(at - 1)
			}
		}
		tp := plugin.TopicPartition{Topic: t.Name, Partition: o.Partition}
		want := plugin.CommittedOffset{Offset: at, LeaderEpoch: epoch, Metadata: o.Metadata}
		if c, ok := cur[tp]; forward && ok && c.Offset >= want.Offset {
			return // this cluster's own topic: never backwards
		} else if !ok || c != want {
			commit[tp] = want
		}
	})
	if len(commit) == 0 {
		return nil
	}
	if err := gos.CommitOffsets(ctx, group, commit); err != nil {
		if errors.Is(err, kerr.UnknownMemberID) {
			return nil // a member joined meanwhile: the group is active now
		}
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ensureGroupsTopic creates the consumer groups' internal topic if no
// client has made the broker create it yet (the groups plugin locates
// it), so that committing offsets finds it.
func (s *mirrorSync) ensureGroupsTopic(ctx context.Context, gos plugin.GroupOffsets) error {
	loc, ok := gos.(plugin.CoordinatorLocator)
	if !ok {
		return nil
	}
	if it, _, ok := loc.LocateCoordinator(plugin.CoordinatorGroup, ""); ok {
		if _, err := s.p.Host().EnsureTopic(ctx, it); err != nil {
			return fmt.Errorf("consumer groups: %w", err)
		}
	}
	return nil
}

// syncACLs copies the source's ACL bindings that mirror.acl.include
// selects and deletes those it copied earlier that are gone.
func (s *mirrorSync) syncACLs(ctx context.Context, cl *kgo.Client, f filters) error {
	host := s.p.Host()
	store, ok := plugin.Find[plugin.ACLStore](host.Plugins())
	if !ok {
		return nil
	}
	if s.noACLs {
		return nil
	}
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && resp.ErrorCode != 0 {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil && (errors.Is(err, kerr.SecurityDisabled) || !s.servesACLs(ctx, cl)) {
		// A source without ACLs (klite, kfake, a Kafka without an
		// authorizer): nothing to copy, now or later.
		s.noACLs = true
		s.setACLSync(aclUnsupported)
		s.log.Info("the source does not serve DescribeAcls: ACL sync is off for this mirror")
		return nil
	}
	if err != nil {
		return fmt.Errorf("describe source ACLs: %w", err)
	}
	m := host.Metadata().Image().Mirrors[s.name]
	if m == nil {
		return nil
	}
	dest := store.DescribeACLs(metadata.ACLFilter{ResourceType: 1, PatternType: 1, Operation: 1, Permission: 1})
	source, rules := sourceACLs(resp), f.acls
	if prefix := mirrorcfg.Prefix(m.Configs); prefix != "" {
		// The rules select by the source's names; the bindings here
		// are on ours.
		theirs, err := SourceMirrorTopics(ctx, cl)
		if err != nil {
			return fmt.Errorf("the source's mirrors: %w", err)
		}
		source, rules = prefixACLs(source, rules, prefix, theirs.Prefixes), []mirrorcfg.ACLRule{{}}
	}
	plan := planACLs(source, dest, m.ManagedACLs, rules)
	if len(plan.create) == 0 && len(plan.delete) == 0 && slices.Equal(plan.managed, m.ManagedACLs) {
		return nil
	}
	meta := host.Metadata()
	if len(plan.create) > 0 {
		// Remember them before creating them, so that a crash in between
		// cannot leave bindings here that no cycle would ever delete.
		if err := meta.SetMirrorSync(ctx, s.name, m.SourceClusterID, append(slices.Clone(m.ManagedACLs), plan.create...)); err != nil {
			return fmt.Errorf("record managed ACLs: %w", err)
		}
		if err := store.CreateACLs(ctx, plan.create); err != nil {
			return fmt.Errorf("create ACLs: %w", err)
		}
	}
	if len(plan.delete) > 0 {
		filters := make([]metadata.ACLFilter, len(plan.delete))
		for i, a := range plan.delete {
			filters[i] = exactFilter(a)
		}
		if _, err := store.DeleteACLs(ctx, filters); err != nil {
			return fmt.Errorf("delete ACLs: %w", err)
		}
	}
	if err := meta.SetMirrorSync(ctx, s.name, m.SourceClusterID, plan.managed); err != nil {
		return fmt.Errorf("record managed ACLs: %w", err)
	}
	if len(plan.create)+len(plan.delete) > 0 {
		s.log.Info("mirror ACLs synced", "created", len(plan.create), "deleted", len(plan.delete))
	}
	s.setACLSync("")
	return nil
}

const aclUnsupported = "unsupported by source"

func (s *mirrorSync) setACLSync(status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aclSync = status
}

// servesACLs reports whether the source advertises DescribeAcls (an
// unanswered ApiVersions says yes: the next cycle asks again).
func (s *mirrorSync) servesACLs(ctx context.Context, cl *kgo.Client) bool {
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		return true
	}
	return slices.ContainsFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == int16(kmsg.DescribeACLs) })
}
