package metasync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The tests here run the metadata sync in process against a real source
// (kfake) and a fake of what it needs of the mirror plugin and the
// broker, and check what it asks the destination's metadata to do.

const sourceClusterID = "source-cluster-1"

// fakePlugin is Plugin without a broker: states in a map (MIRRORING
// unless set), the broker's metadata a fakeMeta.
type fakePlugin struct {
	host *fakeHost
	ctx  context.Context

	mu     sync.Mutex
	states map[mirrorstate.PartitionKey]mirrorstate.PartitionState
	moved  []movedTopic // SetTopicStates calls
	pokes  int
}

// movedTopic is one SetTopicStates call on one topic: the state update
// applied to a MIRRORING partition.
type movedTopic struct {
	Mirror, Topic string
	To            mirrorstate.State
	Reason        string
}

var _ Plugin = (*fakePlugin)(nil)

func (p *fakePlugin) Host() plugin.Host              { return p.host }
func (p *fakePlugin) Image() *metadata.Image         { return p.host.meta.Image() }
func (p *fakePlugin) Started() context.Context       { return p.ctx }
func (p *fakePlugin) Contain(f func())               { f() }
func (p *fakePlugin) PartitionFor(string) int32      { return 0 }
func (p *fakePlugin) TopicRF(*metadata.Mirror) int16 { return 2 }

func (p *fakePlugin) Poke() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pokes++
}

func (p *fakePlugin) ReadState(_ context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.states[k]; ok {
		return st, nil
	}
	st := mirrorstate.NewPartitionState()
	st.State, st.TopicID = mirrorstate.Mirroring, id
	return st, nil
}

func (p *fakePlugin) SetTopicStates(_ context.Context, mirror string, topics []string, update func(*mirrorstate.PartitionState) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range topics {
		st := mirrorstate.NewPartitionState()
		st.State = mirrorstate.Mirroring
		if err := update(&st); err != nil {
			return err
		}
		p.moved = append(p.moved, movedTopic{mirror, t, st.State, st.Reason})
	}
	return nil
}

// fakeHost is the broker as the sync uses it when no groups, share or
// ACL plugin is there: its node, metadata and metrics.
type fakeHost struct {
	plugin.Host // calling anything else panics
	meta        *fakeMeta
	set         *prom.Set
}

func (h *fakeHost) NodeID() int32             { return 1 }
func (h *fakeHost) Metadata() plugin.Metadata { return h.meta }
func (h *fakeHost) MetricsSet() *prom.Set     { return h.set }
func (h *fakeHost) Plugins() []any            { return nil }
func (h *fakeHost) Contain(f func())          { f() }

// fakeMeta records the decisions the sync asks of the controller; its
// image does not change.
type fakeMeta struct {
	plugin.Metadata // calling anything else panics
	img             *metadata.Image

	mu      sync.Mutex
	created []metadata.TopicSpec
	altered []metadata.ConfigChange
	grown   map[string]int32
	bumped  map[string]int32 // "topic-partition": minimum epoch
	synced  []string         // SetMirrorSync's source cluster IDs
}

func (m *fakeMeta) Image() *metadata.Image { return m.img }

func (m *fakeMeta) AddMirrorTopics(_ context.Context, mirror string, specs []metadata.TopicSpec) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mirror != "m1" {
		return errors.New("wrong mirror " + mirror)
	}
	m.created = append(m.created, specs...)
	return nil
}

func (m *fakeMeta) AlterConfigs(_ context.Context, changes []metadata.ConfigChange) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.altered = append(m.altered, changes...)
	return nil
}

func (m *fakeMeta) CreatePartitions(_ context.Context, name string, total int32, _ bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.grown[name] = total
	return nil
}

func (m *fakeMeta) BumpLeaderEpochs(_ context.Context, id metadata.UUID, minEpochs map[int32]int32) (map[int32]int32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.img.TopicsByID[id]
	if t == nil {
		return nil, kerr.UnknownTopicID
	}
	out := map[int32]int32{}
	for partition, minEpoch := range minEpochs {
		m.bumped[fmt.Sprintf("%s-%d", t.Name, partition)] = minEpoch
		out[partition] = minEpoch + 1
	}
	return out, nil
}

func (m *fakeMeta) SetMirrorSync(_ context.Context, mirror, sourceClusterID string, _ []metadata.ACL) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.synced = append(m.synced, sourceClusterID)
	return nil
}

// startSource starts a kfake source cluster with topics (name:
// partitions) and their configs, and returns its address and the topics'
// IDs and leader epochs.
func startSource(t *testing.T, topics map[string]int32, configs map[string]map[string]*string) (string, kadm.TopicDetails) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID(sourceClusterID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range slices.Sorted(maps.Keys(topics)) {
		if _, err := adm.CreateTopic(ctx, topics[name], 1, configs[name], name); err != nil {
			t.Fatalf("create %s on the source: %v", name, err)
		}
	}
	details, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return addr, details
}

