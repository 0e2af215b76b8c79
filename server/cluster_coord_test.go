package server_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// coordProps keep the internal topics small, so that a cluster creates
// them quickly.
var coordProps = map[string]string{
	"offsets.topic.num.partitions":         "3",
	"transaction.state.log.num.partitions": "3",
	"group.initial.rebalance.delay.ms":     "0",
}

// liveAddrs are the Kafka addresses of the brokers other than skip.
func liveAddrs(c *tandemtest.Cluster, skip ...int32) []string {
	var out []string
	for _, b := range c.Brokers {
		if !slices.Contains(skip, b.ID) {
			out = append(out, b.Addr)
		}
	}
	return out
}

// produceValues produces v<from> to v<to-1> (acks=all) to topic.
func produceValues(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, from, to int) {
	t.Helper()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("v%04d", i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// internalTopicReplicated checks that every partition of an internal
// topic has three replicas, all in sync.
func internalTopicReplicated(t *testing.T, c *tandemtest.Cluster, topic string) {
	t.Helper()
	c.WaitFor(topic+" replicated three times", func(img *metadata.Image) bool {
		tp := img.Topics[topic]
		if tp == nil {
			return false
		}
		for _, p := range tp.Partitions {
			if len(p.Replicas) != 3 || len(p.ISR) != 3 {
				return false
			}
		}
		return true
	})
}

// TestClusterGroupCoordinatorFailover: a consumer group commits on a
// three-node cluster; __consumer_offsets has three replicas, so when the
// group coordinator is killed, the new leader of the group's partition
// has every acknowledged commit, and the consumer, which stays in the
// group across the kill, finds the new coordinator and goes on from its
// committed offsets.
func TestClusterGroupCoordinatorFailover(t *testing.T) {
	tandemtest.Long(t) // kills the group coordinator: the full tier only
	c := tandemtest.StartCluster(t, 3, coordProps)
	ctx := ctxFor(t, 2*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, "in"); err != nil {
		t.Fatal(err)
	}
	produceValues(t, ctx, cl, "in", 0, 300)

	cons := tandemtest.Client(t, c.Addrs()[1], kgo.SeedBrokers(c.Addrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.SessionTimeout(10*time.Second))
	consume := func(n int) []string {
		var got []string
		for len(got) < n {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d: %v", len(got), n, ctx.Err())
			}
			fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s-%d: %v", topic, p, err) })
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		if err := cons.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
		return got
	}
	if got := consume(300); len(got) != 300 {
		t.Fatalf("consumed %d records, want 300", len(got))
	}
	internalTopicReplicated(t, c, "__consumer_offsets")

	old := coordinatorOf(t, adm.FindGroupCoordinators(ctx, "g"), "g")
	c.Broker(old).Kill()
	waitLeadersMoved(c, old)

	// Every offset the consumer committed is on the new coordinator.
	adm2 := kadm.NewClient(tandemtest.Client(t, liveAddrs(c, old)[0], kgo.SeedBrokers(liveAddrs(c, old)...)))
	ends := eventually(t, ctx, func() (kadm.ListedOffsets, error) { return adm2.ListEndOffsets(ctx, "in") })
	offs := eventually(t, ctx, func() (kadm.OffsetResponses, error) { return fetchOffsets(ctx, adm2, "g") })
	ends.Each(func(o kadm.ListedOffset) {
		got, ok := offs.Lookup("in", o.Partition)
		if !ok || got.At != o.Offset {
			t.Errorf("in-%d: committed %+v, want %d", o.Partition, got, o.Offset)
		}
	})
	n := eventually(t, ctx, func() (int32, error) {
		rs := adm2.FindGroupCoordinators(ctx, "g")
		return rs["g"].NodeID, rs.Error()
	})
	if n == old {
		t.Fatalf("the group's coordinator is still the killed broker %d", old)
	}

	// The consumer goes on from its commits: it gets the new records only,
	// and commits them to the new coordinator.
	produceValues(t, ctx, cl, "in", 300, 330)
	got := consume(30)
	slices.Sort(got)
	for i, v := range got {
		if want := fmt.Sprintf("v%04d", 300+i); v != want {
			t.Fatalf("after the failover, record %d is %q, want %q (all: %v)", i, v, want, got)
		}
	}
	ends = eventually(t, ctx, func() (kadm.ListedOffsets, error) { return adm2.ListEndOffsets(ctx, "in") })
	offs = eventually(t, ctx, func() (kadm.OffsetResponses, error) { return fetchOffsets(ctx, adm2, "g") })
	ends.Each(func(o kadm.ListedOffset) {
		if got, _ := offs.Lookup("in", o.Partition); got.At != o.Offset {
			t.Errorf("in-%d after the failover: committed %+v, want %d", o.Partition, got, o.Offset)
		}
	})
}

// eventually retries fn until it succeeds: right after a kill, a
// client's metadata may still name the dead broker for a moment.
func eventually[T any](t *testing.T, ctx context.Context, fn func() (T, error)) T {
	t.Helper()
	for {
		v, err := fn()
		if err == nil {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%v (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func fetchOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	return offs, err
}

func describeTxn(ctx context.Context, adm *kadm.Client, id string) (kadm.DescribedTransactions, error) {
	d, err := adm.DescribeTransactions(ctx, id)
	if err == nil {
		err = d[id].Err
	}
	return d, err
}

// waitLeadersMoved waits until the killed broker dead leads no partition
// (it is fenced and its leaderships moved): a client that asks for a
// coordinator before then is told the dead one, and franz-go's admin
// requests keep it.
func waitLeadersMoved(c *tandemtest.Cluster, dead int32) {
	c.WaitFor(fmt.Sprintf("broker %d's leaderships moved", dead), func(img *metadata.Image) bool {
		for _, t := range img.Topics {
			for _, p := range t.Partitions {
				if p.Leader == dead {
					return false
				}
			}
		}
		return true
	})
}

// TestClusterGroupCoordinatorMovesBack: leadership of a group's
// __consumer_offsets partition moves away with a clean stop and back with
// a preferred election once the broker has caught up as a follower. Each
// move unloads the shard on the broker that resigns (it answers
// NOT_COORDINATOR) and loads it on the new leader from its own replica,
// commits made meanwhile included.
func TestClusterGroupCoordinatorMovesBack(t *testing.T) {
	tandemtest.Long(t) // kills and restarts brokers: the full tier only
	c := tandemtest.StartCluster(t, 3, coordProps)
	ctx := ctxFor(t, 2*time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "mv"); err != nil {
		t.Fatal(err)
	}
	commit := func(adm *kadm.Client, at int64) {
		t.Helper()
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "mv", Partition: 0, At: at, LeaderEpoch: -1})
		eventually(t, ctx, func() (kadm.OffsetResponses, error) {
			r, err := adm.CommitOffsets(ctx, "h", os)
			if err == nil {
				err = r.Error()
			}
			return r, err
		})
	}
	committed := func(adm *kadm.Client) int64 {
		t.Helper()
		offs := eventually(t, ctx, func() (kadm.OffsetResponses, error) { return fetchOffsets(ctx, adm, "h") })
		o, _ := offs.Lookup("mv", 0)
		return o.At
	}
	// fetchCode asks broker id itself for the group's offsets.
	fetchCode := func(id int32) int16 {
		cl := tandemtest.Client(t, c.Broker(id).Addr)
		req := kmsg.NewPtrOffsetFetchRequest() // v8+: the client picks the version
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = "h"
		req.Groups = append(req.Groups, g)
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		groups := resp.(*kmsg.OffsetFetchResponse).Groups
		if len(groups) != 1 {
			t.Fatalf("OffsetFetch v%d answered %d groups", req.Version, len(groups))
		}
		return groups[0].ErrorCode
	}
	commit(adm, 5)
	first := coordinatorOf(t, adm.FindGroupCoordinators(ctx, "h"), "h")
	part := c.Image().Topics["__consumer_offsets"].Partitions
	p := coord.PartitionFor("h", int32(len(part)))
	if part[p].Leader != first || part[p].Replicas[0] != first {
		t.Fatalf("the coordinator %d is not the preferred replica of %v", first, part[p])
	}
	internalTopicReplicated(t, c, "__consumer_offsets")

	c.Broker(first).Stop()
	waitLeadersMoved(c, first)
	live := liveAddrs(c, first)
	adm2 := kadm.NewClient(tandemtest.Client(t, live[0], kgo.SeedBrokers(live...)))
	second := eventually(t, ctx, func() (int32, error) {
		rs := adm2.FindGroupCoordinators(ctx, "h")
		return rs["h"].NodeID, rs.Error()
	})
	if second == first {
		t.Fatalf("broker %d still coordinates after its clean stop", first)
	}
	if got := committed(adm2); got != 5 {
		t.Fatalf("committed %d on the second coordinator, want 5", got)
	}
	commit(adm2, 9)

	c.Broker(first).Restart()
	c.WaitFor("the restarted broker back in the ISR", func(img *metadata.Image) bool {
		return len(img.Topics["__consumer_offsets"].Partitions[p].ISR) == 3
	})
	res, err := adm2.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"__consumer_offsets": {p: {}}})
	if err == nil {
		err = res["__consumer_offsets"][p].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the preferred replica leading", func(img *metadata.Image) bool {
		return img.Topics["__consumer_offsets"].Partitions[p].Leader == first
	})
	adm3 := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if got := committed(adm3); got != 9 {
		t.Fatalf("committed %d back on broker %d, want 9 (committed on broker %d while it followed)", got, first, second)
	}
	if code := fetchCode(second); code != kerr.NotCoordinator.Code {
		t.Fatalf("broker %d answers %v after it resigned, want NOT_COORDINATOR", second, kerr.ErrorForCode(code))
	}
	if code := fetchCode(first); code != 0 {
		t.Fatalf("broker %d answers %v for the group it leads again", first, kerr.ErrorForCode(code))
	}
}

// TestClusterOffsetCommitNeedsMinISR: a coordinator's writes are
// acks=all. With the broker's min.insync.replicas at 3, which
// __consumer_offsets follows, an offset commit is refused with
// COORDINATOR_NOT_AVAILABLE (Kafka's answer for NOT_ENOUGH_REPLICAS) while
// a replica of the group's partition is down, and nothing of it is
// applied; once the replica is back in the ISR the commit goes through.
func TestClusterOffsetCommitNeedsMinISR(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	props := maps.Clone(coordProps)
	props["min.insync.replicas"] = "3"
	c := tandemtest.StartCluster(t, 3, props)
	ctx := ctxFor(t, 2*time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "isr"); err != nil {
		t.Fatal(err)
	}
	commitCode := func(node int32, at int64) int16 {
		t.Helper()
		cl := tandemtest.Client(t, c.Broker(node).Addr)
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation = "m", -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "isr"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = 0, at, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	coordinator := eventually(t, ctx, func() (int32, error) {
		rs := adm.FindGroupCoordinators(ctx, "m")
		return rs["m"].NodeID, rs.Error()
	})
	internalTopicReplicated(t, c, "__consumer_offsets")
	if code := commitCode(coordinator, 7); code != 0 {
		t.Fatalf("commit with every replica in sync: %v", kerr.ErrorForCode(code))
	}
	p := coord.PartitionFor("m", int32(len(c.Image().Topics["__consumer_offsets"].Partitions)))
	down := coordinator%3 + 1 // another replica (every broker has one)
	c.Broker(down).Kill()
	c.WaitFor("the killed replica out of the ISR", func(img *metadata.Image) bool {
		return !slices.Contains(img.Topics["__consumer_offsets"].Partitions[p].ISR, down)
	})
	if code := commitCode(coordinator, 8); code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("commit with 2 replicas in sync of min.insync.replicas 3: %v, want COORDINATOR_NOT_AVAILABLE", kerr.ErrorForCode(code))
	}
	committed := func() int64 {
		offs := eventually(t, ctx, func() (kadm.OffsetResponses, error) { return fetchOffsets(ctx, adm, "m") })
		o, _ := offs.Lookup("isr", 0)
		return o.At
	}
	if got := committed(); got != 7 {
		t.Fatalf("committed %d after the refused commit, want 7", got)
	}
	c.Broker(down).Restart()
	c.WaitFor("the replica back in the ISR", func(img *metadata.Image) bool {
		return len(img.Topics["__consumer_offsets"].Partitions[p].ISR) == 3
	})
	if code := commitCode(coordinator, 9); code != 0 {
		t.Fatalf("commit with the replica back: %v", kerr.ErrorForCode(code))
	}
	if got := committed(); got != 9 {
		t.Fatalf("committed %d, want 9", got)
	}
}

// coordinatorOf is the node ID FindCoordinator answered for key.
func coordinatorOf(t *testing.T, rs kadm.FindCoordinatorResponses, key string) int32 {
	t.Helper()
	if err := rs.Error(); err != nil {
		t.Fatal(err)
	}
	return rs[key].NodeID
}

// readCommitted reads topic from the start with read_committed until
// it has n values, then for as long as more keep coming (a duplicate
// would), and returns the values read.
func readCommitted(t *testing.T, ctx context.Context, addrs []string, topic string, n int) []string {
	t.Helper()
	cons := tandemtest.Client(t, addrs[0], kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var got []string
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cons.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			t.Fatalf("read %d records of %s: %v", len(got), topic, ctx.Err())
		}
		before := len(got)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if len(got) >= n && len(got) == before {
			return got
		}
	}
}

