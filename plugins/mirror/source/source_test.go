package source

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// part is a mirror partition named "pfx.src" here, "src" on the source
// (mirror.topic.prefix pfx.).
type part int32

func (p part) SourceName() (topicPartition, string) {
	return topicPartition{Topic: "pfx.src", Partition: int32(p)}, "src"
}

// newConn starts a kfake source with topic src of two partitions, three
// records in partition 0 and one in partition 1, and returns a Conn to
// it.
func newConn(t *testing.T) (*Conn, *kfake.Cluster) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "src"), kfake.ClusterID("source-cluster"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := strings.Join(c.ListenAddrs(), ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i, p := range []int32{0, 0, 0, 1} {
		r := &kgo.Record{Topic: "src", Partition: p, Value: []byte{byte(i)}}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	conn := &Conn{Mirror: "m", Configs: map[string]string{"bootstrap.servers": addrs}, Timeouts: mirrorcfg.DefaultTimeouts, ClientID: "broker-1-mirror-m"}
	t.Cleanup(conn.Reset)
	return conn, c
}

func TestConnRequests(t *testing.T) {
	conn, _ := newConn(t)
	ctx := context.Background()

	m, err := conn.Metadata(ctx, []string{"src"})
	if err != nil {
		t.Fatal(err)
	}
	if m.ClusterID == nil || *m.ClusterID != "source-cluster" || len(m.Topics) != 1 || *m.Topics[0].Topic != "src" || len(m.Topics[0].Partitions) != 2 {
		t.Fatalf("metadata: cluster %v, topics %+v", m.ClusterID, m.Topics)
	}
	leader := m.Topics[0].Partitions[0].Leader
	if none, err := conn.Metadata(ctx, nil); err != nil || len(none.Topics) != 0 {
		t.Fatalf("metadata of no topics: %v, %d topics", err, len(none.Topics))
	}

	// By the names here: the latest offset of partition 0, the earliest
	// of partition 1.
	offs, err := ListOffsetsAt(ctx, conn, leader, []part{0, 1}, func(p part) int64 { return -1 - int64(p) })
	if err != nil {
		t.Fatal(err)
	}
	p0, p1 := offs[topicPartition{Topic: "pfx.src", Partition: 0}], offs[topicPartition{Topic: "pfx.src", Partition: 1}]
	if len(offs) != 2 || p0.ErrorCode != 0 || p0.Offset != 3 || p1.ErrorCode != 0 || p1.Offset != 0 {
		t.Fatalf("offsets %+v", offs)
	}

	// kfake, like Apache Kafka, does not list LastMirroredOffsets in its
	// ApiVersions: it never mirrored anything.
	lmes, err := LastMirrorEpochs(ctx, conn, []part{0, 1})
	if err != nil || len(lmes) != 2 || lmes[topicPartition{Topic: "pfx.src", Partition: 0}] != -1 || lmes[topicPartition{Topic: "pfx.src", Partition: 1}] != -1 {
		t.Fatalf("last mirror epochs %v, %v", lmes, err)
	}
	if conn.mirrors == nil || *conn.mirrors {
		t.Fatalf("serves LastMirroredOffsets: %v", conn.mirrors)
	}

	if rtt, err := conn.RTT(ctx); err != nil || rtt <= 0 {
		t.Fatalf("RTT = %v, %v", rtt, err)
	}

	// A reset client is built again by the next request.
	conn.Reset()
	if conn.cl != nil {
		t.Fatal("client kept after Reset")
	}
	resp, err := conn.Request(ctx, leader, kmsg.NewPtrMetadataRequest())
	if err != nil || len(resp.(*kmsg.MetadataResponse).Brokers) != 1 {
		t.Fatalf("Metadata after Reset: %v", err)
	}
}

func TestConnErr(t *testing.T) {
	conn := &Conn{Mirror: "m", Configs: map[string]string{"bootstrap.servers": "127.0.0.1:1"}}
	refused := conn.Err("ListOffsets to broker 1", kerr.TopicAuthorizationFailed)
	if !errors.Is(refused, kerr.TopicAuthorizationFailed) || errors.Is(refused, mirrorproto.ErrMirrorSourceUnavailable) ||
		!strings.HasPrefix(refused.Error(), "source cluster 127.0.0.1:1 refused ListOffsets to broker 1: ") {
		t.Fatalf("refused: %v", refused)
	}
	gone := conn.Err("ApiVersions", errors.New("dial tcp: connection refused"))
	if !errors.Is(gone, mirrorproto.ErrMirrorSourceUnavailable) ||
		!strings.HasPrefix(gone.Error(), "source cluster 127.0.0.1:1 unreachable (ApiVersions): dial tcp: connection refused: ") {
		t.Fatalf("unreachable: %v", gone)
	}
}

// TestConnUnreachable: a source that does not listen fails the request
// within the request timeout, and the last mirror epochs say it is
// unreachable.
func TestConnUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	conn := &Conn{Mirror: "m", Configs: map[string]string{"bootstrap.servers": addr},
		Timeouts: mirrorcfg.Timeouts{Connect: time.Second, Request: 2 * time.Second}, ClientID: "broker-1-mirror-m"}
	t.Cleanup(conn.Reset)
	_, err = LastMirrorEpochs(context.Background(), conn, []part{0})
	if !errors.Is(err, mirrorproto.ErrMirrorSourceUnavailable) || conn.mirrors != nil {
		t.Fatalf("last mirror epochs of an unreachable source: %v (asked: %v)", err, conn.mirrors != nil)
	}

	// Configs without bootstrap.servers build no client.
	bad := &Conn{Mirror: "m", Configs: map[string]string{}}
	if _, err := bad.Request(context.Background(), -1, kmsg.NewPtrApiVersionsRequest()); !errors.Is(err, kerr.InvalidConfig) {
		t.Fatalf("request without bootstrap.servers: %v", err)
	}
}

func TestLeader(t *testing.T) {
	topic := kmsg.NewMetadataResponseTopic()
	for i, leader := range []int32{4, -1, 5} {
		sp := kmsg.NewMetadataResponseTopicPartition()
		sp.Partition, sp.Leader, sp.LeaderEpoch = int32(i), leader, 10+int32(i)
		if i == 2 {
			sp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		topic.Partitions = append(topic.Partitions, sp)
	}
	gone := kmsg.NewMetadataResponseTopic()
	gone.ErrorCode = kerr.UnknownTopicOrPartition.Code
	for _, tc := range []struct {
		t         *kmsg.MetadataResponseTopic
		partition int32
		leader    int32
		epoch     int32
		trouble   string
	}{
		{&topic, 0, 4, 10, ""},
		{&topic, 1, -1, -1, "source partition has no leader: <nil>"},
		{&topic, 2, -1, -1, "source partition has no leader: " + kerr.LeaderNotAvailable.Error()},
		{&topic, 3, -1, -1, "the source's metadata does not list the partition"},
		{nil, 0, -1, -1, "the source's metadata does not list the partition"},
		{&gone, 0, -1, -1, "source topic: " + kerr.UnknownTopicOrPartition.Error()},
	} {
		leader, epoch, trouble := Leader(tc.t, tc.partition)
		if leader != tc.leader || epoch != tc.epoch || trouble != tc.trouble {
			t.Errorf("partition %d: leader %d, epoch %d, %q; want %d, %d, %q", tc.partition, leader, epoch, trouble, tc.leader, tc.epoch, tc.trouble)
		}
	}
}

// A source that answers ApiVersions with an error has said nothing about
// mirroring: the last mirror epochs are an error, not -1 (which would
// truncate every partition's whole log).
func TestLastMirrorEpochsApiVersionsRefused(t *testing.T) {
	conn, c := newConn(t)
	c.ControlKey(int16(kmsg.ApiVersions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := kreq.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil, true
	})
	lmes, err := LastMirrorEpochs(context.Background(), conn, []part{0, 1})
	if !errors.Is(err, kerr.InvalidRequest) || len(lmes) != 0 {
		t.Fatalf("last mirror epochs %v, %v; want INVALID_REQUEST", lmes, err)
	}
	if conn.mirrors != nil {
		t.Fatalf("an ApiVersions error taken as an answer: serves LastMirroredOffsets %v", *conn.mirrors)
	}
}
