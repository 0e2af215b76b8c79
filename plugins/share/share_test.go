package share_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

var testProps = map[string]string{
	"offsets.topic.num.partitions":                 "2",
	"share.coordinator.state.topic.num.partitions": "2",
	"group.share.heartbeat.interval.ms":            "200",
	"group.share.min.heartbeat.interval.ms":        "100",
	"group.share.session.timeout.ms":               "6000",
	"group.share.min.session.timeout.ms":           "1000",
	"group.share.min.record.lock.duration.ms":      "500",
}

func produce(t *testing.T, addr, topic string, partition int32, n int) {
	t.Helper()
	cl := tandemtest.Client(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Partition: partition, Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// setGroupConfig sets share group configs (the GROUP config resource).
func setGroupConfig(t *testing.T, cl *kgo.Client, group string, kvs ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.IncrementalAlterConfigsRequestResource{ResourceType: kmsg.ConfigResourceTypeGroupConfig, ResourceName: group}
	for i := 0; i < len(kvs); i += 2 {
		res.Configs = append(res.Configs, kmsg.IncrementalAlterConfigsRequestResourceConfig{Name: kvs[i], Op: kmsg.IncrementalAlterConfigOpSet, Value: &kvs[i+1]})
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("set group configs %v: %v %+v", kvs, err, resp)
	}
}

// TestShareGroupConsume: two franz-go share consumers read a topic
// together; every record is delivered and accepted, the group is listed
// and described as a share group, and its start offsets end at the log
// end.
func TestShareGroupConsume(t *testing.T) {
	b := tandemtest.StartInProcess(t, testProps)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "sq", 2)
	admin := tandemtest.Client(t, addr)
	setGroupConfig(t, admin, "sg", "share.auto.offset.reset", "earliest")
	produce(t, addr, "sq", 0, 100)
	produce(t, addr, "sq", 1, 100)

	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var cls []*kgo.Client
	var wg sync.WaitGroup
	began := time.Now()
	for range 2 {
		cl := tandemtest.Client(t, addr, kgo.ShareGroup("sg"), kgo.ConsumeTopics("sq"), kgo.FetchMaxWait(200*time.Millisecond))
		cls = append(cls, cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				fs := cl.PollFetches(pctx)
				pcancel()
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) {
					seen[fmt.Sprint(r.Partition, "/", string(r.Value))]++
					r.Ack(kgo.AckAccept)
				})
				n := len(seen)
				mu.Unlock()
				if n == 200 {
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("consumed in %v", time.Since(began))
	if len(seen) != 200 {
		t.Fatalf("consumed %d distinct records, want 200", len(seen))
	}
	listed, err := kadm.NewClient(admin).ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lg := listed["sg"]; lg.GroupType != "share" || lg.ProtocolType != "share" {
		t.Fatalf("ListGroups: %+v", listed)
	}
	described, err := kadm.NewClient(admin).DescribeShareGroups(ctx, "sg")
	if err != nil || described["sg"].Err != nil || len(described["sg"].Members) != 2 || described["sg"].GroupState != "Stable" {
		t.Fatalf("DescribeShareGroups: %v %+v", err, described)
	}
	for _, cl := range cls {
		cl.Close() // the acknowledgements not sent yet go as it leaves
	}
	wait.Until(t, 30*time.Second, func() error {
		if o := startOffsets(t, admin, "sg"); o[0] != 100 || o[1] != 100 {
			return fmt.Errorf("start offsets %v, want 100 for both partitions", o)
		}
		return nil
	})
}

// startOffsets returns a share group's start offsets by partition
// (DescribeShareGroupOffsets for all its partitions).
func startOffsets(t *testing.T, cl *kgo.Client, group string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	req.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: group}}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || resp.Groups[0].ErrorCode != 0 {
		t.Fatalf("DescribeShareGroupOffsets: %v %+v", err, resp)
	}
	out := map[int32]int64{}
	for _, tt := range resp.Groups[0].Topics {
		for _, p := range tt.Partitions {
			out[p.Partition] = p.StartOffset
		}
	}
	return out
}

