package groups_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// member drives ConsumerGroupHeartbeat by hand, as a KIP-848 client does.
type member struct {
	t        *testing.T
	cl       *kgo.Client
	group    string
	id       string
	instance *string
	epoch    int32
	topics   []string
	regex    *string
	owned    map[[16]byte][]int32
}

func newMember(t *testing.T, cl *kgo.Client, group, id string, topics ...string) *member {
	return &member{t: t, cl: cl, group: group, id: id, topics: topics, owned: map[[16]byte][]int32{}}
}

// beat sends a full heartbeat reporting m.owned, and adopts what the
// coordinator answers (epoch, assignment).
func (m *member) beat() *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.MemberEpoch, req.InstanceID = m.group, m.id, m.epoch, m.instance
	req.RebalanceTimeoutMillis, req.SubscribedTopicNames, req.SubscribedTopicRegex = 30000, m.topics, m.regex
	if m.topics == nil && m.regex == nil {
		req.SubscribedTopicNames = []string{}
	}
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if m.epoch != 0 {
		for id, ps := range m.owned {
			req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: id, Partitions: ps})
		}
	}
	resp, err := req.RequestWith(context.Background(), m.cl)
	if err != nil {
		m.t.Fatal(err)
	}
	if resp.ErrorCode == 0 {
		m.epoch = resp.MemberEpoch
		if resp.Assignment != nil {
			m.owned = map[[16]byte][]int32{}
			for _, t := range resp.Assignment.Topics {
				m.owned[t.TopicID] = t.Partitions
			}
		}
	}
	return resp
}

func (m *member) count() int {
	n := 0
	for _, ps := range m.owned {
		n += len(ps)
	}
	return n
}

func (m *member) leave(epoch int32) *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.MemberEpoch, req.InstanceID = m.group, m.id, epoch, m.instance
	resp, err := req.RequestWith(context.Background(), m.cl)
	if err != nil {
		m.t.Fatal(err)
	}
	return resp
}

// TestConsumerGroup848Revocation: a partition moves to a new member only
// after its owner revoked it. The owner keeps its epoch while it must
// revoke; the new member waits (unreleased) meanwhile.
func TestConsumerGroup848Revocation(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "tr", 4)
	cl := tandemtest.Client(t, addr)
	a := newMember(t, cl, "gr", "a", "tr")
	if r := a.beat(); r.ErrorCode != 0 || a.count() != 4 || a.epoch != 1 {
		t.Fatalf("a joins: %+v", r)
	}
	a.beat()
	bm := newMember(t, cl, "gr", "b", "tr")
	if r := bm.beat(); r.ErrorCode != 0 || bm.epoch != 2 || bm.count() != 0 {
		t.Fatalf("b joins while a holds everything: epoch %d, %d partitions (%+v)", bm.epoch, bm.count(), r)
	}
	if g := describe848(t, addr, "gr"); g.State != "Reconciling" || g.Epoch != 2 {
		t.Fatalf("group while reconciling: %+v", g)
	}
	// a is asked to give up two partitions and stays at epoch 1 …
	if r := a.beat(); r.ErrorCode != 0 || a.epoch != 1 || a.count() != 2 {
		t.Fatalf("a must revoke: epoch %d, %d partitions", a.epoch, a.count())
	}
	// … b still waits until a reports them gone …
	if bm.beat(); bm.count() != 0 {
		t.Fatalf("b got partitions a still owns: %v", bm.owned)
	}
	// … and gets them once a no longer owns them.
	if a.beat(); a.epoch != 2 || a.count() != 2 {
		t.Fatalf("a after revoking: epoch %d, %d partitions", a.epoch, a.count())
	}
	if bm.beat(); bm.count() != 2 || bm.epoch != 2 {
		t.Fatalf("b after a revoked: epoch %d, %v", bm.epoch, bm.owned)
	}
	for id, ps := range bm.owned {
		for _, p := range ps {
			if slices.Contains(a.owned[id], p) {
				t.Fatalf("partition %d owned by both", p)
			}
		}
	}
	if g := describe848(t, addr, "gr"); g.State != "Stable" {
		t.Fatalf("group after reconciling: %+v", g)
	}
	// A stale epoch (the previous one) is accepted only with owned
	// partitions the member still has: a lost response.
	a.epoch = 1
	if r := a.beat(); r.ErrorCode != 0 || a.epoch != 2 {
		t.Fatalf("previous epoch with a subset of the assignment: %+v", r)
	}
	a.owned[[16]byte{9}] = []int32{0}
	a.epoch = 1
	if r := a.beat(); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("previous epoch with partitions not assigned: %+v", r)
	}
}