// checkOnce fails unless got holds v<0> to v<n-1> once each.
func checkOnce(t *testing.T, got []string, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	for i := range n {
		if v := fmt.Sprintf("v%04d", i); seen[v] != 1 {
			t.Errorf("%s read %d times", v, seen[v])
		}
		delete(seen, fmt.Sprintf("v%04d", i))
	}
	if len(seen) > 0 || len(got) != n {
		t.Fatalf("read %d values, want %d; unexpected: %v", len(got), n, seen)
	}
}

// TestClusterTxnRemoteMarkers: a transaction over partitions led by
// every broker commits: the partitions led by other brokers than the
// transaction coordinator get their markers through WriteTxnMarkers
// (and their first batch is verified with AddPartitionsToTxn at the
// coordinator); the LSO reaches the log end and read_committed sees the
// committed records, not the aborted ones.
func TestClusterTxnRemoteMarkers(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	c := tandemtest.StartCluster(t, 3, coordProps)
	ctx := ctxFor(t, 2*time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, "tx"); err != nil {
		t.Fatal(err)
	}
	prod := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.TransactionalID("tx-remote"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	txn := func(from, to int, commit kgo.TransactionEndTry) {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			rs = append(rs, &kgo.Record{Topic: "tx", Partition: int32(i % 3), Value: []byte(fmt.Sprintf("v%04d", i))})
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(0, 30, kgo.TryCommit)
	txn(1000, 1030, kgo.TryAbort)

	coord := coordinatorOf(t, adm.FindTxnCoordinators(ctx, "tx-remote"), "tx-remote")
	remote := 0
	for p := range int32(3) {
		if c.Leader("tx", p) != coord {
			remote++
		}
	}
	if remote == 0 {
		t.Fatalf("every partition of tx is led by the coordinator %d: nothing is remote", coord)
	}
	internalTopicReplicated(t, c, "__transaction_state")
	if got := c.Image().Topics["__transaction_state"].Configs["min.insync.replicas"]; got != "2" {
		t.Errorf("__transaction_state min.insync.replicas = %q, want 2", got)
	}

	ends, err := adm.ListEndOffsets(ctx, "tx")
	if err != nil {
		t.Fatal(err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, "tx")
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		// 10 committed records and their marker, 10 aborted ones and theirs.
		if l, _ := lso.Lookup("tx", o.Partition); o.Offset != 22 || l.Offset != o.Offset {
			t.Errorf("tx-%d: end %d, LSO %d; want both 22", o.Partition, o.Offset, l.Offset)
		}
	})
	checkOnce(t, readCommitted(t, ctx, c.Addrs(), "tx", 30), 30)
	described, err := adm.DescribeTransactions(ctx, "tx-remote")
	if err != nil {
		t.Fatal(err)
	}
	if d := described["tx-remote"]; d.State != "CompleteAbort" {
		t.Errorf("transaction state %q, want CompleteAbort", d.State)
	}
}

// TestClusterTxnPreparedCompletesAfterFailover: a transaction whose
// commit is decided (PrepareCommit written) but whose markers cannot be
// written yet (the partitions refuse them: min.insync.replicas above
// their ISR) when its coordinator is killed is completed by the new
// coordinator, which loads PrepareCommit from the replicated
// __transaction_state and writes the markers once they are accepted.
func TestClusterTxnPreparedCompletesAfterFailover(t *testing.T) {
	tandemtest.Long(t) // kills the transaction coordinator: the full tier only
	c := tandemtest.StartCluster(t, 3, coordProps)
	ctx := ctxFor(t, 2*time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, "tp"); err != nil {
		t.Fatal(err)
	}
	prod := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.TransactionalID("tx-prepared"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var rs []*kgo.Record
	for i := range 30 {
		rs = append(rs, &kgo.Record{Topic: "tp", Partition: int32(i % 3), Value: []byte(fmt.Sprintf("v%04d", i))})
	}
	if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	setMinISR := func(adm *kadm.Client, v string) {
		t.Helper()
		res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: kadm.StringPtr(v)}}, "tp")
		if err == nil {
			_, err = res.On("tp", nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		c.WaitFor("min.insync.replicas "+v, func(img *metadata.Image) bool { return img.Topics["tp"].Configs["min.insync.replicas"] == v })
	}
	setMinISR(adm, "4") // more than the replicas: markers are refused
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	old := coordinatorOf(t, adm.FindTxnCoordinators(ctx, "tx-prepared"), "tx-prepared")
	described, err := adm.DescribeTransactions(ctx, "tx-prepared")
	if err != nil {
		t.Fatal(err)
	}
	if d := described["tx-prepared"]; d.State != "PrepareCommit" {
		t.Fatalf("transaction state %q before the kill, want PrepareCommit", d.State)
	}
	lso, err := adm.ListCommittedOffsets(ctx, "tp")
	if err != nil {
		t.Fatal(err)
	}
	lso.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Fatalf("tp-%d: LSO %d before the markers, want 0", o.Partition, o.Offset)
		}
	})

	c.Broker(old).Kill()
	waitLeadersMoved(c, old)
	live := liveAddrs(c, old)
	adm2 := kadm.NewClient(tandemtest.Client(t, live[0], kgo.SeedBrokers(live...)))
	described = eventually(t, ctx, func() (kadm.DescribedTransactions, error) { return describeTxn(ctx, adm2, "tx-prepared") })
	if d := described["tx-prepared"]; d.State != "PrepareCommit" || d.Coordinator == old {
		t.Fatalf("after the kill: state %q on coordinator %d, want PrepareCommit on another than %d", d.State, d.Coordinator, old)
	}
	setMinISR(adm2, "2")
	for {
		described = eventually(t, ctx, func() (kadm.DescribedTransactions, error) { return describeTxn(ctx, adm2, "tx-prepared") })
		if described["tx-prepared"].State == "CompleteCommit" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("transaction still %q", described["tx-prepared"].State)
		case <-time.After(50 * time.Millisecond):
		}
	}
	ends := eventually(t, ctx, func() (kadm.ListedOffsets, error) { return adm2.ListEndOffsets(ctx, "tp") })
	lso = eventually(t, ctx, func() (kadm.ListedOffsets, error) { return adm2.ListCommittedOffsets(ctx, "tp") })
	ends.Each(func(o kadm.ListedOffset) {
		if l, _ := lso.Lookup("tp", o.Partition); o.Offset != 11 || l.Offset != 11 {
			t.Errorf("tp-%d: end %d, LSO %d; want both 11", o.Partition, o.Offset, l.Offset)
		}
	})
	checkOnce(t, readCommitted(t, ctx, live, "tp", 30), 30)
}

