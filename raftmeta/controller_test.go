package raftmeta

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// node is a controller on a Pebble instance that can be restarted.
type node struct {
	t   *testing.T
	fs  vfs.FS
	dir string
	db  *pebble.DB
	c   *Controller
}

func newNode(t *testing.T) *node {
	n := &node{t: t, fs: vfs.NewMem(), dir: t.TempDir()}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *node) start() {
	n.t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: n.fs})
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, Config{NodeID: 1, Dir: n.dir, DB: db, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		db.Close()
		n.t.Fatal(err)
	}
	n.db, n.c = db, c
}

func (n *node) stop() {
	if n.c == nil {
		return
	}
	if err := n.c.Close(); err != nil {
		n.t.Error(err)
	}
	if err := n.db.Close(); err != nil {
		n.t.Error(err)
	}
	n.c, n.db = nil, nil
}

func (n *node) restart() { n.stop(); n.start() }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, want *kerr.Error) {
	t.Helper()
	var ke *kerr.Error
	if !errors.As(err, &ke) || ke != want {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

func registerBrokers(t *testing.T, c *Controller, ids ...int32) {
	t.Helper()
	for _, id := range ids {
		if err := c.RegisterBroker(ctxT(t), metadata.Broker{ID: id, Host: "127.0.0.1", Port: 9000 + id}); err != nil {
			t.Fatal(err)
		}
	}
}

func mustCreate(t *testing.T, c *Controller, specs ...metadata.TopicSpec) {
	t.Helper()
	for i, err := range c.CreateTopics(ctxT(t), specs, false) {
		if err != nil {
			t.Fatalf("create %q: %v", specs[i].Name, err)
		}
	}
}

func TestOpenBootstrap(t *testing.T) {
	n := newNode(t)
	img := n.c.Image()
	if !n.c.IsLeader() || img.ControllerID != 1 {
		t.Fatalf("leader=%v controllerID=%d", n.c.IsLeader(), img.ControllerID)
	}
	if len(img.ClusterID) != 22 {
		t.Fatalf("cluster ID %q is not 22 characters", img.ClusterID)
	}
	if img.Index == 0 || img.Brokers == nil || img.Topics == nil || img.TopicsByID == nil {
		t.Fatalf("image not initialised: %+v", img)
	}
	id := img.ClusterID
	n.restart()
	if got := n.c.Image().ClusterID; got != id {
		t.Fatalf("cluster ID changed across restart: %q → %q", id, got)
	}
}

func TestCreateTopicsValidation(t *testing.T) {
	n := newNode(t)
	c := n.c
	registerBrokers(t, c, 1, 2)
	mustCreate(t, c, metadata.TopicSpec{Name: "exists", Partitions: 1, ReplicationFactor: 1}, metadata.TopicSpec{Name: "my.topic", Partitions: 1, ReplicationFactor: 1})
	existingID := c.Image().Topics["exists"].ID

	long := make([]byte, 250)
	for i := range long {
		long[i] = 'a'
	}
	tests := []struct {
		spec metadata.TopicSpec
		want *kerr.Error
	}{
		{metadata.TopicSpec{Name: "exists", Partitions: 1, ReplicationFactor: 1}, kerr.TopicAlreadyExists},
		{metadata.TopicSpec{Name: "p0", Partitions: 0, ReplicationFactor: 1}, kerr.InvalidPartitions},
		{metadata.TopicSpec{Name: "pneg", Partitions: -1, ReplicationFactor: 1}, kerr.InvalidPartitions},
		{metadata.TopicSpec{Name: "rf0", Partitions: 1, ReplicationFactor: 0}, kerr.InvalidReplicationFactor},
		{metadata.TopicSpec{Name: "rf3", Partitions: 1, ReplicationFactor: 3}, kerr.InvalidReplicationFactor},
		{metadata.TopicSpec{Name: "", Partitions: 1, ReplicationFactor: 1}, kerr.InvalidTopicException},
		{metadata.TopicSpec{Name: ".", Partitions: 1, ReplicationFactor: 1}, kerr.InvalidTopicException},
		{metadata.TopicSpec{Name: "..", Partitions: 1, ReplicationFactor: 1}, kerr.InvalidTopicException},
		{metadata.TopicSpec{Name: "a b", Partitions: 1, ReplicationFactor: 1}, kerr.InvalidTopicException},
		{metadata.TopicSpec{Name: "ü", Partitions: 1, ReplicationFactor: 1}, kerr.InvalidTopicException},
		{metadata.TopicSpec{Name: string(long), Partitions: 1, ReplicationFactor: 1}, kerr.InvalidTopicException},
		{metadata.TopicSpec{Name: "dupid", ID: existingID, Partitions: 1, ReplicationFactor: 1}, kerr.InvalidRequest},
		{metadata.TopicSpec{Name: "badassign", Assignments: [][]int32{{1}, {7}}}, kerr.InvalidReplicaAssignment},
		{metadata.TopicSpec{Name: "twice", Assignments: [][]int32{{1, 1}}}, kerr.InvalidReplicaAssignment},
		{metadata.TopicSpec{Name: "ragged", Assignments: [][]int32{{1, 2}, {1}}}, kerr.InvalidReplicaAssignment},
		{metadata.TopicSpec{Name: "contradict", Partitions: 3, Assignments: [][]int32{{1}}}, kerr.InvalidRequest},
		{metadata.TopicSpec{Name: "my_topic", Partitions: 1, ReplicationFactor: 1}, kerr.InvalidTopicException}, // collides with my.topic
	}
	specs := make([]metadata.TopicSpec, len(tests))
	for i, tt := range tests {
		specs[i] = tt.spec
	}
	before := c.Image()
	errs := c.CreateTopics(ctxT(t), specs, false)
	for i, tt := range tests {
		wantCode(t, errs[i], tt.want)
	}
	if c.Image() != before {
		t.Fatal("failed creates published a new image")
	}

	// Max-length name, valid characters, explicit ID, assignment, configs.
	ok := string(long[:249])
	id := uuid.Random()
	specs = []metadata.TopicSpec{
		{Name: ok, Partitions: 3, ReplicationFactor: 2},
		{Name: "a.B_c-9", ID: id, Assignments: [][]int32{{2, 1}, {1, 2}}, Configs: map[string]string{"cleanup.policy": "compact"}},
		{Name: "dup", Partitions: 1, ReplicationFactor: 1},
		{Name: "dup", Partitions: 1, ReplicationFactor: 1},
		{Name: "x.y", Partitions: 1, ReplicationFactor: 1},
		{Name: "x_y", Partitions: 1, ReplicationFactor: 1},
	}
	errs = c.CreateTopics(ctxT(t), specs, false)
	if errs[0] != nil || errs[1] != nil || errs[4] != nil {
		t.Fatal(errs)
	}
	wantCode(t, errs[2], kerr.InvalidRequest)
	wantCode(t, errs[3], kerr.InvalidRequest)
	wantCode(t, errs[5], kerr.InvalidTopicException)

	img := c.Image()
	big := img.Topics[ok]
	if len(big.Partitions) != 3 {
		t.Fatalf("partitions: %+v", big.Partitions)
	}
	leaders := map[int32]int{}
	for _, p := range big.Partitions {
		if len(p.Replicas) != 2 || p.Replicas[0] == p.Replicas[1] || p.Leader != p.Replicas[0] || p.LeaderEpoch != 0 || !reflect.DeepEqual(p.ISR, p.Replicas) {
			t.Fatalf("bad new partition %+v", p)
		}
		leaders[p.Leader]++
	}
	if len(leaders) != 2 {
		t.Fatalf("leaders not spread round-robin: %v", leaders)
	}
	exp := img.TopicsByID[id]
	if exp == nil || exp.Name != "a.B_c-9" || exp.Partitions[0].Leader != 2 || exp.Configs["cleanup.policy"] != "compact" {
		t.Fatalf("explicit topic: %+v", exp)
	}
	if img.Topics["dup"] != nil {
		t.Fatal("duplicate name was created")
	}

	// validateOnly writes nothing but still validates.
	before = c.Image()
	errs = c.CreateTopics(ctxT(t), []metadata.TopicSpec{{Name: "v", Partitions: 1, ReplicationFactor: 1}, {Name: "exists", Partitions: 1, ReplicationFactor: 1}}, true)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	wantCode(t, errs[1], kerr.TopicAlreadyExists)
	if c.Image() != before {
		t.Fatal("validateOnly published an image")
	}
}

func TestDeleteTopics(t *testing.T) {
	n := newNode(t)
	c := n.c
	registerBrokers(t, c, 1)
	mustCreate(t, c, metadata.TopicSpec{Name: "a", Partitions: 2, ReplicationFactor: 1}, metadata.TopicSpec{Name: "b", Partitions: 1, ReplicationFactor: 1})
	old := c.Image()
	a := old.Topics["a"]
	errs := c.DeleteTopics(ctxT(t), []metadata.UUID{a.ID, uuid.Random()})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	wantCode(t, errs[1], kerr.UnknownTopicID)
	img := c.Image()
	if img.Topics["a"] != nil || img.TopicsByID[a.ID] != nil || img.Topics["b"] == nil {
		t.Fatalf("after delete: %v", img.Topics)
	}
	if old.Topics["a"] != a || len(old.Topics) != 2 {
		t.Fatal("published image was modified")
	}
	wantCode(t, c.DeleteTopics(ctxT(t), []metadata.UUID{a.ID})[0], kerr.UnknownTopicID)
	// The name is free again, under a new ID.
	mustCreate(t, c, metadata.TopicSpec{Name: "a", Partitions: 1, ReplicationFactor: 1})
	if c.Image().Topics["a"].ID == a.ID {
		t.Fatal("re-created topic reused the ID")
	}
}

func TestCreatePartitions(t *testing.T) {
	n := newNode(t)
	c := n.c
	registerBrokers(t, c, 1, 2, 3)
	mustCreate(t, c, metadata.TopicSpec{Name: "t", Partitions: 2, ReplicationFactor: 2})
	wantCode(t, c.CreatePartitions(ctxT(t), "t", 2, false), kerr.InvalidPartitions)
	wantCode(t, c.CreatePartitions(ctxT(t), "t", 1, false), kerr.InvalidPartitions)
	wantCode(t, c.CreatePartitions(ctxT(t), "nope", 4, false), kerr.UnknownTopicOrPartition)
	if err := c.CreatePartitions(ctxT(t), "t", 9, true); err != nil {
		t.Fatal(err)
	}
	if len(c.Image().Topics["t"].Partitions) != 2 {
		t.Fatal("validateOnly added partitions")
	}
	old := c.Image().Topics["t"]
	if err := c.CreatePartitions(ctxT(t), "t", 5, false); err != nil {
		t.Fatal(err)
	}
	tp := c.Image().Topics["t"]
	if len(tp.Partitions) != 5 || len(old.Partitions) != 2 {
		t.Fatalf("partitions %d (old image %d)", len(tp.Partitions), len(old.Partitions))
	}
	if !reflect.DeepEqual(tp.Partitions[:2], old.Partitions) {
		t.Fatal("existing partitions changed")
	}
	leaders := map[int32]bool{}
	for _, p := range tp.Partitions {
		if len(p.Replicas) != 2 || p.Leader != p.Replicas[0] || p.LeaderEpoch != 0 {
			t.Fatalf("bad partition %+v", p)
		}
		leaders[p.Leader] = true
	}
	if len(leaders) != 3 {
		t.Fatalf("leaders %v not spread over 3 brokers", leaders)
	}
	d := metadata.Diff(c.Image(), c.Image())
	if !d.Empty() {
		t.Fatalf("self diff %+v", d)
	}
}

func sp(s string) *string { return &s }

func TestAlterConfigs(t *testing.T) {
	n := newNode(t)
	c := n.c
	registerBrokers(t, c, 1)
	mustCreate(t, c, metadata.TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1, Configs: map[string]string{"retention.ms": "1000"}})
	err := c.AlterConfigs(ctxT(t), []metadata.ConfigChange{
		{Resource: metadata.ConfigResourceTopic, Name: "t", Key: "retention.ms", Value: nil},
		{Resource: metadata.ConfigResourceTopic, Name: "t", Key: "cleanup.policy", Value: sp("compact")},
		{Resource: metadata.ConfigResourceBroker, Name: "", Key: "log.retention.ms", Value: sp("5")},
		{Resource: metadata.ConfigResourceBroker, Name: "1", Key: "message.max.bytes", Value: sp("100")},
	})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Image()
	if !reflect.DeepEqual(img.Topics["t"].Configs, map[string]string{"cleanup.policy": "compact"}) ||
		img.BrokerConfigs["log.retention.ms"] != "5" || img.NodeConfigs[1]["message.max.bytes"] != "100" {
		t.Fatalf("configs: topic %v broker %v node %v", img.Topics["t"].Configs, img.BrokerConfigs, img.NodeConfigs)
	}
	// Atomic: one bad change, nothing applied.
	err = c.AlterConfigs(ctxT(t), []metadata.ConfigChange{
		{Resource: metadata.ConfigResourceTopic, Name: "t", Key: "cleanup.policy", Value: nil},
		{Resource: metadata.ConfigResourceTopic, Name: "missing", Key: "x", Value: sp("y")},
	})
	wantCode(t, err, kerr.UnknownTopicOrPartition)
	wantCode(t, c.AlterConfigs(ctxT(t), []metadata.ConfigChange{{Resource: metadata.ConfigResourceBroker, Name: "x", Key: "k", Value: sp("v")}}), kerr.InvalidRequest)
	if c.Image() != img {
		t.Fatal("failed alter changed the image")
	}
	err = c.AlterConfigs(ctxT(t), []metadata.ConfigChange{
		{Resource: metadata.ConfigResourceTopic, Name: "t", Key: "cleanup.policy", Value: nil},
		{Resource: metadata.ConfigResourceBroker, Name: "", Key: "log.retention.ms", Value: nil},
		{Resource: metadata.ConfigResourceBroker, Name: "1", Key: "message.max.bytes", Value: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	img2 := c.Image()
	if img2.Topics["t"].Configs != nil || len(img2.BrokerConfigs) != 0 || len(img2.NodeConfigs) != 0 {
		t.Fatalf("configs not deleted: %v %v %v", img2.Topics["t"].Configs, img2.BrokerConfigs, img2.NodeConfigs)
	}
	if img.BrokerConfigs["log.retention.ms"] != "5" || img.Topics["t"].Configs["cleanup.policy"] != "compact" {
		t.Fatal("published image was modified")
	}
	d := metadata.Diff(img, img2)
	if !d.BrokerConfigsChanged || len(d.ChangedTopics) != 1 || d.BrokersChanged {
		t.Fatalf("diff %+v", d)
	}
}

func TestProducerIDs(t *testing.T) {
	n := newNode(t)
	type block struct{ first, count int64 }
	var blocks []block
	alloc := func(count int64) {
		first, err := n.c.AllocateProducerIDs(ctxT(t), count)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, block{first, count})
	}
	alloc(1000)
	alloc(1)
	n.restart()
	alloc(1000)
	// Concurrent allocations never overlap either.
	done := make(chan block)
	for range 4 {
		go func() {
			first, err := n.c.AllocateProducerIDs(context.Background(), 10)
			if err != nil {
				t.Error(err)
			}
			done <- block{first, 10}
		}()
	}
	for range 4 {
		blocks = append(blocks, <-done)
	}
	seen := map[int64]bool{}
	for _, b := range blocks {
		for id := b.first; id < b.first+b.count; id++ {
			if seen[id] {
				t.Fatalf("producer id %d handed out twice: %v", id, blocks)
			}
			seen[id] = true
		}
	}
	if got := n.c.Image().NextProducerID; got != 2041 {
		t.Fatalf("next producer id %d, want 2041", got)
	}
	_, err := n.c.AllocateProducerIDs(ctxT(t), 0)
	wantCode(t, err, kerr.InvalidRequest)
}

func TestEpochs(t *testing.T) {
	n := newNode(t)
	c := n.c
	registerBrokers(t, c, 1, 2)
	mustCreate(t, c, metadata.TopicSpec{Name: "t", Assignments: [][]int32{{1, 2}}})
	id := c.Image().Topics["t"].ID

	// max(minEpoch+1, current)
	for _, tt := range []struct{ min, want int32 }{{-1, 0}, {0, 1}, {9, 10}, {3, 10}, {10, 11}} {
		got, err := c.BumpLeaderEpoch(ctxT(t), id, 0, tt.min)
		if err != nil || got != tt.want || c.Image().Topics["t"].Partitions[0].LeaderEpoch != tt.want {
			t.Fatalf("bump min %d: got %d %v, want %d", tt.min, got, err, tt.want)
		}
	}
	_, err := c.BumpLeaderEpoch(ctxT(t), id, 1, 0)
	wantCode(t, err, kerr.UnknownTopicOrPartition)
	_, err = c.BumpLeaderEpoch(ctxT(t), uuid.Random(), 0, 0)
	wantCode(t, err, kerr.UnknownTopicID)

	// Many partitions, one batch: one metadata log entry for those raised,
	// none for those already above; an unknown partition fails them all.
	mustCreate(t, c, metadata.TopicSpec{Name: "many", Assignments: [][]int32{{1}, {1}, {2}, {2}}})
	many := c.Image().Topics["many"].ID
	if _, err := c.BumpLeaderEpoch(ctxT(t), many, 3, 6); err != nil {
		t.Fatal(err)
	}
	before := c.Image().Index
	got, err := c.BumpLeaderEpochs(ctxT(t), many, map[int32]int32{0: 9, 1: 4, 3: 2})
	if want := map[int32]int32{0: 10, 1: 5, 3: 7}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("bumps: got %v %v, want %v", got, err, want)
	}
	img := c.Image()
	for p, want := range []int32{10, 5, 0, 7} {
		if e := img.Topics["many"].Partitions[p].LeaderEpoch; e != want {
			t.Errorf("many-%d at epoch %d, want %d", p, e, want)
		}
	}
	if img.Index != before+1 {
		t.Errorf("the bumps took %d metadata log entries, want 1", img.Index-before)
	}
	_, err = c.BumpLeaderEpochs(ctxT(t), many, map[int32]int32{0: 20, 4: 0})
	wantCode(t, err, kerr.UnknownTopicOrPartition)
	if e := c.Image().Topics["many"].Partitions[0].LeaderEpoch; e != 10 {
		t.Errorf("a failed batch moved many-0 to epoch %d", e)
	}

	if err := c.ElectLeader(ctxT(t), id, 0, 2); err != nil {
		t.Fatal(err)
	}
	p := c.Image().Topics["t"].Partitions[0]
	if p.Leader != 2 || p.LeaderEpoch != 12 {
		t.Fatalf("after elect: %+v", p)
	}
	wantCode(t, c.ElectLeader(ctxT(t), id, 0, 3), kerr.EligibleLeadersNotAvailable)
	if err := c.ElectLeader(ctxT(t), id, 0, -1); err != nil {
		t.Fatal(err)
	}
	if p := c.Image().Topics["t"].Partitions[0]; p.Leader != -1 || p.LeaderEpoch != 13 {
		t.Fatalf("offline: %+v", p)
	}
}

func TestRestartRestoresImage(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		name := map[bool]string{false: "log", true: "snapshot"}[snapshot]
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			c := n.c
			buildImage(t, c)
			if snapshot {
				if err := c.Snapshot(); err != nil {
					t.Fatal(err)
				}
				// Entries after the snapshot are replayed from the log.
				if err := c.AlterConfigs(ctxT(t), []metadata.ConfigChange{{Resource: metadata.ConfigResourceTopic, Name: "t1", Key: "after", Value: sp("snap")}}); err != nil {
					t.Fatal(err)
				}
			}
			want := c.Image()
			n.restart()
			got := n.c.Image()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("restored image differs:\n got %+v\nwant %+v", got, want)
			}
			for id, tp := range got.TopicsByID {
				if got.Topics[tp.Name] != tp || tp.ID != id {
					t.Fatalf("TopicsByID not rebuilt for %s", id)
				}
			}
			// Still writable after the restore.
			mustCreate(t, n.c, metadata.TopicSpec{Name: "later", Partitions: 1, ReplicationFactor: 1})
			if got := n.c.Image(); got.Index <= want.Index || got.Topics["later"] == nil {
				t.Fatalf("after restore: index %d (was %d)", got.Index, want.Index)
			}
		})
	}
}