// TestConsumerGroup848Static: a static member that leaves with epoch -2
// keeps its partitions; its instance rejoining under a new member id
// takes them over at once, without a new group epoch. While the instance
// is in use, another member id for it is refused.
func TestConsumerGroup848Static(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "ts", 3)
	cl := tandemtest.Client(t, addr)
	a := newMember(t, cl, "gs", "a1", "ts")
	a.instance = kmsg.StringPtr("i1")
	a.beat()
	x := newMember(t, cl, "gs", "x", "ts")
	x.beat()
	a.beat()
	a.beat()
	x.beat()
	before := describe848(t, addr, "gs")
	owned := a.owned
	if before.State != "Stable" || a.count() == 0 {
		t.Fatalf("before: %+v, a owns %v", before, a.owned)
	}
	other := newMember(t, cl, "gs", "a2", "ts")
	other.instance = kmsg.StringPtr("i1")
	if r := other.beat(); r.ErrorCode != kerr.UnreleasedInstanceID.Code {
		t.Fatalf("second member id for an active instance: %+v", r)
	}
	if r := a.leave(-2); r.ErrorCode != 0 || r.MemberEpoch != -2 {
		t.Fatalf("static leave: %+v", r)
	}
	if r := other.beat(); r.ErrorCode != 0 || !mapsEqual(other.owned, owned) || other.epoch != before.Epoch {
		t.Fatalf("the instance returns as a2: %+v, owns %v (a owned %v), epoch %d (group epoch %d)", r, other.owned, owned, other.epoch, before.Epoch)
	}
	if g := describe848(t, addr, "gs"); g.Epoch != before.Epoch || len(g.Members) != 2 {
		t.Fatalf("after the static member returned: %+v", g)
	}
	if r := a.beat(); r.ErrorCode != kerr.FencedInstanceID.Code && r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("the old member id heartbeats: %+v", r)
	}
}

func mapsEqual(a, b map[[16]byte][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestConsumerGroup848SessionTimeout: a member that stops heartbeating is
// removed after the group's consumer.session.timeout.ms (a group config)
// and the others get its partitions.
func TestConsumerGroup848SessionTimeout(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "tt", 2)
	cl := tandemtest.Client(t, addr)
	if code := alterGroupConfig(t, cl, "gt", "consumer.session.timeout.ms", "1500"); code != 0 {
		t.Fatalf("alter group config: error %d", code)
	}
	if v := describeGroupConfig(t, cl, "gt", "consumer.session.timeout.ms"); v != "1500" {
		t.Fatalf("describe group config: %q", v)
	}
	if code := alterGroupConfig(t, cl, "gt", "consumer.session.timeout.ms", "10"); code != kerr.InvalidConfig.Code {
		t.Fatalf("a session timeout below the broker's minimum: error %d", code)
	}

	a, s := newMember(t, cl, "gt", "a", "tt"), newMember(t, cl, "gt", "s", "tt")
	a.beat()
	s.beat()
	a.beat() // a revokes a partition for s
	a.beat()
	if s.beat(); a.count() != 1 || s.count() != 1 {
		t.Fatalf("a owns %v, s owns %v", a.owned, s.owned)
	}
	wait.Until(t, 20*time.Second, func() error { // s never heartbeats again
		if a.beat(); a.count() != 2 {
			return fmt.Errorf("a owns %v, not yet s's partition", a.owned)
		}
		return nil
	})
	if g := describe848(t, addr, "gt"); len(g.Members) != 1 {
		t.Fatalf("after s's session expired: %+v", g)
	}
	if r := s.beat(); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("expired member heartbeats: %+v", r)
	}
}

// alterGroupConfig sets a config of the GROUP resource and returns the
// error code.
func alterGroupConfig(t *testing.T, cl *kgo.Client, group, key, value string) int16 {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeGroupConfig, ResourceName: group,
		Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: key, Op: kmsg.IncrementalAlterConfigOpSet, Value: &value}}}}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Resources[0].ErrorCode
}

// describeGroupConfig is a group's value of a config.
func describeGroupConfig(t *testing.T, cl *kgo.Client, group, key string) string {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeGroupConfig, ResourceName: group, ConfigNames: []string{key}}}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || resp.Resources[0].ErrorCode != 0 || len(resp.Resources[0].Configs) != 1 {
		t.Fatalf("describe group config: %v %+v", err, resp)
	}
	return *resp.Resources[0].Configs[0].Value
}