// TestClusterExactlyOnceAcrossCoordinatorKill runs franz-go's
// GroupTransactSession consume-transform-produce from an RF=3 input to
// an RF=3 output topic and kills, a third of the way through, the
// transaction coordinator (and in the second case the group
// coordinator): every input record is in the output exactly once for
// read_committed, and the group's committed offsets are the input's end.
// The group and the transaction have different coordinators, so the
// group's offsets are committed by markers from another broker.
func TestClusterExactlyOnceAcrossCoordinatorKill(t *testing.T) {
	tandemtest.Long(t) // tens of seconds: the full tier only
	for _, kill := range []string{"txn", "group"} {
		t.Run(kill, func(t *testing.T) { exactlyOnceAcrossKill(t, kill) })
	}
}

func exactlyOnceAcrossKill(t *testing.T, kill string) {
	const n = 600
	c := tandemtest.StartCluster(t, 3, coordProps)
	ctx := ctxFor(t, 3*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(ctx, 3, 3, nil, "eos-in", "eos-out"); err != nil {
		t.Fatal(err)
	}
	produceValues(t, ctx, cl, "eos-in", 0, n)

	// A group coordinated by another broker than the transaction: its
	// offsets get their markers through WriteTxnMarkers, and each kill
	// below takes one coordinator, not both.
	find := func(rs func() kadm.FindCoordinatorResponses, key string) int32 {
		return eventually(t, ctx, func() (int32, error) { r := rs(); return r[key].NodeID, r.Error() })
	}
	txnCoord := find(func() kadm.FindCoordinatorResponses { return adm.FindTxnCoordinators(ctx, "eos") }, "eos")
	group := ""
	for i := 0; group == ""; i++ {
		g := fmt.Sprintf("eos-g%d", i)
		if find(func() kadm.FindCoordinatorResponses { return adm.FindGroupCoordinators(ctx, g) }, g) != txnCoord {
			group = g
		}
	}

	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(c.Addrs()...), kgo.TransactionalID("eos"),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics("eos-in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(10*time.Second), kgo.TransactionTimeout(20*time.Second),
		kgo.WithLogger(kgo.BasicLogger(testWriter{t}, kgo.LogLevelWarn, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	committed, killed := 0, int32(-1)
	for committed < n {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records committed: %v", committed, n, ctx.Err())
		}
		if killed < 0 && committed >= n/3 {
			if kill == "txn" {
				killed = coordinatorOf(t, adm.FindTxnCoordinators(ctx, "eos"), "eos")
			} else {
				killed = coordinatorOf(t, adm.FindGroupCoordinators(ctx, group), group)
			}
			t.Logf("killing the %s coordinator, broker %d, after %d records", kill, killed, committed)
			c.Broker(killed).Kill()
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := sess.PollRecords(pctx, 50)
		cancel()
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("poll %s-%d: %v", topic, p, err)
			}
		})
		recs := fs.Records()
		if err := sess.Begin(); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			sess.Produce(ctx, &kgo.Record{Topic: "eos-out", Value: r.Value}, nil)
		}
		ok, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			t.Logf("end: %v", err)
		}
		if ok {
			committed += len(recs)
		}
	}
	if killed < 0 {
		t.Fatal("nothing was killed")
	}
	live := liveAddrs(c, killed)
	checkOnce(t, readCommitted(t, ctx, live, "eos-out", n), n)
	adm2 := kadm.NewClient(tandemtest.Client(t, live[0], kgo.SeedBrokers(live...)))
	offs := eventually(t, ctx, func() (kadm.OffsetResponses, error) { return fetchOffsets(ctx, adm2, group) })
	ends := eventually(t, ctx, func() (kadm.ListedOffsets, error) { return adm2.ListEndOffsets(ctx, "eos-in") })
	ends.Each(func(o kadm.ListedOffset) {
		if got, _ := offs.Lookup("eos-in", o.Partition); got.At != o.Offset {
			t.Errorf("eos-in-%d: committed %d, want %d", o.Partition, got.At, o.Offset)
		}
	})
}

