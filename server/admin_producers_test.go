package server

import (
	"net"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/admin"
)

func initProducerID(t *testing.T, b *Broker, version int16, txnID *string, id int64, epoch int16) *kmsg.InitProducerIDResponse {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID, req.TransactionTimeoutMillis = version, txnID, 60000
	req.ProducerID, req.ProducerEpoch = id, epoch
	return rawRequest(t, b.Addr(), req).(*kmsg.InitProducerIDResponse)
}

func TestInitProducerID(t *testing.T) {
	dir := t.TempDir()
	b := startBrokerWith(t, Config{DataDir: dir})
	first := initProducerID(t, b, 4, nil, -1, -1)
	if first.ErrorCode != 0 || first.ProducerID < 0 || first.ProducerEpoch != 0 {
		t.Fatalf("first: %+v", first)
	}
	seen := map[int64]bool{first.ProducerID: true}
	for range 5 {
		r := initProducerID(t, b, 0, nil, -1, -1)
		if r.ErrorCode != 0 || seen[r.ProducerID] || r.ProducerEpoch != 0 {
			t.Fatalf("repeated id or error: %+v", r)
		}
		seen[r.ProducerID] = true
	}
	// KIP-360: an idempotent producer re-initializing gets a new id.
	r := initProducerID(t, b, 4, nil, first.ProducerID, 0)
	if r.ErrorCode != 0 || seen[r.ProducerID] {
		t.Fatalf("re-init: %+v", r)
	}
	// Transactions are not supported yet.
	r = initProducerID(t, b, 4, kmsg.StringPtr("txn"), -1, -1)
	if r.ErrorCode != kerr.InvalidRequest.Code || r.ProducerID != -1 || r.ProducerEpoch != -1 {
		t.Fatalf("transactional: %+v", r)
	}

	// After a restart the ids continue past the old block.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBrokerWith(t, Config{DataDir: dir})
	r = initProducerID(t, b, 4, nil, -1, -1)
	if r.ErrorCode != 0 || r.ProducerID < first.ProducerID+metadata.ProducerIDBlock {
		t.Fatalf("after restart: id %d, first block started at %d", r.ProducerID, first.ProducerID)
	}
}

func TestDescribeProducers(t *testing.T) {
	b := startBroker(t, nil)
	adm, ctx := newAdmin(t, b), testCtx(t)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "dp"); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, b, kgo.DefaultProduceTopic("dp"))
	for range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var s kadm.TopicsSet
	s.Add("dp", 0)
	res, err := adm.DescribeProducers(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	p := res["dp"].Partitions[0]
	if p.Err != nil || len(p.ActiveProducers) != 1 {
		t.Fatalf("described: %+v", p)
	}
	for _, ap := range p.ActiveProducers {
		if ap.ProducerID < 0 || ap.ProducerEpoch != 0 || ap.LastSequence != 2 || ap.CurrentTxnStartOffset != -1 {
			t.Fatalf("producer: %+v", ap)
		}
	}

	req := kmsg.NewPtrDescribeProducersRequest()
	rt := kmsg.NewDescribeProducersRequestTopic()
	rt.Topic, rt.Partitions = "dp", []int32{5}
	req.Topics = append(req.Topics, rt)
	rt.Topic = "missing"
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, b.Addr(), req).(*kmsg.DescribeProducersResponse)
	for _, rt := range resp.Topics {
		wantCode(t, rt.Topic, rt.Partitions[0].ErrorCode, rt.Partitions[0].ErrorMessage, kerr.UnknownTopicOrPartition)
	}
}

func TestDescribeCluster(t *testing.T) {
	b := startBrokerWith(t, Config{NodeID: 3})
	req := kmsg.NewPtrDescribeClusterRequest()
	req.Version, req.IncludeClusterAuthorizedOperations = 1, true
	resp := rawRequest(t, b.Addr(), req).(*kmsg.DescribeClusterResponse)
	img := b.meta.Image()
	if resp.ErrorCode != 0 || resp.ClusterID != img.ClusterID || resp.ClusterID == "" || resp.ControllerID != 3 || resp.EndpointType != 1 {
		t.Fatalf("describe cluster: %+v", resp)
	}
	host, port, _ := net.SplitHostPort(b.Addr())
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != 3 || resp.Brokers[0].Host != host || strconv.Itoa(int(resp.Brokers[0].Port)) != port {
		t.Fatalf("brokers: %+v (listening on %s)", resp.Brokers, b.Addr())
	}
	var allCluster int32 // without an authorizer every cluster operation is allowed
	for _, op := range admin.ClusterOps {
		allCluster |= 1 << op
	}
	if resp.ClusterAuthorizedOperations != allCluster {
		t.Fatalf("authorized operations %b", resp.ClusterAuthorizedOperations)
	}
	req.IncludeClusterAuthorizedOperations = false
	req.EndpointType = 2
	resp = rawRequest(t, b.Addr(), req).(*kmsg.DescribeClusterResponse)
	wantCode(t, "controller endpoints", resp.ErrorCode, resp.ErrorMessage, kerr.UnsupportedEndpointType)

	// kadm's view, through Metadata and DescribeCluster.
	details, err := newAdmin(t, b).ListBrokers(testCtx(t))
	if err != nil || len(details) != 1 || details[0].NodeID != 3 {
		t.Fatalf("ListBrokers: %v %+v", err, details)
	}
}
