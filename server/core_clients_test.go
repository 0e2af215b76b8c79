package server

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// Each client test produces with one client and reads back with the same
// client and with franz-go, comparing values and offsets.

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d-%s", prefix, i, strings.Repeat("v", i%40))
	}
	return out
}

// consumeAll reads n records of partition 0 of topic with franz-go.
func consumeAll(t *testing.T, b *Broker, topic string, n int) []string {
	t.Helper()
	cl := newClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("franz-go read %d of %d records", len(got), n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != int64(len(got)) {
				t.Fatalf("record %d at offset %d", len(got), r.Offset)
			}
			got = append(got, string(r.Value))
		})
	}
	return got
}

func sameValues(t *testing.T, who string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", who, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: record %d is %q, want %q", who, i, got[i], want[i])
		}
	}
}

func TestSarama(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, b, "sarama", 1, nil)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Compression = sarama.CompressionZSTD
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := values("sarama", 100)
	var msgs []*sarama.ProducerMessage
	for _, v := range want {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: "sarama", Partition: 0, Value: sarama.StringEncoder(v)})
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	c, err := sarama.NewConsumer([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition("sarama", 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var got []string
	timeout := time.After(20 * time.Second)
	for len(got) < len(want) {
		select {
		case m := <-pc.Messages():
			if m.Offset != int64(len(got)) {
				t.Fatalf("sarama: record %d at offset %d", len(got), m.Offset)
			}
			got = append(got, string(m.Value))
		case err := <-pc.Errors():
			t.Fatal(err)
		case <-timeout:
			t.Fatalf("sarama read %d of %d records", len(got), len(want))
		}
	}
	sameValues(t, "sarama", got, want)
	sameValues(t, "franz-go", consumeAll(t, b, "sarama", len(want)), want)
}

func TestKafkaGo(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, b, "kafkago", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "kafkago", RequiredAcks: kafka.RequireAll,
		Compression: kafka.Snappy, BatchTimeout: 10 * time.Millisecond, Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return 0 })}
	defer w.Close()
	want := values("kafka-go", 100)
	var msgs []kafka.Message
	for _, v := range want {
		msgs = append(msgs, kafka.Message{Value: []byte(v)})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, Topic: "kafkago", Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var got []string
	for len(got) < len(want) {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go read %d of %d: %v", len(got), len(want), err)
		}
		if m.Offset != int64(len(got)) {
			t.Fatalf("kafka-go: record %d at offset %d", len(got), m.Offset)
		}
		got = append(got, string(m.Value))
	}
	sameValues(t, "kafka-go", got, want)
	sameValues(t, "franz-go", consumeAll(t, b, "kafkago", len(want)), want)
}

// TestKcat drives the broker with librdkafka through Debian's kcat.
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is required (apt-get install kcat)")
	}
	b := startBroker(t, nil)
	createTopic(t, b, "kcat", 1, nil)
	want := values("kcat", 100)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, codec := range []string{"gzip", "lz4", "zstd"} {
		cmd := exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-P", "-t", "kcat", "-p", "0", "-z", codec, "-X", "acks=all")
		cmd.Stdin = strings.NewReader(strings.Join(want, "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat -P -z %s: %v\n%s", codec, err, out)
		}
	}
	all := append(append(append([]string(nil), want...), want...), want...)
	out, err := exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-C", "-t", "kcat", "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o %s\n").Output()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	var got []string
	for i, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		off, v, _ := strings.Cut(line, " ")
		if off != fmt.Sprint(i) {
			t.Fatalf("kcat: record %d at offset %s", i, off)
		}
		got = append(got, v)
	}
	sameValues(t, "kcat", got, all)
	sameValues(t, "franz-go", consumeAll(t, b, "kcat", len(all)), all)
}

// heartbeatPlugin serves Heartbeat, a key the broker does not, to prove
// that plugin handlers are advertised and dispatched.
type heartbeatPlugin struct{}

func (heartbeatPlugin) APIs() []plugin.API {
	return []plugin.API{plugin.Handle(kmsg.Heartbeat, 0, 4, heartbeatPlugin{}.handle)}
}

func (heartbeatPlugin) handle(_ context.Context, rc *RequestContext, req *kmsg.HeartbeatRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.ErrorCode = 27 // REBALANCE_IN_PROGRESS, so the test sees the plugin answered
	if rc.ClientID != "test-client" {
		resp.ErrorCode = -1
	}
	return resp, nil
}

func TestPluginAPIHandler(t *testing.T) {
	b := startBrokerWith(t, Config{Plugins: []any{heartbeatPlugin{}}})
	av := rawRequest(t, b.Addr(), &kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse)
	found := false
	for _, k := range av.ApiKeys {
		found = found || (k.ApiKey == 12 && k.MaxVersion == 4)
	}
	if !found {
		t.Fatalf("plugin key not advertised: %+v", av.ApiKeys)
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID = 4, "g", "m"
	if resp := rawRequest(t, b.Addr(), hb).(*kmsg.HeartbeatResponse); resp.ErrorCode != 27 {
		t.Fatalf("plugin response: code %d", resp.ErrorCode)
	}
	if _, err := New(Config{DataDir: t.TempDir(), Plugins: []any{heartbeatPlugin{}, heartbeatPlugin{}}}); err == nil {
		t.Fatal("two plugins serving one key were accepted")
	}
}