// testWriter sends a client's log to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// TestClusterShareGroupConsume: a share group on a three-node cluster,
// whose share-partitions are led by other brokers than the ones keeping
// their state in __share_group_state (which the share-partition leaders
// read and write with the share-group state APIs): every record is
// delivered and accepted, and the group's start offsets, read from the
// state wherever it is kept, reach the log end.
func TestClusterShareGroupConsume(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	props := maps.Clone(coordProps)
	// Two partitions of state over three brokers: the broker that leads
	// none of them leads a share-partition whose state is elsewhere.
	props["share.coordinator.state.topic.num.partitions"] = "2"
	props["group.share.heartbeat.interval.ms"] = "200"
	props["group.share.min.heartbeat.interval.ms"] = "100"
	c := tandemtest.StartCluster(t, 3, props)
	ctx := ctxFor(t, 2*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, "sq"); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	earliest := "earliest"
	req.Resources = append(req.Resources, kmsg.IncrementalAlterConfigsRequestResource{ResourceType: kmsg.ConfigResourceTypeGroupConfig, ResourceName: "sg",
		Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "share.auto.offset.reset", Op: kmsg.IncrementalAlterConfigOpSet, Value: &earliest}}})
	if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("share.auto.offset.reset: %v %+v", err, resp)
	}
	produceValues(t, ctx, cl, "sq", 0, 300)

	// Where each share-partition's state is kept: at least one is kept
	// by another broker than the partition's leader.
	eventually(t, ctx, func() (int32, error) {
		rs := adm.FindGroupCoordinators(ctx, "sg") // creates the internal topics
		return rs["sg"].NodeID, rs.Error()
	})
	img := c.Image()
	sq := img.Topics["sq"]
	remote := 0
	cons := tandemtest.Client(t, c.Addrs()[1], kgo.SeedBrokers(c.Addrs()...), kgo.ShareGroup("sg"), kgo.ConsumeTopics("sq"),
		kgo.FetchMaxWait(200*time.Millisecond))
	seen := map[string]int{}
	for len(seen) < 300 {
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 300 records", len(seen))
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cons.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			r.Ack(kgo.AckAccept)
		})
	}
	state := c.Image().Topics["__share_group_state"]
	for i, p := range sq.Partitions {
		sp := coord.PartitionFor("sg:"+sq.ID.Base64()+":"+fmt.Sprint(i), int32(len(state.Partitions)))
		if state.Partitions[sp].Leader != p.Leader {
			remote++
		}
	}
	if remote == 0 {
		t.Fatal("every share-partition's state is kept by its leader: nothing is remote")
	}
	for i := range 300 {
		if v := fmt.Sprintf("v%04d", i); seen[v] == 0 {
			t.Fatalf("%s never delivered", v)
		}
	}
	cons.Close() // sends the acknowledgements not sent yet
	ends := eventually(t, ctx, func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, "sq") })
	for {
		req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
		req.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: "sg"}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, rg := range resp.Groups {
			for _, rt := range rg.Topics {
				for _, rp := range rt.Partitions {
					if e, _ := ends.Lookup("sq", rp.Partition); rp.ErrorCode == 0 && rp.StartOffset == e.Offset {
						done++
					}
				}
			}
		}
		if done == 3 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("start offsets %+v, want the log ends %+v", resp.Groups, ends)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestClusterIsolatedCoordinator: the broker that coordinates a group
