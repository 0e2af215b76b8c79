package groups_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

var testProps = map[string]string{
	"offsets.topic.num.partitions":     "4",
	"group.initial.rebalance.delay.ms": "50",
	"group.min.session.timeout.ms":     "500",

	"group.consumer.heartbeat.interval.ms":     "250",
	"group.consumer.min.heartbeat.interval.ms": "100",
	"group.consumer.session.timeout.ms":        "6000",
	"group.consumer.min.session.timeout.ms":    "1000",
}

// startBroker runs a broker with the groups plugin on dir (a restart
// passes the same dir) and returns its address.
func startBroker(t *testing.T, dir string) (*server.Broker, *groups.Plugin) {
	t.Helper()
	log := tandemtest.Logger(t)
	p := groups.New(testProps, log)
	b, err := server.New(server.Config{DataDir: dir, Listen: "127.0.0.1:0", Props: testProps, Plugins: []any{p}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, p
}

func produce(t *testing.T, addr, topic string, n int) {
	t.Helper()
	cl := tandemtest.Client(t, addr, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestGroupConsumeRebalanceRestart: three franz-go group members share six
// partitions; one leaves and the others take over its partitions; after a
// broker restart a new consumer resumes at the committed offsets.
func TestGroupConsumeRebalanceRestart(t *testing.T) {
	tandemtest.Long(t) // rebalances and a broker restart, seconds: the full tier only
	dir := t.TempDir()
	b, _ := startBroker(t, dir)
	addr := b.Addr()
	adm := kadm.NewClient(tandemtest.Client(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 6, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	produce(t, addr, "t", 600)

	var mu sync.Mutex
	seen := map[string]int{}
	consume := func(cl *kgo.Client, stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
			mu.Unlock()
			cl.CommitUncommittedOffsets(ctx)
		}
	}
	member := func() *kgo.Client {
		return tandemtest.Client(t, addr, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit(),
			kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(300*time.Millisecond),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	}
	var wg sync.WaitGroup
	stops, stopped := make([]chan struct{}, 3), make([]chan struct{}, 3)
	cls := make([]*kgo.Client, 3)
	for i := range cls {
		cls[i], stops[i], stopped[i] = member(), make(chan struct{}), make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); defer close(stopped[i]); consume(cls[i], stops[i]) }()
	}
	wait.Until(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 600 {
			return fmt.Errorf("%d distinct records consumed, want 600", len(seen))
		}
		return nil
	})
	desc, err := adm.DescribeGroups(ctx, "g")
	if err != nil || desc["g"].State != "Stable" || len(desc["g"].Members) != 3 {
		t.Fatalf("describe: %v %+v", err, desc["g"])
	}
	// One member leaves, once its last poll is committed: its partitions
	// go to the others.
	close(stops[0])
	<-stopped[0]
	cls[0].Close()
	produce(t, addr, "t", 600)
	wait.Until(t, 30*time.Second, func() error {
		d, err := adm.DescribeGroups(ctx, "g")
		if err != nil {
			return err
		}
		if g := d["g"]; g.State != "Stable" || len(g.Members) != 2 {
			return fmt.Errorf("group %s with %d members, want Stable with 2", g.State, len(g.Members))
		}
		return nil
	})
	wait.Until(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 600 || sum(seen) < 1200 {
			return fmt.Errorf("%d distinct records consumed %d times, want 600 at least 1200 times", len(seen), sum(seen))
		}
		return nil
	})
	close(stops[1])
	close(stops[2])
	wg.Wait()
	cls[1].Close()
	cls[2].Close()
	mu.Lock()
	for v, n := range seen {
		if n < 2 {
			t.Errorf("value %s consumed %d times, want 2 (once per produce round)", v, n)
		}
	}
	mu.Unlock()

	// Restart the broker: committed offsets come back, nothing is left.
	b.Close()
	b, _ = startBroker(t, dir)
	addr = b.Addr()
	adm = kadm.NewClient(tandemtest.Client(t, addr))
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 1200 {
		t.Fatalf("committed offsets after restart sum to %d, want 1200", total)
	}
	produce(t, addr, "t", 60)
	cl := tandemtest.Client(t, addr, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))
	got := 0
	for got < 60 {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if pctx.Err() != nil && fs.NumRecords() == 0 {
			t.Fatalf("resumed consumer got %d of 60 new records", got)
		}
		got += fs.NumRecords()
	}
	if got != 60 {
		t.Fatalf("resumed consumer got %d records, want the 60 new ones", got)
	}
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// TestProtocolErrors drives the classic protocol with raw requests.
func TestProtocolErrors(t *testing.T) {
	b, _ := startBroker(t, t.TempDir())
	cl := tandemtest.Client(t, b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	join := func(member string) *kmsg.JoinGroupResponse {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = "g", member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 5000, 5000
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1}}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r := join("")
	if r.ErrorCode != kerr.MemberIDRequired.Code || r.MemberID == "" {
		t.Fatalf("first join: %v %q", kerr.ErrorForCode(r.ErrorCode), r.MemberID)
	}
	id := r.MemberID
	r = join(id)
	if r.ErrorCode != 0 || r.Generation != 1 || r.LeaderID != id || len(r.Members) != 1 {
		t.Fatalf("second join: %v gen %d leader %q members %d", kerr.ErrorForCode(r.ErrorCode), r.Generation, r.LeaderID, len(r.Members))
	}
	if r := join("nobody"); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("join with unknown id: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = "g", id, 1
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: id, MemberAssignment: []byte("a")}}
	if sr, err := sync.RequestWith(ctx, cl); err != nil || sr.ErrorCode != 0 || string(sr.MemberAssignment) != "a" {
		t.Fatalf("sync: %v %+v", err, sr)
	}
	hb := func(member string, gen int32) error {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation = "g", member, gen
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}
	if err := hb(id, 1); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if err := hb(id, 0); err != kerr.IllegalGeneration {
		t.Fatalf("stale generation heartbeat: %v", err)
	}
	if err := hb("nobody", 1); err != kerr.UnknownMemberID {
		t.Fatalf("unknown member heartbeat: %v", err)
	}
	commit := func(group, member string, gen int32) error {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.MemberID, req.Generation = group, member, gen
		req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 7, LeaderEpoch: -1}}}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	}
	for _, c := range []struct {
		group, member string
		gen           int32
		want          error
	}{
		{"g", id, 0, kerr.IllegalGeneration},
		{"g", "nobody", 1, kerr.UnknownMemberID},
		{"g", "", -1, kerr.UnknownMemberID},       // the group has members
		{"other", "x", 3, kerr.IllegalGeneration}, // a group the client is not in
		{"simple", "", -1, nil},                   // a simple consumer
		{"g", id, 1, nil},
	} {
		if err := commit(c.group, c.member, c.gen); err != c.want {
			t.Errorf("commit %s/%s gen %d: %v, want %v", c.group, c.member, c.gen, err, c.want)
		}
	}
	adm := kadm.NewClient(cl)
	if dr, err := adm.DeleteGroups(ctx, "g"); err != nil || dr["g"].Err != kerr.NonEmptyGroup {
		t.Fatalf("delete non-empty group: %v %v", err, dr["g"].Err)
	}
	// A group that never existed: offset -1, no error.
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = "never"
	of.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0}}}
	ofr, err := of.RequestWith(ctx, cl)
	if err != nil || ofr.ErrorCode != 0 || ofr.Topics[0].Partitions[0].Offset != -1 || ofr.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("fetch offsets of unknown group: %v %+v", err, ofr)
	}
	// Leaving empties the group; then it can be deleted.
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = "g"
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: id}, {MemberID: "nobody"}}
	lr, err := leave.RequestWith(ctx, cl)
	if err != nil || lr.ErrorCode != 0 || lr.Members[0].ErrorCode != 0 || lr.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("leave: %v %+v", err, lr)
	}
	lg, err := adm.ListGroups(ctx, "Empty")
	if err != nil || len(lg) != 2 { // g and simple
		t.Fatalf("list empty groups: %v %v", err, lg)
	}
	if dr, err := adm.DeleteGroups(ctx, "g"); err != nil || dr["g"].Err != nil {
		t.Fatalf("delete empty group: %v %v", err, dr["g"].Err)
	}
	if dr, _ := adm.DeleteGroups(ctx, "g"); dr["g"].Err != kerr.GroupIDNotFound {
		t.Fatalf("delete deleted group: %v", dr["g"].Err)
	}
}

