package groups_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// consumer848 is a franz-go consumer in group g using the KIP-848
// protocol.
func consumer848(t *testing.T, addr, g string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return tandemtest.Client(t, addr, append([]kgo.Opt{kgo.ConsumerGroup(g), kgo.ServerSideBalancer(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
}

// pollInto consumes until stop closes, recording every record's value.
func pollInto(cl *kgo.Client, stop <-chan struct{}, mu *sync.Mutex, seen map[string]int) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		mu.Lock()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		mu.Unlock()
	}
}

func describe848(t *testing.T, addr, g string) kmsg.ConsumerGroupDescribeResponseGroup {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{g}
	resp, err := req.RequestWith(context.Background(), tandemtest.Client(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Groups[0]
}

// TestConsumerGroup848: three franz-go consumers of the KIP-848 protocol
// split six partitions (the broker assigns: two each); when one leaves
// the others take its partitions, every record is consumed, the group is
// described and listed as a consumer group, and after a broker restart
// the group comes back with its epochs and committed offsets.
func TestConsumerGroup848(t *testing.T) {
	dir := t.TempDir()
	b, _ := startBroker(t, dir)
	addr := b.Addr()
	adm := kadm.NewClient(tandemtest.Client(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 6, 1, nil, "t848"); err != nil {
		t.Fatal(err)
	}
	produce(t, addr, "t848", 600)

	var mu sync.Mutex
	seen := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var cls []*kgo.Client
	for range 3 {
		cl := consumer848(t, addr, "g848", kgo.ConsumeTopics("t848"))
		cls = append(cls, cl)
		wg.Add(1)
		go func() { defer wg.Done(); pollInto(cl, stop, &mu, seen) }()
	}
	wait.Until(t, 30*time.Second, func() error {
		g := describe848(t, addr, "g848")
		if g.ErrorCode != 0 || g.State != "Stable" || len(g.Members) != 3 {
			return fmt.Errorf("want 3 members, Stable: %+v", g)
		}
		for _, m := range g.Members {
			if len(m.Assignment.TopicPartitions) != 1 || len(m.Assignment.TopicPartitions[0].Partitions) != 2 || m.MemberEpoch != g.Epoch {
				return fmt.Errorf("want 2 partitions for each member, at the group's epoch: %+v", g)
			}
		}
		return nil
	})
	// One member leaves (epoch -1); the other two take its partitions.
	close(stop)
	wg.Wait()
	if err := cls[2].CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	cls[2].Close()
	stop = make(chan struct{})
	for _, cl := range cls[:2] {
		wg.Add(1)
		go func() { defer wg.Done(); pollInto(cl, stop, &mu, seen) }()
	}
	wait.Until(t, 30*time.Second, func() error {
		g := describe848(t, addr, "g848")
		if g.State != "Stable" || len(g.Members) != 2 {
			return fmt.Errorf("want 2 members, Stable: %+v", g)
		}
		for _, m := range g.Members {
			if len(m.Assignment.TopicPartitions) != 1 || len(m.Assignment.TopicPartitions[0].Partitions) != 3 {
				return fmt.Errorf("want 3 partitions for each member: %+v", g)
			}
		}
		return nil
	})
	produce(t, addr, "t848", 0)
	wait.Until(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 600 {
			return fmt.Errorf("%d distinct records consumed, want 600", len(seen))
		}
		return nil
	})
	close(stop)
	wg.Wait()
	for _, cl := range cls[:2] {
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}

	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lg, ok := listed["g848"]; !ok || lg.ProtocolType != "consumer" || lg.State != "Stable" {
		t.Fatalf("ListGroups: %+v", listed)
	}
	before := describe848(t, addr, "g848")
	for _, cl := range cls[:2] {
		cl.Close() // leave: the group empties
	}
	wait.Until(t, 30*time.Second, func() error {
		if g := describe848(t, addr, "g848"); g.State != "Empty" {
			return fmt.Errorf("group %s, want Empty", g.State)
		}
		return nil
	})
	committed, err := adm.FetchOffsets(ctx, "g848")
	if err != nil {
		t.Fatal(err)
	}

	// Restart: the group and its offsets come back from __consumer_offsets.
	b.Close()
	b, _ = startBroker(t, dir)
	addr = b.Addr()
	after := describe848(t, addr, "g848")
	if after.ErrorCode != 0 || after.State != "Empty" || after.Epoch < before.Epoch || after.AssignmentEpoch < before.AssignmentEpoch {
		t.Fatalf("after restart: %+v, before: %+v", after, before)
	}
	adm = kadm.NewClient(tandemtest.Client(t, addr))
	again, err := adm.FetchOffsets(ctx, "g848")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	again.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 600 || !maps.EqualFunc(committed, again, func(a, b map[int32]kadm.OffsetResponse) bool {
		return maps.EqualFunc(a, b, func(x, y kadm.OffsetResponse) bool { return x.At == y.At })
	}) {
		t.Fatalf("offsets before %v, after %v (total %d, want 600)", committed, again, total)
	}

	// A new member resumes where the group left off: nothing is
	// consumed again.
	produce(t, addr, "t848", 60)
	cl := consumer848(t, addr, "g848", kgo.ConsumeTopics("t848"))
	got := map[string]int{}
	for len(got) < 60 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)]++ })
	}
	for v, n := range got {
		if n != 1 {
			t.Errorf("record %s consumed %d times after the restart", v, n)
		}
	}
}