// sharer drives the share protocol by hand.
type sharer struct {
	t      *testing.T
	cl     *kgo.Client
	group  string
	id     string
	topic  [16]byte
	epoch  int32 // share session epoch
	member int32
}

func newSharer(t *testing.T, cl *kgo.Client, group, id, topic string) *sharer {
	t.Helper()
	s := &sharer{t: t, cl: cl, group: group, id: id}
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.SubscribedTopicNames = group, id, []string{topic}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || resp.ErrorCode != 0 || resp.Assignment == nil || len(resp.Assignment.TopicPartitions) != 1 {
		t.Fatalf("ShareGroupHeartbeat: %v %+v", err, resp)
	}
	s.topic, s.member = resp.Assignment.TopicPartitions[0].TopicID, resp.MemberEpoch
	return s
}

type ack struct {
	first, last int64
	typ         int8
}

// fetch sends a ShareFetch for partition 0 with acks and returns the
// partition's answer.
func (s *sharer) fetch(maxRecords int32, acks ...ack) (*kmsg.ShareFetchResponse, kmsg.ShareFetchResponseTopicPartition) {
	s.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &s.group, &s.id, s.epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 100, 1, 1<<20, maxRecords, maxRecords
	pt := kmsg.ShareFetchRequestTopicPartition{Partition: 0, PartitionMaxBytes: 1 << 20}
	for _, a := range acks {
		pt.AcknowledgementBatches = append(pt.AcknowledgementBatches, kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{FirstOffset: a.first, LastOffset: a.last, AcknowledgeTypes: []int8{a.typ}})
	}
	req.Topics = []kmsg.ShareFetchRequestTopic{{TopicID: s.topic, Partitions: []kmsg.ShareFetchRequestTopicPartition{pt}}}
	resp, err := req.RequestWith(context.Background(), s.cl)
	if err != nil {
		s.t.Fatal(err)
	}
	if resp.ErrorCode == 0 && s.epoch >= 0 {
		s.epoch++
	}
	for _, tt := range resp.Topics {
		for _, p := range tt.Partitions {
			return resp, p
		}
	}
	return resp, kmsg.ShareFetchResponseTopicPartition{}
}

// acknowledge sends a ShareAcknowledge and returns the top-level and the
// partition error codes.
func (s *sharer) acknowledge(acks ...ack) (int16, int16) {
	s.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &s.group, &s.id, s.epoch
	pt := kmsg.ShareAcknowledgeRequestTopicPartition{Partition: 0}
	for _, a := range acks {
		pt.AcknowledgementBatches = append(pt.AcknowledgementBatches, kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{FirstOffset: a.first, LastOffset: a.last, AcknowledgeTypes: []int8{a.typ}})
	}
	req.Topics = []kmsg.ShareAcknowledgeRequestTopic{{TopicID: s.topic, Partitions: []kmsg.ShareAcknowledgeRequestTopicPartition{pt}}}
	resp, err := req.RequestWith(context.Background(), s.cl)
	if err != nil {
		s.t.Fatal(err)
	}
	if resp.ErrorCode == 0 && s.epoch > 0 {
		s.epoch++
	}
	var code int16
	if len(resp.Topics) > 0 && len(resp.Topics[0].Partitions) > 0 {
		code = resp.Topics[0].Partitions[0].ErrorCode
	}
	return resp.ErrorCode, code
}

// acquired lists the acquired offsets with their delivery counts.
func acquired(p kmsg.ShareFetchResponseTopicPartition) map[int64]int16 {
	out := map[int64]int16{}
	for _, a := range p.AcquiredRecords {
		for o := a.FirstOffset; o <= a.LastOffset; o++ {
			out[o] = a.DeliveryCount
		}
	}
	return out
}

