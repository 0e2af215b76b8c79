package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestBadInput sends hostile or broken requests to the binary. After each,
// another connection must keep working (ApiVersions and a produce/fetch
// round trip) and an existing topic must be unchanged.
func TestBadInput(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir(), "--set", "auto.create.topics.enable=false")
	const victim, probe = "victim", "probe"
	tandemtest.CreateTopic(t, p.Addr, victim, 3)
	tandemtest.CreateTopic(t, p.Addr, probe, 1)
	cl := tandemtest.Client(t, p.Addr, kgo.DefaultProduceTopic(victim))
	for i := range 30 {
		r := &kgo.Record{Partition: int32(i % 3), Value: fmt.Appendf(nil, "victim-%d", i)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	starts, ends := listOffsets(t, p.Addr, victim, false), endOffsets(t, p.Addr, victim)
	healthy := func(t *testing.T) {
		t.Helper()
		checkHealthy(t, p.Addr, probe)
		if got := endOffsets(t, p.Addr, victim); !equalOffsets(got, ends) {
			t.Fatalf("end offsets of %s changed: %v, were %v", victim, got, ends)
		}
		if got := listOffsets(t, p.Addr, victim, false); !equalOffsets(got, starts) {
			t.Fatalf("start offsets of %s changed: %v, were %v", victim, got, starts)
		}
	}
	expectClosed := func(t *testing.T, frame []byte) {
		t.Helper()
		c := tandemtest.Dial(t, p.Addr)
		if _, err := c.Write(frame); err != nil {
			t.Fatal(err)
		}
		if err := c.ExpectClosed(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("truncated frame", func(t *testing.T) {
		frame := tandemtest.Frame(kmsg.Metadata.Int16(), 1, 1, false, kbin.AppendInt32(nil, -1))
		binary.BigEndian.PutUint32(frame, uint32(len(frame)-4+100)) // 100 bytes never come
		c := tandemtest.Dial(t, p.Addr)
		c.Write(frame)
		c.Conn.(interface{ CloseWrite() error }).CloseWrite()
		if err := c.ExpectClosed(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		healthy(t)
	})

	for _, size := range []uint32{1<<31 - 1, 1 << 31, 0xffffffff} {
		t.Run(fmt.Sprintf("size prefix %#x", size), func(t *testing.T) {
			_, peakBefore, err := p.Mem()
			if err != nil {
				t.Fatal(err)
			}
			c := tandemtest.Dial(t, p.Addr)
			c.Write(append(binary.BigEndian.AppendUint32(nil, size), 0, 3, 0, 1, 0, 0, 0, 1))
			if err := c.ExpectClosed(2 * time.Second); err != nil {
				t.Fatal(err)
			}
			healthy(t)
			rss, peak, err := p.Mem()
			if err != nil {
				t.Fatal(err)
			}
			if peak-peakBefore > 128<<20 {
				t.Fatalf("peak RSS grew by %d MiB (now %d MiB, RSS %d MiB)", (peak-peakBefore)>>20, peak>>20, rss>>20)
			}
		})
	}

	t.Run("array length beyond the bytes left", func(t *testing.T) {
		head := kbin.AppendInt16(nil, -1)      // transactional id: null
		head = kbin.AppendInt16(head, -1)      // acks
		head = kbin.AppendInt32(head, 5000)    // timeout
		head = kbin.AppendInt32(head, 1)       // one topic
		head = kbin.AppendString(head, victim) //
		for _, body := range [][]byte{
			append(kbin.AppendInt32(bytes.Clone(head), 0x7ffffff0), make([]byte, 8)...),                                            // partitions
			append(kbin.AppendInt32(kbin.AppendInt32(kbin.AppendInt32(bytes.Clone(head), 1), 0), 0x7ffffff0), make([]byte, 10)...), // records bytes
		} {
			expectClosed(t, tandemtest.Frame(kmsg.Produce.Int16(), 7, 1, false, body))
		}
		// A topics array of a billion in a Metadata request.
		expectClosed(t, tandemtest.Frame(kmsg.Metadata.Int16(), 1, 1, false, kbin.AppendInt32(nil, 1e9)))
		healthy(t)
	})

	for _, codec := range []int8{recordbatch.CodecGzip, recordbatch.CodecZstd} {
		t.Run(fmt.Sprintf("decompression bomb codec %d", codec), func(t *testing.T) {
			// Past the 64 MiB Tandem lets a batch inflate to (its stored
			// size is bounded by max.message.bytes, as in Kafka).
			one, err := recordbatch.Build(codec, recordbatch.KV{Value: make([]byte, 80<<20)})
			if err != nil {
				t.Fatal(err)
			}
			many := make([]recordbatch.KV, 80000)
			for i := range many {
				many[i].Value = make([]byte, 1024)
			}
			manyBatch, err := recordbatch.Build(codec, many...)
			if err != nil {
				t.Fatal(err)
			}
			for _, batch := range [][]byte{one, manyBatch} {
				if len(batch) >= 1<<20 {
					t.Fatalf("the bomb is %d bytes compressed; it must be under max.message.bytes", len(batch))
				}
				code, msg := rawProduce(t, p.Addr, victim, 0, batch)
				if code != kerr.MessageTooLarge.Code {
					t.Fatalf("batch of %d bytes inflating past 64 MiB: error %v (%q), want MESSAGE_TOO_LARGE", len(batch), kerr.ErrorForCode(code), msg)
				}
			}
			healthy(t)
		})
	}

	t.Run("unknown api key", func(t *testing.T) {
		expectClosed(t, tandemtest.Frame(999, 0, 1, false, nil))
		expectClosed(t, tandemtest.Frame(-1, 0, 1, false, nil))
		healthy(t)
	})

	t.Run("version above the maximum", func(t *testing.T) {
		c := tandemtest.Dial(t, p.Addr)
		c.Write(tandemtest.Frame(kmsg.ApiVersions.Int16(), 99, 7, true, []byte{2, 'x', 2, '1', 0}))
		body, err := c.ReadFrame()
		if err != nil {
			t.Fatalf("ApiVersions v99: %v", err)
		}
		if corr := int32(binary.BigEndian.Uint32(body)); corr != 7 {
			t.Fatalf("correlation id %d, want 7", corr)
		}
		resp := kmsg.NewPtrApiVersionsResponse() // a v0 body
		if err := resp.ReadFrom(body[4:]); err != nil {
			t.Fatalf("ApiVersions v99 response is not a v0 body: %v", err)
		}
		if resp.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("ApiVersions v99: error %v, want UNSUPPORTED_VERSION", kerr.ErrorForCode(resp.ErrorCode))
		}
		maxOf := make(map[int16]int16)
		for _, k := range resp.ApiKeys {
			maxOf[k.ApiKey] = k.MaxVersion
		}
		for _, key := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.Metadata, kmsg.ApiVersions} {
			if _, ok := maxOf[key.Int16()]; !ok {
				t.Fatalf("ApiVersions v99 response does not list %v: %+v", key, resp.ApiKeys)
			}
		}
		for _, key := range []kmsg.Key{kmsg.Metadata, kmsg.Produce, kmsg.Fetch} {
			expectClosed(t, tandemtest.Frame(key.Int16(), maxOf[key.Int16()]+1, 1, true, []byte{0, 0, 0, 0, 0}))
		}
		healthy(t)
	})

	t.Run("body does not decode", func(t *testing.T) {
		// Produce v3: a transactional id of 5000 bytes, 3 of which follow.
		expectClosed(t, tandemtest.Frame(kmsg.Produce.Int16(), 3, 1, false, append(kbin.AppendInt16(nil, 5000), "abc"...)))
		// CreateTopics v5 (flexible): a compact array of 200 topics, then garbage.
		expectClosed(t, tandemtest.Frame(kmsg.CreateTopics.Int16(), 5, 1, true, []byte{200, 1, 0xff, 0xff, 0xff}))
		healthy(t)
	})

	t.Run("bad crc", func(t *testing.T) {
		batch, err := recordbatch.Build(recordbatch.CodecNone, recordbatch.KV{Key: []byte("k"), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		batch[17] ^= 0xff
		if code, msg := rawProduce(t, p.Addr, victim, 1, batch); code != kerr.CorruptMessage.Code {
			t.Fatalf("bad CRC: error %v (%q), want CORRUPT_MESSAGE", kerr.ErrorForCode(code), msg)
		}
		healthy(t)
	})

	t.Run("produce to a missing topic", func(t *testing.T) {
		batch, err := recordbatch.Build(recordbatch.CodecNone, recordbatch.KV{Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		if code, msg := rawProduce(t, p.Addr, "no-such-topic", 0, batch); code != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("produce to a missing topic: error %v (%q), want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(code), msg)
		}
		// auto.create.topics.enable=false: Metadata must not create it either.
		if code := topicMetadata(t, p.Addr, "no-such-topic", true); code != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("metadata of a missing topic with auto-creation off: %v", kerr.ErrorForCode(code))
		}
		if code := topicMetadata(t, p.Addr, "no-such-topic", false); code != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("the missing topic exists after a Metadata request: %v", kerr.ErrorForCode(code))
		}
		healthy(t)
	})

	t.Run("create topics with an invalid name", func(t *testing.T) {
		names := []string{"bad/name", "..", ".", "", strings.Repeat("a", 250), "has space", "caf\u00e9"}
		resp := createTopicsRaw(t, p.Addr, names, nil)
		for _, tr := range resp.Topics {
			if tr.ErrorCode != kerr.InvalidTopicException.Code {
				t.Errorf("CreateTopics %q: %v (%v), want INVALID_TOPIC_EXCEPTION", tr.Topic, kerr.ErrorForCode(tr.ErrorCode), deref(tr.ErrorMessage))
			}
		}
		if len(resp.Topics) != len(names) {
			t.Fatalf("%d topic results for %d topics", len(resp.Topics), len(names))
		}
		healthy(t)
	})

	t.Run("create topics with an invalid config", func(t *testing.T) {
		for i, cfg := range []map[string]string{
			{"retention.ms": "abc"},
			{"cleanup.policy": "bogus"},
			{"no.such.config": "1"},
			{"max.message.bytes": "-5"},
		} {
			name := fmt.Sprintf("bad-config-%d", i)
			resp := createTopicsRaw(t, p.Addr, []string{name}, cfg)
			if len(resp.Topics) != 1 {
				t.Fatalf("%d topic results for 1 topic", len(resp.Topics))
			}
			tr := resp.Topics[0]
			if tr.ErrorCode != kerr.InvalidConfig.Code || deref(tr.ErrorMessage) == "" {
				t.Errorf("CreateTopics with %v: %v, message %q; want INVALID_CONFIG with a message", cfg, kerr.ErrorForCode(tr.ErrorCode), deref(tr.ErrorMessage))
			}
			if code := topicMetadata(t, p.Addr, name, false); code != kerr.UnknownTopicOrPartition.Code {
				t.Errorf("topic %s with config %v was created anyway (metadata: %v)", name, cfg, kerr.ErrorForCode(code))
			}
		}
		healthy(t)
	})
}

// checkHealthy runs ApiVersions on a new connection, then produces a record
// to topic and reads it back.
func checkHealthy(t *testing.T, addr, topic string) {
	t.Helper()
	c := tandemtest.Dial(t, addr)
	resp, err := c.Request(kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		t.Fatalf("ApiVersions on a new connection: %v", err)
	}
	if code := resp.(*kmsg.ApiVersionsResponse).ErrorCode; code != 0 {
		t.Fatalf("ApiVersions: %v", kerr.ErrorForCode(code))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	value := fmt.Appendf(nil, "probe-%d", time.Now().UnixNano())
	prod := tandemtest.Client(t, addr)
	r, err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: value}).First()
	if err != nil {
		t.Fatalf("probe produce: %v", err)
	}
	cons := tandemtest.Client(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {r.Partition: kgo.NewOffset().At(r.Offset)}}))
	for {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("probe fetch: nothing read back at %d/%d", r.Partition, r.Offset)
		}
		if rs := fs.Records(); len(rs) > 0 {
			if rs[0].Offset != r.Offset || !bytes.Equal(rs[0].Value, value) {
				t.Fatalf("probe fetch: read %q at %d, want %q at %d", rs[0].Value, rs[0].Offset, value, r.Offset)
			}
			return
		}
	}
}