// TestConsumerGroup848Errors: what the coordinator answers to requests
// that break KIP-848's rules.
func TestConsumerGroup848Errors(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "te", 2)
	cl := tandemtest.Client(t, addr)
	hb := func(mod func(r *kmsg.ConsumerGroupHeartbeatRequest)) *kmsg.ConsumerGroupHeartbeatResponse {
		t.Helper()
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch, req.RebalanceTimeoutMillis = "ge", "m1", 0, 30000
		req.SubscribedTopicNames, req.Topics = []string{"te"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		mod(req)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		name string
		mod  func(r *kmsg.ConsumerGroupHeartbeatRequest)
		want *kerr.Error
	}{
		{"no rebalance timeout", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 }, kerr.InvalidRequest},
		{"owned partitions on join", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{Partitions: []int32{0}}}
		}, kerr.InvalidRequest},
		{"no subscription", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }, kerr.InvalidRequest},
		{"empty member id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest},
		{"unknown assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = kmsg.StringPtr("sticky") }, kerr.UnsupportedAssignor},
		{"bad regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.SubscribedTopicNames, r.SubscribedTopicRegex = nil, kmsg.StringPtr("t(")
		}, kerr.InvalidRegularExpression},
		{"unknown member", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 3; r.Group = "nobody" }, kerr.GroupIDNotFound},
	} {
		if got := hb(tc.mod); got.ErrorCode != tc.want.Code {
			t.Errorf("%s: error %d, want %s", tc.name, got.ErrorCode, tc.want)
		}
	}

	joined := hb(func(*kmsg.ConsumerGroupHeartbeatRequest) {})
	if joined.ErrorCode != 0 || joined.MemberEpoch != 1 || joined.Assignment == nil || len(joined.Assignment.Topics) != 1 || len(joined.Assignment.Topics[0].Partitions) != 2 {
		t.Fatalf("join: %+v", joined)
	}
	if got := hb(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 5 }); got.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Errorf("epoch ahead: error %d", got.ErrorCode)
	}
	// A member that lost a response joins again with its id and epoch 0:
	// it gets its assignment back, at the same epoch.
	if got := hb(func(*kmsg.ConsumerGroupHeartbeatRequest) {}); got.ErrorCode != 0 || got.MemberEpoch != 1 || got.Assignment == nil || len(got.Assignment.Topics[0].Partitions) != 2 {
		t.Errorf("rejoin with the same id: %+v", got)
	}
	other := hb(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "m2"; r.MemberEpoch = 5 })
	if other.ErrorCode != kerr.UnknownMemberID.Code {
		t.Errorf("unknown member: %d", other.ErrorCode)
	}

	// A classic consumer cannot join a consumer group with members,
	// and ConsumerGroupDescribe of a classic group says it is not one.
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "ge", "consumer", 10000, 10000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0}}}
	jr, err := join.RequestWith(context.Background(), cl)
	if err != nil || jr.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Errorf("JoinGroup into a consumer group: %v %+v", err, jr)
	}
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "te", Partition: 0, At: 1})
	if _, err := kadm.NewClient(cl).CommitOffsets(context.Background(), "classic-only", offs); err != nil {
		t.Fatal(err)
	}
	if g := describe848(t, addr, "classic-only"); g.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("ConsumerGroupDescribe of a classic group: %+v", g)
	}
}