func offsets(m map[int64]int16) []int64 {
	var out []int64
	for o := range m {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

func span(first, last int64) []int64 {
	var out []int64
	for o := first; o <= last; o++ {
		out = append(out, o)
	}
	return out
}

// TestShareAcknowledgements: ACCEPT finishes a record, RELEASE delivers it
// again with a higher delivery count, REJECT never again, and a record
// released at share.delivery.count.limit is archived. Acknowledging a
// record not acquired is INVALID_RECORD_STATE and changes nothing; the
// session epoch is checked; closing the session releases what the member
// holds; the start offset follows.
func TestShareAcknowledgements(t *testing.T) {
	b := tandemtest.StartInProcess(t, testProps)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "sa", 1)
	cl := tandemtest.Client(t, addr)
	setGroupConfig(t, cl, "ga", "share.auto.offset.reset", "earliest", "share.delivery.count.limit", "2")
	produce(t, addr, "sa", 0, 10)
	m := newSharer(t, cl, "ga", "m1", "sa")

	if code, _ := m.acknowledge(ack{0, 0, 1}); code != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("ShareAcknowledge opening a session: %d", code)
	}
	_, p := m.fetch(100)
	if got := acquired(p); !slices.Equal(offsets(got), span(0, 9)) || got[0] != 1 {
		t.Fatalf("first fetch acquired %v", got)
	}
	if len(p.Records) == 0 {
		t.Fatal("no record batches")
	}
	top, code := m.acknowledge(ack{0, 2, 1}, ack{3, 4, 2}, ack{5, 5, 3})
	if top != 0 || code != 0 {
		t.Fatalf("acknowledge: %d %d", top, code)
	}
	if _, code := m.acknowledge(ack{0, 0, 1}); code != kerr.InvalidRecordState.Code {
		t.Fatalf("accepting an accepted record: %d", code)
	}
	_, p = m.fetch(100)
	if got := acquired(p); !slices.Equal(offsets(got), []int64{3, 4}) || got[3] != 2 {
		t.Fatalf("released records delivered again: %v", got)
	}
	// 3 is released at the delivery count limit: archived, never again.
	if _, p = m.fetch(100, ack{3, 3, 2}, ack{4, 4, 1}); p.AcknowledgeErrorCode != 0 || len(p.AcquiredRecords) != 0 {
		t.Fatalf("piggy-backed acknowledgements: %+v", p)
	}
	if o := startOffsets(t, cl, "ga"); o[0] != 6 {
		t.Fatalf("start offset %d, want 6 (0-5 done, 6-9 in flight)", o[0])
	}

	stale := m.epoch
	m.epoch = 99
	if resp, _ := m.fetch(100); resp.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("wrong session epoch: %d", resp.ErrorCode)
	}
	m.epoch = stale
	// Closing the session releases 6-9; a new session gets them again.
	m.epoch = -1
	if resp, _ := m.fetch(0); resp.ErrorCode != 0 {
		t.Fatalf("closing the session: %d", resp.ErrorCode)
	}
	m.epoch = 0
	wait.Until(t, 30*time.Second, func() error {
		if m.epoch != 0 {
			m.epoch = -1
			m.fetch(0)
			m.epoch = 0
		}
		_, p = m.fetch(100)
		if got := offsets(acquired(p)); !slices.Equal(got, span(6, 9)) {
			return fmt.Errorf("acquired %v, want 6-9", got)
		}
		return nil
	})
	if got := acquired(p); got[6] != 2 {
		t.Fatalf("delivery counts after the session closed: %v", got)
	}
	if _, code := m.acknowledge(ack{6, 9, 1}); code != 0 {
		t.Fatalf("accept 6-9: %d", code)
	}
	if o := startOffsets(t, cl, "ga"); o[0] != 10 {
		t.Fatalf("start offset %d, want 10", o[0])
	}
	other := &sharer{t: t, cl: cl, group: "ga", id: "nobody", topic: m.topic, epoch: 3}
	if resp, _ := other.fetch(10); resp.ErrorCode != kerr.ShareSessionNotFound.Code {
		t.Fatalf("a session that does not exist: %d", resp.ErrorCode)
	}
}