// TestConsumerGroup848Regex: the broker resolves a subscribed regular
// expression against the whole topic name and follows topics created
// later.
func TestConsumerGroup848Regex(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "rx-a", 1)
	tandemtest.CreateTopic(t, addr, "xrx-a", 1)
	cl := tandemtest.Client(t, addr)
	m := newMember(t, cl, "grx", "m")
	m.regex = kmsg.StringPtr("rx-.*")
	if r := m.beat(); r.ErrorCode != 0 || m.count() != 1 {
		t.Fatalf("join with a regex: %+v, owns %v", r, m.owned)
	}
	tandemtest.CreateTopic(t, addr, "rx-b", 2)
	wait.Until(t, 20*time.Second, func() error {
		if m.beat(); m.count() != 3 {
			return fmt.Errorf("m owns %v, not yet the new topic's partitions", m.owned)
		}
		return nil
	})
	g := describe848(t, addr, "grx")
	var names []string
	for _, tp := range g.Members[0].Assignment.TopicPartitions {
		names = append(names, tp.Topic)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"rx-a", "rx-b"}) || g.Members[0].SubscribedTopicRegex == nil {
		t.Fatalf("assigned topics %v, member %+v", names, g.Members[0])
	}
}

// TestConsumerGroup848Migration: an empty classic group (here one that
// only holds committed offsets) becomes a consumer group on the first
// ConsumerGroupHeartbeat, and an empty consumer group becomes a classic
// group on the first JoinGroup, both keeping their committed offsets. A
// classic group with members is not converted.
func TestConsumerGroup848Migration(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "tm", 1)
	cl := tandemtest.Client(t, addr)
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "tm", Partition: 0, At: 7, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "gm", offs); err != nil {
		t.Fatal(err)
	}
	committed := func() int64 {
		t.Helper()
		o, err := adm.FetchOffsets(ctx, "gm")
		if err != nil {
			t.Fatal(err)
		}
		r, _ := o.Lookup("tm", 0)
		return r.At
	}
	m := newMember(t, cl, "gm", "m", "tm")
	if r := m.beat(); r.ErrorCode != 0 {
		t.Fatalf("upgrade: %+v", r)
	}
	if g := describe848(t, addr, "gm"); g.ErrorCode != 0 || len(g.Members) != 1 || committed() != 7 {
		t.Fatalf("after the upgrade: %+v, offset %d", g, committed())
	}
	if r := m.leave(-1); r.ErrorCode != 0 || r.MemberEpoch != -1 {
		t.Fatalf("leave: %+v", r)
	}
	// Downgrade: a classic consumer joins the empty consumer group.
	classic := tandemtest.Client(t, addr, kgo.ConsumerGroup("gm"), kgo.ConsumeTopics("tm"))
	wait.Until(t, 20*time.Second, func() error {
		described, err := adm.DescribeGroups(ctx, "gm")
		if err != nil {
			t.Fatal(err)
		}
		if g := described["gm"]; g.Err != nil || g.State != "Stable" || len(g.Members) != 1 {
			return fmt.Errorf("the classic consumer has not joined: %+v", described)
		}
		if code := describe848(t, addr, "gm").ErrorCode; code != kerr.GroupIDNotFound.Code {
			return fmt.Errorf("ConsumerGroupDescribe of the classic group: error %d, want GROUP_ID_NOT_FOUND", code)
		}
		return nil
	})
	if g := describe848(t, addr, "gm"); g.ErrorCode != kerr.GroupIDNotFound.Code || committed() != 7 {
		t.Fatalf("after the downgrade: %+v, offset %d", g, committed())
	}
	if r := newMember(t, cl, "gm", "m2", "tm").beat(); r.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("heartbeat into a classic group with members: %+v", r)
	}
	classic.Close()
}

// TestConsumerGroup848Records: the group is stored in __consumer_offsets
// in Kafka's record formats: ConsumerGroupMetadata (3) with the group
// epoch, member metadata (5), target assignment (6, 7) and current
// assignment (8) records, version-0 values.
func TestConsumerGroup848Records(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "tf", 1)
	cl := tandemtest.Client(t, addr)
	m := newMember(t, cl, "gf", "m", "tf")
	m.beat()
	m.beat()
	rd := tandemtest.Client(t, addr, kgo.ConsumeTopics("__consumer_offsets"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	types := map[int16]bool{}
	var epoch int32 = -1
	for !(types[3] && types[5] && types[6] && types[7] && types[8]) {
		fs := rd.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading __consumer_offsets: %v (types seen %v)", err, types)
		}
		fs.EachRecord(func(r *kgo.Record) {
			typ := int16(binary.BigEndian.Uint16(r.Key))
			types[typ] = true
			if r.Value != nil && binary.BigEndian.Uint16(r.Value) != 0 {
				t.Errorf("record type %d: value version %d", typ, binary.BigEndian.Uint16(r.Value))
			}
			if typ == 3 && r.Value != nil {
				epoch = int32(binary.BigEndian.Uint32(r.Value[2:]))
			}
		})
	}
	if epoch != 1 {
		t.Fatalf("ConsumerGroupMetadataValue epoch %d, want 1", epoch)
	}
}