func rawProduce(t *testing.T, addr, topic string, partition int32, batch []byte) (int16, string) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := tandemtest.Dial(t, addr).Request(req)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	pr := resp.(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 {
		t.Fatalf("produce response: %+v", pr)
	}
	res := pr.Topics[0].Partitions[0]
	return res.ErrorCode, deref(res.ErrorMessage)
}

// topicMetadata returns the error code of one topic in a Metadata v9 answer.
func topicMetadata(t *testing.T, addr, topic string, autoCreate bool) int16 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Version, req.AllowAutoTopicCreation = 9, autoCreate
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := tandemtest.Dial(t, addr).Request(req)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	mr := resp.(*kmsg.MetadataResponse)
	if len(mr.Topics) != 1 {
		t.Fatalf("metadata for %s: %d topics", topic, len(mr.Topics))
	}
	return mr.Topics[0].ErrorCode
}

func createTopicsRaw(t *testing.T, addr string, names []string, configs map[string]string) *kmsg.CreateTopicsResponse {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version, req.TimeoutMillis = 5, 10000
	for _, name := range names {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		for k, v := range configs {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = k, kmsg.StringPtr(v)
			rt.Configs = append(rt.Configs, c)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := tandemtest.Dial(t, addr).Request(req)
	if err != nil {
		t.Fatalf("create topics: %v", err)
	}
	return resp.(*kmsg.CreateTopicsResponse)
}

func equalOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