// TestShareLockExpiry: records acquired and not acknowledged within
// share.record.lock.duration.ms go to another member.
func TestShareLockExpiry(t *testing.T) {
	b := tandemtest.StartInProcess(t, testProps)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "sl", 1)
	cl := tandemtest.Client(t, addr)
	setGroupConfig(t, cl, "gl", "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "600")
	produce(t, addr, "sl", 0, 5)
	a, c := newSharer(t, cl, "gl", "a", "sl"), newSharer(t, cl, "gl", "c", "sl")
	resp, p := a.fetch(100)
	if len(acquired(p)) != 5 || resp.AcquisitionLockTimeoutMillis != 600 {
		t.Fatalf("a acquired %v (lock %d ms)", acquired(p), resp.AcquisitionLockTimeoutMillis)
	}
	if _, p := c.fetch(100); len(p.AcquiredRecords) != 0 {
		t.Fatalf("c acquired records a holds: %v", acquired(p))
	}
	wait.Until(t, 30*time.Second, func() error {
		_, p := c.fetch(100)
		if got := acquired(p); len(got) != 5 || got[0] != 2 {
			return fmt.Errorf("c acquired %v, want 5 records, offset 0 delivered twice", got)
		}
		return nil
	})
	if _, code := a.acknowledge(ack{0, 4, 1}); code != kerr.InvalidRecordState.Code {
		t.Fatalf("a accepts records whose lock expired: %d", code)
	}
}

// TestShareRestart: after a broker restart, accepted records are never
// delivered again and records that were in flight are (at least once),
// with their delivery counts.
func TestShareRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() *server.Broker { return tandemtest.StartInProcessIn(t, dir, testProps) }
	b := start()
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "sr", 1)
	cl := tandemtest.Client(t, addr)
	setGroupConfig(t, cl, "gr", "share.auto.offset.reset", "earliest")
	produce(t, addr, "sr", 0, 10)
	m := newSharer(t, cl, "gr", "m", "sr")
	if _, p := m.fetch(100); len(acquired(p)) != 10 {
		t.Fatalf("acquired %v", acquired(p))
	}
	if _, code := m.acknowledge(ack{0, 3, 1}, ack{5, 5, 1}, ack{6, 6, 2}); code != 0 {
		t.Fatalf("acknowledge: %d", code)
	}
	cl.Close()
	b.Close()

	b = start()
	cl = tandemtest.Client(t, b.Addr())
	n := newSharer(t, cl, "gr", "n", "sr")
	var got map[int64]int16
	wait.Until(t, 30*time.Second, func() error {
		n.epoch = 0
		_, p := n.fetch(100)
		if got = acquired(p); len(got) == 0 {
			return errors.New("nothing acquired yet")
		}
		return nil
	})
	if !slices.Equal(offsets(got), []int64{4, 6, 7, 8, 9}) {
		t.Fatalf("after the restart acquired %v, want 4 and 6-9 (0-3 and 5 were accepted)", got)
	}
	if got[6] != 2 || got[4] != 2 {
		t.Fatalf("delivery counts after the restart: %v", got)
	}
	if o := startOffsets(t, cl, "gr"); o[0] != 4 {
		t.Fatalf("start offset after the restart: %d", o[0])
	}
}

// TestShareGroupOffsetsAdmin: AlterShareGroupOffsets sets the start of an
// empty group (a consumer then starts there), is refused while the group
// has members, and DeleteShareGroupOffsets and DeleteGroups remove the
// state.
func TestShareGroupOffsetsAdmin(t *testing.T) {
	b := tandemtest.StartInProcess(t, testProps)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "so", 1)
	cl := tandemtest.Client(t, addr)
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	produce(t, addr, "so", 0, 20)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "so", Partition: 0, At: 12})
	if res, err := adm.AlterShareGroupOffsets(ctx, "go", offs); err != nil || res.Error() != nil {
		t.Fatalf("alter: %v %v", err, res.Error())
	}
	if o := startOffsets(t, cl, "go"); o[0] != 12 {
		t.Fatalf("start offset %d after alter, want 12", o[0])
	}
	m := newSharer(t, cl, "go", "m", "so")
	if _, p := m.fetch(100); !slices.Equal(offsets(acquired(p)), span(12, 19)) {
		t.Fatalf("after the alter acquired %v", acquired(p))
	}
	if res, err := adm.AlterShareGroupOffsets(ctx, "go", offs); err == nil && res.Error() == nil {
		t.Fatal("alter of a group with a member succeeded")
	}
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.MemberEpoch = "go", "m", -1
	if resp, err := hb.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("leave: %v %+v", err, resp)
	}
	wait.Until(t, 30*time.Second, func() error {
		res, err := adm.DeleteShareGroupOffsets(ctx, "go", "so")
		if err != nil {
			return err
		}
		return res.Error()
	})
	if o := startOffsets(t, cl, "go"); len(o) != 0 {
		t.Fatalf("offsets after delete: %v", o)
	}
	if _, err := adm.AlterShareGroupOffsets(ctx, "go", offs); err != nil {
		t.Fatal(err)
	}
	if res, err := adm.DeleteGroup(ctx, "go"); err != nil || res.Err != nil {
		t.Fatalf("DeleteGroups: %v %+v", err, res)
	}
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	req.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: "go"}}
	if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Topics) != 0 {
		t.Fatalf("describe after DeleteGroups: %v %+v", err, resp)
	}
}

