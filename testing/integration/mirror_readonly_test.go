package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestMirrorReadOnlyHolds is defect 3: on a mirror topic every way of
// changing it but the mirror's own is refused (POLICY_VIOLATION, READ_ONLY_TOPIC in the message), the
// log and the metadata untouched: DeleteRecords, CreatePartitions,
// DeleteTopics, config changes of synced keys, AddPartitionsToTxn, a
// transactional produce and its commit, and a client's WriteTxnMarkers
// (after which mirroring goes on). The topic's config names its mirror.
func TestMirrorReadOnlyHolds(t *testing.T) {
	src, dst := startMirrorCluster(t, ""), startMirrorCluster(t, "")
	createMirrorTopic(t, src, "ro", 2)
	ends := produceN(t, src.addr(), "ro", 2, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"ro": "m"}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, dst, "m", "ro", ends, 30*time.Second)
	cl := dst.client()
	readOnly := func(what string, code int16, msg *string) {
		t.Helper()
		if code != kerr.PolicyViolation.Code {
			t.Fatalf("%s on a mirror topic: error code %d (%v), want POLICY_VIOLATION (READ_ONLY_TOPIC for clients)", what, code, msg)
		}
		if msg != nil && (!strings.Contains(*msg, "read-only mirror topic of mirror m") || !strings.Contains(*msg, "READ_ONLY_TOPIC")) {
			t.Fatalf("%s on a mirror topic: message %q does not say READ_ONLY_TOPIC and name the mirror", what, *msg)
		}
	}
	untouched := func(what string) {
		t.Helper()
		for p, end := range ends {
			if o := dst.partition("ro", p).Offsets(); o.LogStart != 0 || o.LogEnd != end {
				t.Fatalf("after %s: ro-%d has log start %d end %d, want 0 and %d", what, p, o.LogStart, o.LogEnd, end)
			}
		}
		if n := len(dst.topic("ro").Partitions); n != 2 {
			t.Fatalf("after %s: %d partitions", what, n)
		}
	}

	dr := kmsg.NewPtrDeleteRecordsRequest()
	drt := kmsg.NewDeleteRecordsRequestTopic()
	drt.Topic = "ro"
	drt.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 3}}
	dr.Topics, dr.TimeoutMillis = append(dr.Topics, drt), 5000
	drr, err := dr.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	readOnly("DeleteRecords", drr.Topics[0].Partitions[0].ErrorCode, nil)
	untouched("DeleteRecords")

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Topics, cp.TimeoutMillis = []kmsg.CreatePartitionsRequestTopic{{Topic: "ro", Count: 3}}, 5000
	cpr, err := cp.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	readOnly("CreatePartitions", cpr.Topics[0].ErrorCode, cpr.Topics[0].ErrorMessage)
	untouched("CreatePartitions")

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("ro")}}
	dt.TimeoutMillis = 5000
	dtr, err := dt.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	readOnly("DeleteTopics", dtr.Topics[0].ErrorCode, dtr.Topics[0].ErrorMessage)
	untouched("DeleteTopics")

	alter := func(key string) (int16, *string) {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, "ro"
		r.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: key, Value: kmsg.StringPtr("1")}}
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Resources[0].ErrorCode, resp.Resources[0].ErrorMessage
	}
	code, msg := alter("retention.ms")
	readOnly("IncrementalAlterConfigs retention.ms", code, msg)
	code, msg = alter("mirror.name")
	readOnly("IncrementalAlterConfigs mirror.name", code, msg)
	if code, msg := alter("min.insync.replicas"); code != 0 { // not synced: the destination's own
		t.Fatalf("altering min.insync.replicas (excluded from the sync) on a mirror topic: %d %v", code, msg)
	}
	ac := kmsg.NewPtrAlterConfigsRequest()
	acr := kmsg.NewAlterConfigsRequestResource()
	acr.ResourceType, acr.ResourceName = kmsg.ConfigResourceTypeTopic, "ro"
	acr.Configs = []kmsg.AlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("1000")}}
	ac.Resources = append(ac.Resources, acr)
	acresp, err := ac.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	readOnly("AlterConfigs", acresp.Resources[0].ErrorCode, acresp.Resources[0].ErrorMessage)
	if v, ok := dst.topic("ro").Configs["retention.ms"]; ok {
		t.Fatalf("retention.ms of the mirror topic changed to %s", v)
	}
	desc, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, "ro")
	if err != nil {
		t.Fatal(err)
	}
	c, err := desc.On("ro", nil)
	if err != nil || c.Err != nil {
		t.Fatalf("describe ro: %v %v", err, c.Err)
	}
	var name string
	for _, e := range c.Configs {
		if e.Key == "mirror.name" && e.Value != nil {
			name = *e.Value
		}
	}
	if name != "m" {
		t.Fatalf("mirror.name of a mirror topic: %q, want m", name)
	}

	// Transactions: AddPartitionsToTxn is refused; a transactional
	// producer's batches and commit leave the log as it was.
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.TransactionalID, ip.TransactionTimeoutMillis = kmsg.StringPtr("t1"), 60000
	ipr, err := ip.RequestWith(ctx, cl)
	if err != nil || ipr.ErrorCode != 0 {
		t.Fatalf("init producer id: %v %d", err, ipr.ErrorCode)
	}
	ap := kmsg.NewPtrAddPartitionsToTxnRequest()
	ap.Version = 3
	ap.TransactionalID, ap.ProducerID, ap.ProducerEpoch = "t1", ipr.ProducerID, ipr.ProducerEpoch
	ap.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "ro", Partitions: []int32{0}}}
	apr, err := ap.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	readOnly("AddPartitionsToTxn", apr.Topics[0].Partitions[0].ErrorCode, nil)
	tx := dst.client(kgo.TransactionalID("t2"), kgo.DefaultProduceTopic("ro"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(1))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("txn")}).FirstErr(); err == nil {
		t.Fatalf("a transactional produce to a mirror topic succeeded")
	}
	tx.EndTransaction(ctx, kgo.TryCommit) //nolint:errcheck // whatever it answers, the log must not change
	time.Sleep(time.Second)               // markers are written after EndTxn is answered
	untouched("a transactional produce and its commit")

	// A client's WriteTxnMarkers: refused, and mirroring goes on.
	wm := kmsg.NewPtrWriteTxnMarkersRequest()
	wm.Markers = []kmsg.WriteTxnMarkersRequestMarker{{ProducerID: 4242, ProducerEpoch: 0, Committed: true, CoordinatorEpoch: 0,
		Topics: []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: "ro", Partitions: []int32{0}}}}}
	wmr, err := wm.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	readOnly("WriteTxnMarkers", wmr.Markers[0].Topics[0].Partitions[0].ErrorCode, nil)
	untouched("WriteTxnMarkers")
	ends = produceN(t, src.addr(), "ro", 2, 5)
	waitMirrored(t, dst, "m", "ro", ends, 30*time.Second)
	for p := range int32(2) {
		sameLog(t, "ro after the refused changes", src.partition("ro", p), dst.partition("ro", p))
	}

	// Failed over, it is an ordinary topic again.
	if _, err := da.RemoveTopicsFromMirror(ctx, "m", []string{"ro"}); err != nil {
		t.Fatal(err)
	}
	if v, ok := dst.topic("ro").Configs["mirror.name"]; ok {
		t.Fatalf("mirror.name %q still set after failover", v)
	}
	drr, err = dr.RequestWith(ctx, cl)
	if err != nil || drr.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("DeleteRecords after failover: %v %d", err, drr.Topics[0].Partitions[0].ErrorCode)
	}
}

