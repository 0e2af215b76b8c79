package server

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

func createTopicsReq(validateOnly bool, topics ...kmsg.CreateTopicsRequestTopic) *kmsg.CreateTopicsRequest {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version, req.TimeoutMillis, req.ValidateOnly, req.Topics = 7, 30000, validateOnly, topics
	return req
}

func topicReq(name string, parts int32, rf int16) kmsg.CreateTopicsRequestTopic {
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, rf
	return rt
}

func createPartitionsReq(validateOnly bool, topic string, count int32, assign ...[]int32) *kmsg.CreatePartitionsRequest {
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.Version, req.TimeoutMillis, req.ValidateOnly = 3, 30000, validateOnly
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, count
	for _, a := range assign {
		ra := kmsg.NewCreatePartitionsRequestTopicAssignment()
		ra.Replicas = a
		rt.Assignment = append(rt.Assignment, ra)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// TestPartitionLimits: a small request asking for absurd partition counts
// (which used to allocate them all and kill the process) is refused before
// anything is allocated, internal topics do not grow, replica lists are
// bounded, and the per-broker total (max.broker.partitions) holds for
// every way of creating partitions.
func TestPartitionLimits(t *testing.T) {
	b := startBroker(t, map[string]string{"max.broker.partitions": "300", "num.partitions": "50"})
	ctx := testCtx(t)
	if _, err := b.topics.ensure(ctx, plugin.InternalTopic{Name: "__transaction_state", Partitions: 4, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	if resp := rawRequest(t, b.Addr(), createTopicsReq(false, topicReq("small", 2, 1))).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create small: %+v", resp.Topics[0])
	}
	topicsBefore := len(b.meta.Image().Topics)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, validateOnly := range []bool{true, false} {
		resp := rawRequest(t, b.Addr(), createTopicsReq(validateOnly, topicReq("huge", 1<<31-1, 1))).(*kmsg.CreateTopicsResponse)
		wantCode(t, "CreateTopics 2^31-1 partitions", resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage, kerr.InvalidPartitions)

		cp := rawRequest(t, b.Addr(), createPartitionsReq(validateOnly, "small", 1<<30)).(*kmsg.CreatePartitionsResponse)
		wantCode(t, "CreatePartitions to 2^30", cp.Topics[0].ErrorCode, cp.Topics[0].ErrorMessage, kerr.InvalidPartitions)
		cp = rawRequest(t, b.Addr(), createPartitionsReq(validateOnly, "__transaction_state", 1<<30)).(*kmsg.CreatePartitionsResponse)
		wantCode(t, "CreatePartitions of __transaction_state", cp.Topics[0].ErrorCode, cp.Topics[0].ErrorMessage, kerr.PolicyViolation)
		cp = rawRequest(t, b.Addr(), createPartitionsReq(validateOnly, "__transaction_state", 5)).(*kmsg.CreatePartitionsResponse)
		wantCode(t, "CreatePartitions of __transaction_state by one", cp.Topics[0].ErrorCode, cp.Topics[0].ErrorMessage, kerr.PolicyViolation)
	}
	// A manual assignment for more partitions than a request may add, and
	// one replica list naming a million brokers.
	manual := topicReq("manual", -1, -1)
	manual.ReplicaAssignment = make([]kmsg.CreateTopicsRequestTopicReplicaAssignment, 60_000)
	for i := range manual.ReplicaAssignment {
		manual.ReplicaAssignment[i].Partition, manual.ReplicaAssignment[i].Replicas = int32(i), []int32{1}
	}
	resp := rawRequest(t, b.Addr(), createTopicsReq(true, manual)).(*kmsg.CreateTopicsResponse)
	wantCode(t, "60,000 assigned partitions", resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage, kerr.InvalidPartitions)
	wide := make([]int32, 1_000_000)
	for i := range wide {
		wide[i] = int32(i)
	}
	manual.ReplicaAssignment = manual.ReplicaAssignment[:1]
	manual.ReplicaAssignment[0].Replicas = wide
	resp = rawRequest(t, b.Addr(), createTopicsReq(true, manual)).(*kmsg.CreateTopicsResponse)
	wantCode(t, "a million replicas", resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage, kerr.InvalidReplicaAssignment)
	cp := rawRequest(t, b.Addr(), createPartitionsReq(true, "small", 3, wide)).(*kmsg.CreatePartitionsResponse)
	wantCode(t, "CreatePartitions with a million replicas", cp.Topics[0].ErrorCode, cp.Topics[0].ErrorMessage, kerr.InvalidReplicaAssignment)
	runtime.ReadMemStats(&after)
	// The requests themselves are a few MB; allocating what they ask for
	// would be gigabytes.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
		t.Fatalf("refusing the requests allocated %d MiB", alloc>>20)
	}

	// The per-broker total: 4 + 2 partitions exist, 294 are left.
	resp = rawRequest(t, b.Addr(), createTopicsReq(false, topicReq("fits", 250, 1), topicReq("too-many", 50, 1))).(*kmsg.CreateTopicsResponse)
	if resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("250 partitions within max.broker.partitions: %+v", resp.Topics[0])
	}
	wantCode(t, "past max.broker.partitions", resp.Topics[1].ErrorCode, resp.Topics[1].ErrorMessage, kerr.PolicyViolation)
	cp = rawRequest(t, b.Addr(), createPartitionsReq(false, "fits", 300)).(*kmsg.CreatePartitionsResponse)
	wantCode(t, "growing past max.broker.partitions", cp.Topics[0].ErrorCode, cp.Topics[0].ErrorMessage, kerr.PolicyViolation)
	// Auto-creation (num.partitions 50) is bounded too.
	md := kmsg.NewPtrMetadataRequest()
	md.Version, md.AllowAutoTopicCreation = 12, true
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("auto")}}
	rawRequest(t, b.Addr(), md)
	if b.meta.Image().Topics["auto"] != nil {
		t.Fatal("auto-created a topic past max.broker.partitions")
	}
	cp = rawRequest(t, b.Addr(), createPartitionsReq(false, "fits", 290)).(*kmsg.CreatePartitionsResponse)
	if cp.Topics[0].ErrorCode != 0 {
		t.Fatalf("growing within max.broker.partitions: %+v", cp.Topics[0])
	}

	img := b.meta.Image()
	if len(img.Topics) != topicsBefore+1 || len(img.Topics["small"].Partitions) != 2 || len(img.Topics["__transaction_state"].Partitions) != 4 ||
		len(img.Topics["fits"].Partitions) != 290 {
		t.Fatalf("topics after the refusals: %d (had %d), small %d, __transaction_state %d, fits %d partitions", len(img.Topics), topicsBefore,
			len(img.Topics["small"].Partitions), len(img.Topics["__transaction_state"].Partitions), len(img.Topics["fits"].Partitions))
	}
}