// is cut off from the other brokers, and so from the controller, but not
// from clients (issue 44's partitions found it). The controller fences
// it, another broker coordinates the group and acknowledges a newer
// commit. The cut-off broker cannot learn that, and must not answer from
// its state: its offset, older than one acknowledged, would move the
// group's offsets backwards for a client that asks it (or a member that
// resumes from it). It answered the old offset before; now, with no
// heartbeat answered for the session timeout, it is not the coordinator.
func TestClusterIsolatedCoordinator(t *testing.T) {
	tandemtest.Long(t) // waits out a cut coordinator's session: the full tier only
	c := tandemtest.StartCluster(t, 3, coordProps)
	ctx := ctxFor(t, 2*time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "zc"); err != nil {
		t.Fatal(err)
	}
	commit := func(adm *kadm.Client, at int64) {
		t.Helper()
		eventually(t, ctx, func() (kadm.OffsetResponses, error) {
			r, err := adm.CommitOffsets(ctx, "zg", kadm.Offsets{"zc": {0: {Topic: "zc", Partition: 0, At: at, LeaderEpoch: -1}}})
			if err == nil {
				err = r.Error()
			}
			return r, err
		})
	}
	commit(adm, 10)
	internalTopicReplicated(t, c, "__consumer_offsets")
	old := coordinatorOf(t, adm.FindGroupCoordinators(ctx, "zg"), "zg")
	var others []int32
	for _, b := range c.Brokers {
		if b.ID != old {
			others = append(others, b.ID)
		}
	}
	c.Partition([]int32{old}, others)
	defer c.Heal()
	live := liveAddrs(c, old)
	adm2 := kadm.NewClient(tandemtest.Client(t, live[0], kgo.SeedBrokers(live...)))
	eventually(t, ctx, func() (int32, error) {
		rs := adm2.FindGroupCoordinators(ctx, "zg")
		if err := rs.Error(); err != nil || rs["zg"].NodeID == old {
			return 0, fmt.Errorf("coordinator %d (%v)", rs["zg"].NodeID, err)
		}
		return rs["zg"].NodeID, nil
	})
	commit(adm2, 20) // acknowledged by the new coordinator

	conn := tandemtest.Dial(t, c.Broker(old).Addr)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group = 7, "zg"
	resp, err := conn.Request(req)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.(*kmsg.OffsetFetchResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		if !errors.Is(err, kerr.NotCoordinator) && !errors.Is(err, kerr.CoordinatorNotAvailable) {
			t.Fatalf("the cut-off broker answered %v; want NOT_COORDINATOR", err)
		}
		return
	}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			if rp.Offset < 20 {
				t.Fatalf("the cut-off broker %d answered offset %d for %s-%d after 20 was acknowledged by the new coordinator", old, rp.Offset, rt.Topic, rp.Partition)
			}
		}
	}
}