// TestShareStateAPIs: the share-group state APIs read and write
// __share_group_state as Kafka's share coordinator does: a write merges
// state batches and moves the start, a writer with an older state epoch
// is fenced, a delete removes the state.
func TestShareStateAPIs(t *testing.T) {
	b := tandemtest.StartInProcess(t, testProps)
	cl := tandemtest.Client(t, b.Addr())
	ctx := context.Background()
	id := [16]byte{1, 2, 3}
	init := kmsg.NewPtrInitializeShareGroupStateRequest()
	init.GroupID = "gs"
	init.Topics = []kmsg.InitializeShareGroupStateRequestTopic{{TopicID: id, Partitions: []kmsg.InitializeShareGroupStateRequestTopicPartition{{Partition: 3, StateEpoch: 1, StartOffset: 10}}}}
	if resp, err := init.RequestWith(ctx, cl); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("initialize: %v %+v", err, resp)
	}
	write := func(stateEpoch int32, start int64, batches ...kmsg.WriteShareGroupStateRequestTopicPartitionStateBatch) int16 {
		t.Helper()
		req := kmsg.NewPtrWriteShareGroupStateRequest()
		req.GroupID = "gs"
		req.Topics = []kmsg.WriteShareGroupStateRequestTopic{{TopicID: id, Partitions: []kmsg.WriteShareGroupStateRequestTopicPartition{
			{Partition: 3, StateEpoch: stateEpoch, StartOffset: start, StateBatches: batches}}}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	batch := func(first, last int64, state int8, count int16) kmsg.WriteShareGroupStateRequestTopicPartitionStateBatch {
		return kmsg.WriteShareGroupStateRequestTopicPartitionStateBatch{FirstOffset: first, LastOffset: last, DeliveryState: state, DeliveryCount: count}
	}
	if code := write(1, -1, batch(10, 19, 0, 1)); code != 0 {
		t.Fatalf("write: %d", code)
	}
	if code := write(1, 12, batch(12, 14, 2, 1), batch(15, 15, 4, 3)); code != 0 {
		t.Fatalf("write: %d", code)
	}
	if code := write(0, -1, batch(16, 16, 2, 1)); code != kerr.FencedStateEpoch.Code {
		t.Fatalf("a write with an older state epoch: %d", code)
	}
	read := kmsg.NewPtrReadShareGroupStateRequest()
	read.GroupID = "gs"
	read.Topics = []kmsg.ReadShareGroupStateRequestTopic{{TopicID: id, Partitions: []kmsg.ReadShareGroupStateRequestTopicPartition{{Partition: 3}}}}
	resp, err := read.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	var got []string
	for _, sb := range p.StateBatches {
		got = append(got, fmt.Sprintf("%d-%d:%d/%d", sb.FirstOffset, sb.LastOffset, sb.DeliveryState, sb.DeliveryCount))
	}
	want := []string{"12-14:2/1", "15-15:4/3", "16-19:0/1"}
	if p.ErrorCode != 0 || p.StartOffset != 12 || p.StateEpoch != 1 || !slices.Equal(got, want) {
		t.Fatalf("read: start %d epoch %d batches %v, want start 12 epoch 1 %v", p.StartOffset, p.StateEpoch, got, want)
	}
	summary := kmsg.NewPtrReadShareGroupStateSummaryRequest()
	summary.Version = 1
	summary.GroupID = "gs"
	summary.Topics = []kmsg.ReadShareGroupStateSummaryRequestTopic{{TopicID: id, Partitions: []kmsg.ReadShareGroupStateSummaryRequestTopicPartition{{Partition: 3}}}}
	sresp, err := summary.RequestWith(ctx, cl)
	if err != nil || sresp.Topics[0].Partitions[0].StartOffset != 12 || sresp.Topics[0].Partitions[0].DeliveryCompleteCount != 4 {
		t.Fatalf("summary: %v %+v", err, sresp)
	}
	del := kmsg.NewPtrDeleteShareGroupStateRequest()
	del.GroupID = "gs"
	del.Topics = []kmsg.DeleteShareGroupStateRequestTopic{{TopicID: id, Partitions: []kmsg.DeleteShareGroupStateRequestTopicPartition{{Partition: 3}}}}
	if resp, err := del.RequestWith(ctx, cl); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("delete: %v %+v", err, resp)
	}
	if resp, err := read.RequestWith(ctx, cl); err != nil || resp.Topics[0].Partitions[0].StartOffset != -1 {
		t.Fatalf("read after delete: %v %+v", err, resp)
	}
}