// TestPartitionLimitsDefaults: the defaults let a 50,000-partition topic
// through and stop a request at more.
func TestPartitionLimitsDefaults(t *testing.T) {
	b := startBroker(t, nil)
	resp := rawRequest(t, b.Addr(), createTopicsReq(true, topicReq("fifty-thousand", 50_000, 1))).(*kmsg.CreateTopicsResponse)
	if resp.Topics[0].ErrorCode != 0 || resp.Topics[0].NumPartitions != 50_000 {
		t.Fatalf("50,000 partitions: %+v", resp.Topics[0])
	}
	resp = rawRequest(t, b.Addr(), createTopicsReq(true, topicReq("a", 30_000, 1), topicReq("b", 30_000, 1))).(*kmsg.CreateTopicsResponse)
	if resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("first 30,000: %+v", resp.Topics[0])
	}
	wantCode(t, "second 30,000 of one request", resp.Topics[1].ErrorCode, resp.Topics[1].ErrorMessage, kerr.PolicyViolation)
	resp = rawRequest(t, b.Addr(), createTopicsReq(true, topicReq("more", 50_001, 1))).(*kmsg.CreateTopicsResponse)
	wantCode(t, "50,001 partitions", resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage, kerr.InvalidPartitions)
}

// TestCompressedBatchParity is franz-go's TestConsumeMaxDecompressBatchBytes
// against Tandem: three 1 MiB records in one gzip batch of a few KiB are
// accepted on a topic of the default max.message.bytes, as Apache Kafka
// accepts them (it bounds the stored size), and a consumer reads them back;
// a consumer bounding decompression to 1 MiB stops at the batch.
func TestCompressedBatchParity(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, b, "parity", 1, nil)
	ctx := testCtx(t)
	producer := newClient(t, b, kgo.DefaultProduceTopic("parity"), kgo.ProducerBatchMaxBytes(4<<20),
		kgo.ProducerBatchCompression(kgo.GzipCompression()), kgo.ProducerLinger(time.Second))
	big := make([]byte, 1<<20)
	if err := producer.ProduceSync(ctx, &kgo.Record{Value: big}, &kgo.Record{Value: big}, &kgo.Record{Value: big}).FirstErr(); err != nil {
		t.Fatalf("three 1 MiB records in one compressed batch: %v", err)
	}
	consume := func(opts ...kgo.Opt) kgo.Fetches {
		cl := newClient(t, b, append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"parity": {0: kgo.NewOffset().At(0)}}))...)
		return cl.PollFetches(ctx)
	}
	fs := consume()
	if err := fs.Err0(); err != nil || fs.NumRecords() != 3 || !bytes.Equal(fs.Records()[2].Value, big) {
		t.Fatalf("read back %d records (%v)", fs.NumRecords(), err)
	}
	if _, ok := errors.AsType[*kgo.ErrDecompressTooLarge](consume(kgo.MaxDecompressBatchBytes(1 << 20)).Err0()); !ok {
		t.Fatal("a consumer bounding decompression to 1 MiB read the batch")
	}
}

// BenchmarkCreateTopic50000 creates a topic of 50,000 partitions, the most
// one request may add by default, on a fresh broker:
//
//	go test -run '^$' -bench CreateTopic50000 -benchtime 1x ./server
func BenchmarkCreateTopic50000(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		br := startBroker(b, nil)
		cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addr()), kgo.RequestTimeoutOverhead(5*time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		b.StartTimer()
		resps, err := kadm.NewClient(cl).CreateTopics(ctx, 50_000, 1, nil, "fifty-thousand")
		if err == nil {
			err = resps.Error()
		}
		b.StopTimer()
		cancel()
		cl.Close()
		if err != nil {
			b.Fatalf("create: %v", err)
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		br.Close()
		b.StartTimer()
	}
}