// image is a destination image with mirror m1 (configs) whose topics are
// members (with the source's IDs) and exist here with destConfigs, and
// __mirror_state led by node 1.
func image(src kadm.TopicDetails, configs map[string]string, members []string, destConfigs map[string]map[string]string) *metadata.Image {
	img := &metadata.Image{Topics: map[string]*metadata.Topic{}, TopicsByID: map[metadata.UUID]*metadata.Topic{}}
	add := func(t *metadata.Topic) {
		img.Topics[t.Name], img.TopicsByID[t.ID] = t, t
	}
	add(&metadata.Topic{Name: mirrorstate.Topic, ID: metadata.UUID{0xff}, Partitions: []metadata.Partition{{Leader: 1, LeaderEpoch: 0}}, Internal: true})
	m := &metadata.Mirror{Name: "m1", Configs: configs, Topics: map[string]metadata.MirrorTopic{}}
	for i, name := range members {
		id := metadata.UUID{0xee, byte(i)} // a topic the source does not have
		var parts []metadata.Partition
		if d, ok := src[name]; ok {
			id = metadata.UUID(d.ID)
			for range d.Partitions {
				parts = append(parts, metadata.Partition{Leader: 1, LeaderEpoch: 1})
			}
		} else {
			parts = []metadata.Partition{{Leader: 1, LeaderEpoch: 1}}
		}
		add(&metadata.Topic{Name: name, ID: id, Partitions: parts, Configs: destConfigs[name]})
		m.Topics[name] = metadata.MirrorTopic{ID: id}
	}
	img.Mirrors = map[string]*metadata.Mirror{"m1": m}
	return img
}

func newFakes(t *testing.T, img *metadata.Image) *fakePlugin {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	meta := &fakeMeta{img: img, grown: map[string]int32{}, bumped: map[string]int32{}}
	return &fakePlugin{host: &fakeHost{meta: meta, set: prom.NewSet()}, ctx: ctx, states: map[mirrorstate.PartitionKey]mirrorstate.PartitionState{}}
}

var testConfig = Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), RefreshInterval: time.Hour, RequestTimeout: 10 * time.Second, ConnectTimeout: 5 * time.Second}

func sp(s string) *string { return &s }