// buildImage writes one of every record type.
func buildImage(t *testing.T, c *Controller) {
	registerBrokers(t, c, 1, 2)
	mustCreate(t, c,
		metadata.TopicSpec{Name: "t1", Partitions: 3, ReplicationFactor: 2, Configs: map[string]string{"retention.ms": "10"}},
		metadata.TopicSpec{Name: "t2", Partitions: 1, ReplicationFactor: 1, Internal: true},
		metadata.TopicSpec{Name: "t3", Partitions: 1, ReplicationFactor: 1},
		metadata.TopicSpec{Name: "gone", Partitions: 1, ReplicationFactor: 1})
	img := c.Image()
	if err := c.CreatePartitions(ctxT(t), "t3", 2, false); err != nil {
		t.Fatal(err)
	}
	if errs := c.DeleteTopics(ctxT(t), []metadata.UUID{img.Topics["gone"].ID}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if err := c.AlterConfigs(ctxT(t), []metadata.ConfigChange{
		{Resource: metadata.ConfigResourceBroker, Key: "num.partitions", Value: sp("3")},
		{Resource: metadata.ConfigResourceBroker, Name: "2", Key: "k", Value: sp("v")},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AllocateProducerIDs(ctxT(t), 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BumpLeaderEpoch(ctxT(t), img.Topics["t1"].ID, 1, 20); err != nil {
		t.Fatal(err)
	}
	if err := c.ElectLeader(ctxT(t), img.Topics["t1"].ID, 2, img.Topics["t1"].Partitions[2].Replicas[1]); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotTruncatesLogAndRestores(t *testing.T) {
	n := newNode(t)
	buildImage(t, n.c)
	if err := n.c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	want := n.c.Image()
	// Drop the whole log so that the restart can only come from the
	// snapshot (raft keeps TrailingLogs entries after a snapshot).
	s := NewStore(n.db)
	last, _ := s.LastIndex()
	if err := s.DeleteRange(0, last); err != nil {
		t.Fatal(err)
	}
	n.restart()
	if got := n.c.Image(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored from snapshot:\n got %+v\nwant %+v", got, want)
	}
}

func TestChangedAndDiff(t *testing.T) {
	n := newNode(t)
	c := n.c
	ch := c.Changed()
	old := c.Image()
	select {
	case <-ch:
		t.Fatal("Changed fired without a change")
	default:
	}
	registerBrokers(t, c, 1)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Changed did not fire")
	}
	img, ch2 := c.Watch()
	if d := metadata.Diff(old, img); !d.BrokersChanged || len(d.CreatedTopics) != 0 || d.BrokerConfigsChanged {
		t.Fatalf("diff %+v", d)
	}
	mustCreate(t, c, metadata.TopicSpec{Name: "a", Partitions: 1, ReplicationFactor: 1}, metadata.TopicSpec{Name: "b", Partitions: 1, ReplicationFactor: 1})
	<-ch2
	img2 := c.Image()
	d := metadata.Diff(img, img2)
	if len(d.CreatedTopics) != 2 || d.CreatedTopics[0] != img2.Topics["a"].ID || d.BrokersChanged {
		t.Fatalf("diff %+v", d)
	}
	a, b := img2.Topics["a"], img2.Topics["b"]
	if err := c.ElectLeader(ctxT(t), a.ID, 0, 1); err != nil {
		t.Fatal(err)
	}
	c.DeleteTopics(ctxT(t), []metadata.UUID{b.ID})
	img3 := c.Image()
	d = metadata.Diff(img2, img3)
	if len(d.ChangedTopics) != 1 || d.ChangedTopics[0] != a.ID || len(d.DeletedTopics) != 1 || d.DeletedTopics[0] != b || len(d.CreatedTopics) != 0 {
		t.Fatalf("diff %+v", d)
	}
	if img3.Topics["b"] != nil || img2.Topics["b"] != b {
		t.Fatal("copy-on-write broken")
	}
	// Untouched topics are shared between images, changed ones are not.
	if img3.Topics["a"] == a {
		t.Fatal("changed topic shared with the old image")
	}
	if d := metadata.Diff(nil, img3); len(d.CreatedTopics) != 1 || !d.BrokersChanged {
		t.Fatalf("diff from nil %+v", d)
	}
}

func TestNotControllerAfterClose(t *testing.T) {
	n := newNode(t)
	c := n.c
	n.stop()
	err := c.RegisterBroker(ctxT(t), metadata.Broker{ID: 1})
	wantCode(t, err, kerr.NotController)
}

// TestApplyRejectsStaleBatch proposes batches that a racing decision could
// have produced; the FSM must reject each one whole and keep the image.
func TestApplyRejectsStaleBatch(t *testing.T) {
	n := newNode(t)
	c := n.c
	registerBrokers(t, c, 1)
	mustCreate(t, c, metadata.TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1})
	if _, err := c.AllocateProducerIDs(ctxT(t), 5); err != nil {
		t.Fatal(err)
	}
	img := c.Image()
	id := img.Topics["t"].ID
	epoch := int32(-1)
	for _, tt := range []struct {
		recs []metadata.Record
		want *kerr.Error
	}{
		{[]metadata.Record{{Type: metadata.RecordTopic, Topic: &metadata.TopicRecord{Name: "new", ID: uuid.Random()}}, {Type: metadata.RecordTopic, Topic: &metadata.TopicRecord{Name: "t", ID: uuid.Random()}}}, kerr.TopicAlreadyExists},
		{[]metadata.Record{{Type: metadata.RecordTopic, Topic: &metadata.TopicRecord{Name: "other", ID: id}}}, kerr.InvalidRequest},
		{[]metadata.Record{{Type: metadata.RecordProducerIDs, ProducerIDs: &metadata.ProducerIDsRecord{First: 0, Next: 10}}}, kerr.InvalidRequest},
		{[]metadata.Record{{Type: metadata.RecordPartition, Partition: &metadata.PartitionRecord{TopicID: id, Partition: 3, Replicas: []int32{1}}}}, kerr.InvalidRequest},
		{[]metadata.Record{{Type: metadata.RecordPartitionChange, PartitionChange: &metadata.PartitionChangeRecord{TopicID: id, Partition: 0, LeaderEpoch: &epoch}}}, kerr.InvalidRequest},
		{[]metadata.Record{{Type: metadata.RecordRemoveTopic, RemoveTopic: &metadata.UUID{1}}}, kerr.UnknownTopicID},
		{[]metadata.Record{{Type: "Bogus"}}, kerr.InvalidRequest},
		{[]metadata.Record{{Type: metadata.RecordCluster, ClusterID: "another"}}, kerr.InvalidRequest},
	} {
		wantCode(t, c.propose(ctxT(t), tt.recs...), tt.want)
	}
	if c.Image() != img {
		t.Fatal("a rejected batch changed the image")
	}
}

func TestValidTopicName(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "foo.bar_baz-9": true, strings.Repeat("x", 249): true,
		"": false, ".": false, "..": false, strings.Repeat("x", 250): false, "a b": false, "a/b": false, "é": false,
	} {
		err := ValidTopicName(name)
		if ok != (err == nil) {
			t.Errorf("%q: %v", name, err)
		}
		if err != nil && !errors.Is(err, kerr.InvalidTopicException) {
			t.Errorf("%q: %v is not INVALID_TOPIC_EXCEPTION", name, err)
		}
	}
}