// TestClusterTxnCompletesAfterSessionLapse: a transaction coordinator
// whose markers are refused (min.insync.replicas above the replicas)
// retries them; meanwhile its broker is cut from the controller long
// enough for its own session to lapse (its broker.session.timeout.ms is
// shorter than the controller's, so it keeps its leaderships) and its
// shard answers COORDINATOR_NOT_AVAILABLE. Once the link and the topic
// are back, the transaction completes. Before, the retries stopped at the
// first such answer, as if another broker coordinated the transaction,
// and it stayed PrepareCommit: its producer got CONCURRENT_TRANSACTIONS
// until leadership moved (issue 44's partition runs hung so).
func TestClusterTxnCompletesAfterSessionLapse(t *testing.T) {
	tandemtest.Long(t) // waits out a broker session: the full tier only
	c := tandemtest.StartCluster(t, 3, coordProps)
	ctx := ctxFor(t, 3*time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	ctl := c.Image().ControllerID
	x := c.Brokers[ctl%3].ID // not the controller
	c.Broker(x).Props = map[string]string{"broker.session.timeout.ms": "1000", "broker.heartbeat.interval.ms": "200"}
	c.Broker(x).Stop()
	c.Broker(x).Restart()
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "lapse"); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, func() (int32, error) { // creates __transaction_state
		rs := adm.FindTxnCoordinators(ctx, "tx-0")
		return rs["tx-0"].NodeID, rs.Error()
	})
	internalTopicReplicated(t, c, "__transaction_state")
	id := ""
	for i := 0; id == ""; i++ {
		if i == 200 {
			t.Fatalf("no transactional id of 200 is coordinated by broker %d", x)
		}
		if n := coordinatorOf(t, adm.FindTxnCoordinators(ctx, fmt.Sprintf("tx-%d", i)), fmt.Sprintf("tx-%d", i)); n == x {
			id = fmt.Sprintf("tx-%d", i)
		}
	}
	prod := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.TransactionalID(id), kgo.DefaultProduceTopic("lapse"))
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	minISR := func(v string) {
		t.Helper()
		res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: kadm.StringPtr(v)}}, "lapse")
		if err == nil {
			_, err = res.On("lapse", nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		c.WaitFor("min.insync.replicas "+v, func(img *metadata.Image) bool { return img.Topics["lapse"].Configs["min.insync.replicas"] == v })
	}
	minISR("4") // the markers are refused: the coordinator retries them
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	c.Partition([]int32{x}, []int32{ctl})
	time.Sleep(3 * time.Second) // x's session (1 s) lapses; the controller's (4 s) does not
	c.Heal()
	minISR("2")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		d, err := describeTxn(ctx, adm, id)
		if err == nil && d[id].State == "CompleteCommit" {
			if d[id].Coordinator != x {
				t.Fatalf("the transaction moved to coordinator %d: the test wants broker %d to keep it", d[id].Coordinator, x)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("transaction %s not completed 30 s after the link and the topic came back: %+v (%v)", id, d[id], err)
		}
	}
}