// TestSyncAgainstSource runs refreshes of mirror m1 (include orders\..*,
// exclude orders\.tmp) against a kfake source and checks what the
// destination is asked: the source's cluster ID recorded; the included
// topics created with the source's topic IDs, partition counts and
// configs minus the excluded ones, and nothing else; a member topic's
// configs aligned with the source's (excluded keys left alone) and its
// epoch bumped ahead of the source's; an excluded member stopped at once,
// and a member the source no longer has stopped on the second refresh
// that misses it.
func TestSyncAgainstSource(t *testing.T) {
	addr, src := startSource(t,
		map[string]int32{"orders.eu": 3, "orders.us": 1, "orders.tmp": 2, "payments": 2, "orders.eu.diverged": 1, "orders.active": 1},
		map[string]map[string]*string{
			"orders.eu": {"retention.ms": sp("7200000"), "message.timestamp.type": sp("LogAppendTime"), "min.insync.replicas": sp("2")},
			"orders.us": {"cleanup.policy": sp("compact")},
			// A member: synced, not created.
			"orders.active": {"retention.ms": sp("86400000"), "max.message.bytes": sp("100")},
		})
	img := image(src, map[string]string{"bootstrap.servers": addr, "mirror.topics.include": `orders\..*`, "mirror.topics.exclude": `orders\.tmp`},
		[]string{"orders.active", "orders.tmp", "gone.topic"},
		map[string]map[string]string{"orders.active": {"retention.ms": "1000", "segment.ms": "5", "min.insync.replicas": "2"}})
	p := newFakes(t, img)
	meta := p.host.meta

	mm := NewManager(p, testConfig)
	s := newMirrorSync(mm, p.ctx, "m1")
	t.Cleanup(func() {
		if s.cl != nil {
			s.cl.Close()
		}
	})
	if err := s.cycle(); err != nil {
		t.Fatalf("first refresh: %v", err)
	}

	if !slices.Equal(meta.synced, []string{sourceClusterID}) {
		t.Errorf("source cluster IDs recorded: %q, want [%s]", meta.synced, sourceClusterID)
	}

	// Discovery: orders.eu and orders.us, in name order, as the source has
	// them. Not payments (not included), orders.tmp (excluded),
	// orders.eu.diverged (a divergence copy) nor orders.active (a member).
	want := []metadata.TopicSpec{
		{Name: "orders.eu", ID: metadata.UUID(src["orders.eu"].ID), Partitions: 3, ReplicationFactor: 2, Configs: map[string]string{"retention.ms": "7200000"}},
		{Name: "orders.us", ID: metadata.UUID(src["orders.us"].ID), Partitions: 1, ReplicationFactor: 2, Configs: map[string]string{"cleanup.policy": "compact"}},
	}
	if len(meta.created) != len(want) {
		t.Fatalf("created %+v, want %+v", meta.created, want)
	}
	for i, w := range want {
		got := meta.created[i]
		if got.Name != w.Name || got.ID != w.ID || got.ID.IsZero() || got.Partitions != w.Partitions || got.ReplicationFactor != w.ReplicationFactor || !maps.Equal(got.Configs, w.Configs) {
			t.Errorf("created %+v, want %+v", got, w)
		}
	}
	if p.pokes == 0 {
		t.Error("the fetch loops were not woken after topics were created")
	}

	// Config sync of the member: the source's values, segment.ms (not on
	// the source) removed, min.insync.replicas (this cluster's) kept.
	alter := map[string]string{}
	for _, c := range meta.altered {
		if c.Name != "orders.active" || c.Resource != metadata.ConfigResourceTopic {
			t.Errorf("altered %+v", c)
		}
		alter[c.Key] = "<deleted>"
		if c.Value != nil {
			alter[c.Key] = *c.Value
		}
	}
	if want := map[string]string{"retention.ms": "86400000", "max.message.bytes": "100", "segment.ms": "<deleted>"}; !maps.Equal(alter, want) {
		t.Errorf("config changes %v, want %v", alter, want)
	}

	// The member's epoch (1 here) is within the threshold of the
	// source's: bumped to at least the source's + BumpIncrement.
	srcEpoch := src["orders.active"].Partitions[0].LeaderEpoch
	if got, ok := meta.bumped["orders.active-0"]; !ok || got != srcEpoch+mirrorstate.BumpIncrement-1 {
		t.Errorf("bumps %v, want orders.active-0 at %d", meta.bumped, srcEpoch+mirrorstate.BumpIncrement-1)
	}
	if len(meta.grown) != 0 {
		t.Errorf("grown %v", meta.grown)
	}

	// orders.tmp is excluded now: stopped at once. gone.topic's ID is
	// unknown to the source once: not yet.
	if want := []movedTopic{{"m1", "orders.tmp", mirrorstate.Stopping, "excluded by mirror.topics.exclude"}}; !slices.Equal(p.moved, want) {
		t.Fatalf("first refresh moved %+v, want %+v", p.moved, want)
	}
	p.moved = nil
	if err := s.cycle(); err != nil {
		t.Fatalf("second refresh: %v", err)
	}
	if want := []movedTopic{{"m1", "gone.topic", mirrorstate.Stopping, "source topic deleted"}, {"m1", "orders.tmp", mirrorstate.Stopping, "excluded by mirror.topics.exclude"}}; !slices.Equal(p.moved, want) {
		t.Fatalf("second refresh moved %+v, want %+v", p.moved, want)
	}
}

// TestSyncHaltsOnAnotherCluster: a source that answers with another
// cluster ID than the mirror recorded halts the sync before it changes
// anything, and says so (Status, the mismatch gauge). The loop is the
// Manager's, started because this broker leads the mirror's
// __mirror_state partition; Stop ends it and unregisters its metrics.
func TestSyncHaltsOnAnotherCluster(t *testing.T) {
	addr, src := startSource(t, map[string]int32{"orders.eu": 1}, nil)
	img := image(src, map[string]string{"bootstrap.servers": addr, "mirror.topics.include": ".*"}, nil, nil)
	img.Mirrors["m1"].SourceClusterID = "the-first-source"
	p := newFakes(t, img)
	mm := NewManager(p, testConfig)
	mm.Sync(img)
	deadline := time.Now().Add(20 * time.Second)
	var halt string
	for halt == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		halt, _ = mm.Status("m1")
	}
	if !strings.Contains(halt, "source cluster ID changed from the-first-source to "+sourceClusterID) {
		t.Fatalf("halt %q", halt)
	}
	gauge := `tandem_mirror_source_cluster_id_mismatch{mirror="m1"}`
	if v := p.host.set.GetOrCreateGauge(gauge, nil).Get(); v != 1 {
		t.Errorf("%s = %v, want 1", gauge, v)
	}
	mm.Stop()
	meta := p.host.meta
	if len(meta.created)+len(meta.altered)+len(meta.synced)+len(meta.bumped) != 0 || len(p.moved) != 0 {
		t.Errorf("a halted sync changed the destination: created %v altered %v synced %v bumped %v moved %v", meta.created, meta.altered, meta.synced, meta.bumped, p.moved)
	}
	if slices.Contains(p.host.set.ListMetricNames(), gauge) {
		t.Errorf("%s still registered after Stop", gauge)
	}
	if halt, _ := mm.Status("m1"); halt != "" {
		t.Errorf("status after Stop: %q", halt)
	}
}