// TestMirrorFailbackWithOpenSourceTransaction is defect 4: the old
// primary's transaction coordinator still holds a transaction open on a
// topic that has become a mirror topic again (failback); when it aborts
// it, it writes no marker into the mirror partition, and the old primary
// ends byte-identical to the new one.
func TestMirrorFailbackWithOpenSourceTransaction(t *testing.T) {
	tandemtest.Long(t) // two clusters: the full tier only
	a := startMirrorClusterProps(t, "", map[string]string{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
	b := startMirrorCluster(t, "")
	createMirrorTopic(t, a, "t", 1)
	ends := produceN(t, a.addr(), "t", 1, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ba := b.admin()
	if err := ba.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": a.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := ba.AddTopicsToMirror(ctx, map[string]string{"t": "m"}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, b, "m", "t", ends, 30*time.Second)
	if _, err := ba.RemoveTopicsFromMirror(ctx, "m", []string{"t"}); err != nil {
		t.Fatal(err)
	}
	produceN(t, b.addr(), "t", 1, 5) // the new primary moves on

	// The old primary has a transaction open on t when it fails back.
	tx := a.client(kgo.TransactionalID("zombie"), kgo.DefaultProduceTopic("t"), kgo.TransactionTimeout(3*time.Second))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("open on the old primary")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	aa := a.admin()
	if err := aa.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": b.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := aa.AddTopicsToMirror(ctx, map[string]string{"t": "m"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the old primary's coordinator to abort the timed-out transaction", func() bool {
		ds, err := kadm.NewClient(a.client()).DescribeTransactions(ctx, "zombie")
		if err != nil {
			return false
		}
		d, ok := ds["zombie"]
		return ok && d.Err == nil && d.State == "CompleteAbort"
	})
	produceN(t, b.addr(), "t", 1, 5)
	caughtUp(t, b, a, "m", "t", 30*time.Second)
	sameLog(t, "t on the old primary", b.partition("t", 0), a.partition("t", 0))
}

// TestMirrorSafeFailover: a planned failover waits for lag 0 against a
// fresh source end offset and refuses, naming the partitions, when that
// does not come in time; with the source unreachable it refuses unless
// forced, and a forced one reports what it gave up.
func TestMirrorSafeFailover(t *testing.T) {
	tandemtest.Long(t) // throttled mirrors, seconds: the full tier only
	src := startMirrorCluster(t, "")
	// Slow: 2 kB/s of small fetches.
	dst := startMirrorClusterProps(t, "", map[string]string{"mirror.replication.throttled.rate": "2000", "replica.fetch.max.bytes": "1000"})
	for _, topic := range []string{"slow", "calm", "gone"} {
		createMirrorTopic(t, src, topic, 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pc := src.client(kgo.DefaultProduceTopic("slow"))
	for i := range 200 { // one batch each: the throttled mirror copies a few per second
		if err := pc.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%0100d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"slow": "m", "calm": "m", "gone": "m"}); err != nil {
		t.Fatal(err)
	}
	// The refusal needs a lag to report: wait until the source's end offset
	// is known (on a loaded machine the first fetch can take longer than the
	// failover's timeout). At 2 kB/s the 200 records take seconds to copy.
	waitFor(t, time.Minute, "slow-0's source offset", func() bool {
		st, _ := describe(t, dst, "m")
		return st["slow/0"].SourceOffset > 0
	})
	report, err := da.Failover(ctx, "m", []string{"slow"}, admin.FailoverOptions{Timeout: time.Second})
	if !errors.Is(err, kerr.RequestTimedOut) || !strings.Contains(err.Error(), "slow-0: lag") {
		t.Fatalf("safe failover of a lagging topic: %v", err)
	}
	if len(report) != 1 || report[0].Lag <= 0 {
		t.Fatalf("safe failover of a lagging topic reports %+v", report)
	}
	if st, _ := describe(t, dst, "m"); st["slow/0"].State != "MIRRORING" {
		t.Fatalf("a refused failover stopped slow-0: %s", st["slow/0"].State)
	}

	// Caught up (nothing to copy), the safe failover goes through.
	report, err = da.Failover(ctx, "m", []string{"calm"}, admin.FailoverOptions{Timeout: time.Minute})
	if err != nil || len(report) != 1 || report[0].Lag != 0 || report[0].SourceOffset != 0 {
		t.Fatalf("safe failover of a caught-up topic: %v %+v", err, report)
	}

	// The source gone: refused unless forced; forced, the lag is reported.
	src.b.Close()
	if _, err := da.Failover(ctx, "m", []string{"gone"}, admin.FailoverOptions{Timeout: time.Minute}); !errors.Is(err, mirrorproto.ErrMirrorSourceUnavailable) {
		t.Fatalf("safe failover with the source gone: %v", err)
	}
	report, err = da.Failover(ctx, "m", []string{"gone", "slow"}, admin.FailoverOptions{Force: true, Timeout: time.Minute})
	if err != nil || len(report) != 2 || report[0].Lag != 0 || report[1].Lag <= 0 || report[1].SourceOffset != 200 {
		t.Fatalf("forced failover with the source gone: %v %+v", err, report)
	}
	if err := produceOne(t, dst, "slow", 0, "after a forced failover"); err != nil {
		t.Fatal(err)
	}
}

// TestMirrorLoopRefused: a cluster cannot mirror a topic from a cluster
// that mirrors it from this one. A mirrors t from B while B mirrors it
// from A is refused, naming both cluster IDs, and A's t stays as it was;
// once B has failed over, the same request is a failback and works.
func TestMirrorLoopRefused(t *testing.T) {
	a, b := startMirrorCluster(t, ""), startMirrorCluster(t, "")
	createMirrorTopic(t, a, "t", 1)
	ends := produceN(t, a.addr(), "t", 1, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ba, aa := b.admin(), a.admin()
	if err := ba.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": a.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := ba.AddTopicsToMirror(ctx, map[string]string{"t": "m"}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, b, "m", "t", ends, 30*time.Second)

	if err := aa.CreateMirror(ctx, "back", map[string]string{"bootstrap.servers": b.addr()}); err != nil {
		t.Fatal(err)
	}
	err := aa.AddTopicsToMirror(ctx, map[string]string{"t": "back"})
	idA, idB := a.b.Metadata().Image().ClusterID, b.b.Metadata().Image().ClusterID
	if err == nil || !strings.Contains(err.Error(), idA) || !strings.Contains(err.Error(), idB) {
		t.Fatalf("mirroring t back from the cluster that mirrors it from here: %v, want a refusal naming clusters %s and %s", err, idA, idB)
	}
	if m := a.b.Metadata().Image().MirrorOf("t"); m != "" {
		t.Fatalf("after the refusal t is mirrored by %s here", m)
	}
	ends = produceN(t, a.addr(), "t", 1, 5) // still writable here
	waitMirrored(t, b, "m", "t", ends, 30*time.Second)

	// B fails over: A mirroring t from B is now a failback.
	if _, err := ba.RemoveTopicsFromMirror(ctx, "m", []string{"t"}); err != nil {
		t.Fatal(err)
	}
	if err := aa.AddTopicsToMirror(ctx, map[string]string{"t": "back"}); err != nil {
		t.Fatalf("failing back after B's failover: %v", err)
	}
}

// TestMirrorReadOnlyClients is issue 27's report: a produce to a mirror
// topic showed in kcat as "Err-137?" and in franz-go as
// UNKNOWN_SERVER_ERROR. Clients that do not know READ_ONLY_TOPIC (none
// does yet) get POLICY_VIOLATION, which they know and do not retry, and
// the per-partition message says the topic is a read-only mirror topic
// and of which mirror; the log is untouched.
func TestMirrorReadOnlyClients(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat is required (apt-get install -y kcat): %v", err)
	}
	src, dst := startMirrorCluster(t, ""), startMirrorCluster(t, "")
	createMirrorTopic(t, src, "orders", 1)
	ends := produceN(t, src.addr(), "orders", 1, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m1", map[string]string{"bootstrap.servers": src.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{"orders": "m1"}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, dst, "m1", "orders", ends, 30*time.Second)

	// franz-go: the error is one it knows, not retried.
	cl := dst.client(kgo.DefaultProduceTopic("orders"), kgo.RecordRetries(3))
	err = cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr()
	if !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("franz-go producing to a mirror topic: %v, want POLICY_VIOLATION", err)
	}
	// The message, as any client reading Produce v8+ sees it.
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	batch, err := recordbatch.Build(recordbatch.CodecNone, recordbatch.KV{Value: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = "orders", dst.topic("orders").ID
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batch}}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, dst.client())
	if err != nil {
		t.Fatal(err)
	}
	pr := resp.Topics[0].Partitions[0]
	if pr.ErrorCode != kerr.PolicyViolation.Code || pr.ErrorMessage == nil ||
		*pr.ErrorMessage != "topic orders is a read-only mirror topic of mirror m1 (client append refused) [READ_ONLY_TOPIC]" {
		t.Fatalf("produce to a mirror topic: code %d message %v", pr.ErrorCode, pr.ErrorMessage)
	}

	// kcat (librdkafka): a delivery failure it can name, not "Err-137?".
	cmd := exec.CommandContext(ctx, kcat, "-P", "-b", dst.addr(), "-t", "orders", "-p", "0", "-X", "message.send.max.retries=0")
	cmd.Stdin = strings.NewReader("z\n")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "Policy violation") || strings.Contains(string(out), "Err-137") {
		t.Fatalf("kcat producing to a mirror topic printed:\n%s", out)
	}
	t.Logf("kcat: %s", strings.TrimSpace(string(out)))
	if o := dst.partition("orders", 0).Offsets(); o.LogEnd != ends[0] {
		t.Fatalf("after the refused produces orders-0 ends at %d, want %d", o.LogEnd, ends[0])
	}
}
