package server

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// produceAt produces one record per timestamp (milliseconds) to partition
// 0 of topic, each in its own batch, and waits for the acks.
func produceAt(t *testing.T, b *Broker, topic string, timestamps ...int64) {
	t.Helper()
	cl := newClient(t, b, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, ts := range timestamps {
		r := &kgo.Record{Value: []byte("v"), Timestamp: time.UnixMilli(ts)}
		if err := cl.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// bumpEpoch raises the leader epoch of topic's partition 0 and waits until
// the broker applied it; it returns the new epoch.
func bumpEpoch(t *testing.T, b *Broker, topic string) int32 {
	t.Helper()
	ctx := testCtx(t)
	tp := b.meta.Image().Topics[topic]
	epoch, err := b.meta.BumpLeaderEpoch(ctx, tp.ID, 0, tp.Partitions[0].LeaderEpoch+2)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.applied.wait(ctx, b.meta.Image().Index); err != nil {
		t.Fatal(err)
	}
	return epoch
}

func listOffsetsRaw(t *testing.T, b *Broker, version int16, iso int8, topic string, parts ...kmsg.ListOffsetsRequestTopicPartition) []kmsg.ListOffsetsResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version, req.ReplicaID, req.IsolationLevel = version, -1, iso
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic, rt.Partitions = topic, parts
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, b.Addr(), req).(*kmsg.ListOffsetsResponse)
	return resp.Topics[0].Partitions
}

func listPart(p int32, epoch int32, ts int64) kmsg.ListOffsetsRequestTopicPartition {
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = p, epoch, ts
	return rp
}

func TestListOffsets(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 2, 1, nil, "lo"); err != nil {
		t.Fatal(err)
	}
	// Empty partition: start = end = 0, no timestamps.
	ends, err := adm.ListEndOffsets(ctx, "lo")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("lo", 1); o.Err != nil || o.Offset != 0 {
		t.Fatalf("end of empty partition: %+v", o)
	}
	produceAt(t, b, "lo", 1000, 3000, 2000)

	starts, err := adm.ListStartOffsets(ctx, "lo")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup("lo", 0); o.Err != nil || o.Offset != 0 || o.LeaderEpoch != 0 {
		t.Fatalf("start: %+v", o)
	}
	ends, err = adm.ListEndOffsets(ctx, "lo")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("lo", 0); o.Err != nil || o.Offset != 3 || o.LeaderEpoch != 0 {
		t.Fatalf("end: %+v", o)
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, 1500, "lo")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := after.Lookup("lo", 0); o.Err != nil || o.Offset != 1 || o.Timestamp != 3000 {
		t.Fatalf("after 1500: %+v", o)
	}
	maxTS, err := adm.ListMaxTimestampOffsets(ctx, "lo")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := maxTS.Lookup("lo", 0); o.Err != nil || o.Offset != 1 || o.Timestamp != 3000 {
		t.Fatalf("max timestamp: %+v", o)
	}

	// Raw: after the last timestamp there is no offset; tiered-storage
	// timestamps have none either; duplicates and unknown partitions fail.
	got := listOffsetsRaw(t, b, 10, 1, "lo", listPart(0, -1, 4000), listPart(7, -1, -1))
	if g := got[0]; g.ErrorCode != 0 || g.Offset != -1 || g.Timestamp != -1 {
		t.Fatalf("after the last timestamp: %+v", g)
	}
	wantCode(t, "unknown partition", got[1].ErrorCode, nil, kerr.UnknownTopicOrPartition)
	got = listOffsetsRaw(t, b, 10, 1, "lo", listPart(0, -1, -5), listPart(1, 0, -3), listPart(1, 0, -1))
	if g := got[0]; g.ErrorCode != 0 || g.Offset != -1 {
		t.Fatalf("latest tiered: %+v", g)
	}
	wantCode(t, "duplicate partition", got[1].ErrorCode, nil, kerr.InvalidRequest)
	wantCode(t, "duplicate partition", got[2].ErrorCode, nil, kerr.InvalidRequest)
	got = listOffsetsRaw(t, b, 10, 0, "missing", listPart(0, -1, -1))
	wantCode(t, "unknown topic", got[0].ErrorCode, nil, kerr.UnknownTopicOrPartition)

	// Leader epochs (KIP-320): newer than ours is unknown, older fenced.
	epoch := bumpEpoch(t, b, "lo")
	got = listOffsetsRaw(t, b, 7, 0, "lo", listPart(0, epoch+1, -1), listPart(1, 0, -1))
	wantCode(t, "newer epoch", got[0].ErrorCode, nil, kerr.UnknownLeaderEpoch)
	got = listOffsetsRaw(t, b, 7, 0, "lo", listPart(0, 0, -1))
	wantCode(t, "older epoch", got[0].ErrorCode, nil, kerr.FencedLeaderEpoch)
	got = listOffsetsRaw(t, b, 7, 0, "lo", listPart(0, epoch, -1), listPart(1, -1, -2))
	if g := got[0]; g.ErrorCode != 0 || g.Offset != 3 || g.LeaderEpoch != epoch {
		t.Fatalf("latest at epoch %d: %+v", epoch, g)
	}
	if g := got[1]; g.ErrorCode != 0 || g.Offset != 0 {
		t.Fatalf("earliest of partition 1: %+v", g)
	}
}