// TestRoutingOverRealPartitionCount: offsets committed while
// __consumer_offsets had 4 partitions are found after a restart whose
// offsets.topic.num.partitions says 7, because groups are routed over the
// partitions the topic has, as Kafka does.
func TestRoutingOverRealPartitionCount(t *testing.T) {
	dir := t.TempDir()
	b, _ := startBroker(t, dir)
	tandemtest.CreateTopic(t, b.Addr(), "r", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	adm := kadm.NewClient(tandemtest.Client(t, b.Addr()))
	for i, g := range names {
		var o kadm.Offsets
		o.AddOffset("r", 0, int64(i+1), -1)
		if resp, err := adm.CommitOffsets(ctx, g, o); err != nil || resp.Error() != nil {
			t.Fatalf("commit %s: %v %v", g, err, resp.Error())
		}
	}
	b.Close()

	props := map[string]string{"offsets.topic.num.partitions": "7"}
	p := groups.New(props, tandemtest.Logger(t))
	b2, err := server.New(server.Config{DataDir: dir, Listen: "127.0.0.1:0", Props: props, Plugins: []any{p}, Logger: tandemtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	adm = kadm.NewClient(tandemtest.Client(t, b2.Addr()))
	for i, g := range names {
		fetched, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			t.Fatalf("fetch %s: %v", g, err)
		}
		if o, ok := fetched.Lookup("r", 0); !ok || o.At != int64(i+1) {
			t.Errorf("group %s: offset %+v (found %v), want %d", g, o, ok, i+1)
		}
	}
}