// TestShareReadCommitted: a share group with share.isolation.level
// read_committed is never delivered records of aborted transactions, nor
// records past the last stable offset.
func TestShareReadCommitted(t *testing.T) {
	b := tandemtest.StartInProcess(t, testProps)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "stx", 1)
	cl := tandemtest.Client(t, addr)
	setGroupConfig(t, cl, "gtx", "share.auto.offset.reset", "earliest", "share.isolation.level", "read_committed")
	txn := tandemtest.Client(t, addr, kgo.TransactionalID("stx-producer"), kgo.DefaultProduceTopic("stx"))
	ctx := context.Background()
	for _, commit := range []bool{false, true} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i := range 3 {
			recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprint(commit, i))})
		}
		if err := txn.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	m := newSharer(t, cl, "gtx", "m", "stx")
	_, p := m.fetch(100)
	// 0-2 aborted, 3 its marker, 4-6 committed, 7 the commit marker.
	if got := offsets(acquired(p)); !slices.Equal(got, span(4, 6)) {
		t.Fatalf("acquired %v, want the committed records 4-6", got)
	}
}

// TestShareGroupOffsetsCapability: plugin.ShareGroupOffsets, what the
// mirror's metadata sync will use: start offsets are read with the group
// state and set only on an empty group.
func TestShareGroupOffsetsCapability(t *testing.T) {
	b := tandemtest.StartInProcess(t, testProps)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "sc", 1)
	produce(t, addr, "sc", 0, 10)
	sgo, ok := plugin.Find[plugin.ShareGroupOffsets](b.Plugins())
	if !ok {
		t.Fatal("no plugin offers ShareGroupOffsets")
	}
	ctx := context.Background()
	tp := plugin.TopicPartition{Topic: "sc", Partition: 0}
	if offs, state, err := sgo.ShareGroupStartOffsets(ctx, "gc"); err != nil || state != "Dead" || len(offs) != 0 {
		t.Fatalf("a group that does not exist: %v %s %v", offs, state, err)
	}
	if err := sgo.AlterShareGroupStartOffsets(ctx, "gc", map[plugin.TopicPartition]int64{tp: 7}); err != nil {
		t.Fatal(err)
	}
	offs, state, err := sgo.ShareGroupStartOffsets(ctx, "gc")
	if err != nil || state != "Empty" || offs[tp].Offset != 7 || offs[tp].LeaderEpoch != 0 {
		t.Fatalf("after the alter: %v %s %v", offs, state, err)
	}
	newSharer(t, tandemtest.Client(t, addr), "gc", "m", "sc")
	if err := sgo.AlterShareGroupStartOffsets(ctx, "gc", map[plugin.TopicPartition]int64{tp: 9}); !errors.Is(err, kerr.NonEmptyGroup) {
		t.Fatalf("alter of an active group: %v", err)
	}
	if _, state, _ := sgo.ShareGroupStartOffsets(ctx, "gc"); state != "Stable" {
		t.Fatalf("state with a member: %s", state)
	}
}