func TestListOffsetsNotLeader(t *testing.T) {
	b := startBroker(t, nil)
	ctx := testCtx(t)
	// Another broker registers, replicates the partition, and is elected
	// its leader.
	if err := b.meta.RegisterBroker(ctx, metadata.Broker{ID: 2, Host: "127.0.0.1", Port: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := newAdmin(t, b).CreateTopics(ctx, 1, 2, nil, "nl"); err != nil {
		t.Fatal(err)
	}
	tp := b.meta.Image().Topics["nl"]
	if err := b.meta.ElectLeader(ctx, tp.ID, 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.applied.wait(ctx, b.meta.Image().Index); err != nil {
		t.Fatal(err)
	}
	got := listOffsetsRaw(t, b, 7, 0, "nl", listPart(0, -1, -1))
	wantCode(t, "not leader", got[0].ErrorCode, nil, kerr.NotLeaderForPartition)
}

func offsetForEpochRaw(t *testing.T, b *Broker, topic string, current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.Version, req.ReplicaID = 4, -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return rawRequest(t, b.Addr(), req).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
}

func TestOffsetForLeaderEpoch(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "ole"); err != nil {
		t.Fatal(err)
	}
	produceAt(t, b, "ole", 1, 2)
	epoch := bumpEpoch(t, b, "ole")
	if epoch < 2 {
		t.Fatalf("bumped epoch %d", epoch)
	}
	produceAt(t, b, "ole", 3)

	var req kadm.OffsetForLeaderEpochRequest
	req.Add("ole", 0, 0)
	res, err := adm.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := res["ole"][0]; r.Err != nil || r.LeaderEpoch != 0 || r.EndOffset != 2 {
		t.Fatalf("epoch 0: %+v", r)
	}
	for _, tc := range []struct {
		current, epoch int32
		wantEpoch      int32
		wantEnd        int64
		want           *kerr.Error
	}{
		{-1, epoch, epoch, 3, nil},    // our own epoch: the log end
		{epoch, epoch - 1, 0, 2, nil}, // between epochs: the largest below
		{-1, epoch + 1, -1, -1, nil},  // newer than ours: undefined
		{0, 0, -1, -1, kerr.FencedLeaderEpoch},
		{epoch + 1, 0, -1, -1, kerr.UnknownLeaderEpoch},
	} {
		r := offsetForEpochRaw(t, b, "ole", tc.current, tc.epoch)
		if tc.want != nil {
			wantCode(t, "offset for epoch", r.ErrorCode, nil, tc.want)
		} else if r.ErrorCode != 0 {
			t.Errorf("current %d epoch %d: %v", tc.current, tc.epoch, kerr.ErrorForCode(r.ErrorCode))
		}
		if r.LeaderEpoch != tc.wantEpoch || r.EndOffset != tc.wantEnd {
			t.Errorf("current %d epoch %d: got (%d, %d), want (%d, %d)", tc.current, tc.epoch, r.LeaderEpoch, r.EndOffset, tc.wantEpoch, tc.wantEnd)
		}
	}
	r := offsetForEpochRaw(t, b, "missing", -1, 0)
	wantCode(t, "unknown topic", r.ErrorCode, nil, kerr.UnknownTopicOrPartition)
}

func TestDeleteRecords(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "dr"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopics(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "drc"); err != nil {
		t.Fatal(err)
	}
	produceAt(t, b, "dr", 1, 2, 3, 4, 5)

	var os kadm.Offsets
	os.AddOffset("dr", 0, 3, -1)
	res, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := res.Lookup("dr", 0); r.Err != nil || r.LowWatermark != 3 {
		t.Fatalf("delete before 3: %+v", r)
	}
	starts, err := adm.ListStartOffsets(ctx, "dr")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup("dr", 0); o.Offset != 3 {
		t.Fatalf("start after delete: %+v", o)
	}
	tp := b.meta.Image().Topics["dr"]
	if got := b.engine.Partition(engine.TopicID(tp.ID), 0).Offsets().LogStart; got != 3 {
		t.Fatalf("engine log start %d", got)
	}

	req := kmsg.NewPtrDeleteRecordsRequest()
	req.Version, req.TimeoutMillis = 2, 5000
	add := func(topic string, offsets ...int64) {
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = topic
		for p, off := range offsets {
			rp := kmsg.NewDeleteRecordsRequestTopicPartition()
			rp.Partition, rp.Offset = int32(p), off
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	add("dr", 99, 0)
	add("drc", 0)
	add("missing", 0)
	resp := rawRequest(t, b.Addr(), req).(*kmsg.DeleteRecordsResponse)
	wantCode(t, "beyond the high watermark", resp.Topics[0].Partitions[0].ErrorCode, nil, kerr.OffsetOutOfRange)
	wantCode(t, "unknown partition", resp.Topics[0].Partitions[1].ErrorCode, nil, kerr.UnknownTopicOrPartition)
	wantCode(t, "compacted topic", resp.Topics[1].Partitions[0].ErrorCode, nil, kerr.PolicyViolation)
	wantCode(t, "unknown topic", resp.Topics[2].Partitions[0].ErrorCode, nil, kerr.UnknownTopicOrPartition)
	if lw := resp.Topics[0].Partitions[0].LowWatermark; lw != -1 {
		t.Fatalf("low watermark on error: %d", lw)
	}

	// -1 deletes up to the high watermark.
	req.Topics = nil
	add("dr", -1)
	resp = rawRequest(t, b.Addr(), req).(*kmsg.DeleteRecordsResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.LowWatermark != 5 {
		t.Fatalf("delete to the high watermark: %+v", p)
	}
}

// TestListOffsetsV0: the version sarama sends to a cluster it is not told
// is 0.10.1 or newer (Burrow 1.2.1 does so), which Kafka 3.x serves:
// latest and earliest as a list of one offset, empty for none. Before,
// the broker closed the connection (unsupported version 0).
func TestListOffsetsV0(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "v0"); err != nil {
		t.Fatal(err)
	}
	produceAt(t, b, "v0", 1000, 2000, 3000)
	v0 := func(ts int64, max int32) kmsg.ListOffsetsRequestTopicPartition {
		rp := listPart(0, -1, ts)
		rp.MaxNumOffsets = max
		return rp
	}
	got := listOffsetsRaw(t, b, 0, 0, "v0", v0(-1, 1))
	if g := got[0]; g.ErrorCode != 0 || len(g.OldStyleOffsets) != 1 || g.OldStyleOffsets[0] != 3 {
		t.Fatalf("v0 latest: %+v, want offsets [3]", g)
	}
	got = listOffsetsRaw(t, b, 0, 0, "v0", v0(-2, 1))
	if g := got[0]; g.ErrorCode != 0 || len(g.OldStyleOffsets) != 1 || g.OldStyleOffsets[0] != 0 {
		t.Fatalf("v0 earliest: %+v, want offsets [0]", g)
	}
	got = listOffsetsRaw(t, b, 0, 0, "v0", v0(4000, 1))
	if g := got[0]; g.ErrorCode != 0 || len(g.OldStyleOffsets) != 0 {
		t.Fatalf("v0 after the last timestamp: %+v, want no offsets", g)
	}

	// sarama as Burrow 1.2.1 configures it (a 0.10.0 cluster: v0).
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V0_10_0_0
	cl, err := sarama.NewClient([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if off, err := cl.GetOffset("v0", 0, sarama.OffsetNewest); err != nil || off != 3 {
		t.Fatalf("sarama (ListOffsets v0) newest: %d, %v; want 3", off, err)
	}
	if off, err := cl.GetOffset("v0", 0, sarama.OffsetOldest); err != nil || off != 0 {
		t.Fatalf("sarama (ListOffsets v0) oldest: %d, %v; want 0", off, err)
	}
}
