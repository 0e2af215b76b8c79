package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/network"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/replication"
	"github.com/tandem-kafka/tandem/server/wire"
)

// ledPartition finds partition p of t if this broker leads it: the one
// leadership check of appends (produce, plugin.Host.CheckWritable). The code is
// UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist and
// NOT_LEADER_OR_FOLLOWER when another broker (or none) leads it.
func (pd *producer) ledPartition(t *metadata.Topic, p int32) (*engine.Partition, metadata.Partition, *kerr.Error) {
	if t == nil || p < 0 || int(p) >= len(t.Partitions) {
		return nil, metadata.Partition{}, kerr.UnknownTopicOrPartition
	}
	part := t.Partitions[p]
	if part.Leader != pd.nodeID {
		return nil, part, kerr.NotLeaderForPartition
	}
	ep := pd.engine.Partition(t.ID, p)
	if ep == nil {
		// The image says we lead it but the engine has not created it:
		// only possible for an image not yet applied, so ask for a retry.
		return nil, part, kerr.NotLeaderForPartition
	}
	return ep, part, nil
}

// txnCoordinator is the plugin serving transactions, nil if none.
func txnCoordinator(plugins []any) plugin.TxnCoordinator {
	tc, _ := plugin.Find[plugin.TxnCoordinator](plugins)
	return tc
}

// producer serves Produce: what an append takes of the broker.
type producer struct {
	nodeID   int32
	plugins  []any
	log      *slog.Logger
	applied  *appliedState
	m        *brokerMetrics       // set by the broker's New, after its table of APIs
	reqBytes *wire.Budget         // queued.max.request.bytes, which decompression counts in
	refusals refusals             // the produce refusals logged once
	engine   *engine.Engine       // set by the broker's Start
	repl     *replication.Manager // set by the broker's Start
}

// internalClientID may write to internal topics, as in Kafka.
const internalClientID = "__admin_client"

func (pd *producer) handleProduce(ctx context.Context, rc *RequestContext, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	img := pd.applied.get()
	pr := &produce{
		pd: pd, rc: rc, req: req,
		// The append must finish even if the client hangs up: acks=0
		// clients may close right after writing.
		ctx: context.WithoutCancel(ctx),
		// A transactional produce needs WRITE on its transactional id, or
		// every partition fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
		txnDenied: req.TransactionID != nil && !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, *req.TransactionID),
	}
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i, rt := range req.Topics {
		pr.topic(img, rt, &resp.Topics[i])
	}
	return pr.respond(resp)
}

// produce is one Produce request being handled: what the steps of its
// partitions share.
type produce struct {
	pd        *producer
	ctx       context.Context
	rc        *RequestContext
	req       *kmsg.ProduceRequest
	txnDenied bool

	// applied: every partition's batches are in its log; synced: and
	// durable, with the response filled in.
	applied, synced sync.WaitGroup
	failed          bool
}

// topic handles the partitions of one topic of the request, answering in
// st: each is checked (check) and, if it passes, appended (append).
func (pr *produce) topic(img *metadata.Image, rt kmsg.ProduceRequestTopic, st *kmsg.ProduceResponseTopic) {
	st.Topic, st.TopicID = rt.Topic, rt.TopicID
	var t *metadata.Topic
	missing := kerr.UnknownTopicOrPartition
	if pr.req.Version >= 13 {
		t, missing = img.TopicsByID[rt.TopicID], kerr.UnknownTopicID
	} else {
		t = img.Topics[rt.Topic]
	}
	st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
	for j, rp := range rt.Partitions {
		sp := &st.Partitions[j]
		*sp = kmsg.NewProduceResponseTopicPartition()
		sp.Partition = rp.Partition
		ep, part, err, msg := pr.check(t, rt.Topic, missing, rp, sp)
		if err != nil {
			pr.fail(sp, err, msg)
			continue
		}
		pr.append(t, rp, ep, part, sp)
	}
}

// fail answers a partition refused before its append with err (and msg,
// if not empty).
func (pr *produce) fail(sp *kmsg.ProduceResponseTopicPartition, err *kerr.Error, msg string) {
	pr.failed = true
	sp.ErrorCode = err.Code
	if msg != "" {
		sp.ErrorMessage = &msg
	}
	pr.pd.m.produceErrors.Inc()
}

// check runs a partition's checks before its append, in order: the
// partition to append to, or the error (and message) it fails with. t is
// nil for a topic that does not exist (missing says how to answer it),
// name the request's name for it; a partition led elsewhere names its
// leader in sp.
func (pr *produce) check(t *metadata.Topic, name string, missing *kerr.Error, rp kmsg.ProduceRequestTopicPartition, sp *kmsg.ProduceResponseTopicPartition) (*engine.Partition, metadata.Partition, *kerr.Error, string) {
	pd, rc, req := pr.pd, pr.rc, pr.req
	if t != nil {
		name = t.Name
	}
	switch {
	case pr.txnDenied:
		return nil, metadata.Partition{}, kerr.TransactionalIDAuthorizationFailed, ""
	case (t != nil || req.Version < 13) && !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, name):
		return nil, metadata.Partition{}, kerr.TopicAuthorizationFailed, ""
	case t == nil:
		return nil, metadata.Partition{}, missing, ""
	case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
		return nil, metadata.Partition{}, kerr.InvalidRequiredAcks, ""
	case t.Internal && rc.ClientID != internalClientID:
		return nil, metadata.Partition{}, kerr.InvalidTopicException, "cannot produce to internal topic " + t.Name
	case legacyMessages(rp.Records):
		// Message sets (magic 0 and 1) predate record batches; we
		// store only batches, like Kafka 4.
		return nil, metadata.Partition{}, kerr.UnsupportedForMessageFormat, "record batches of magic 2 only"
	case !oneBatch(rp.Records):
		// As Kafka since Produce v3: a producer sends one batch
		// per partition, and the append, its sequence check and
		// its acknowledgement are of that one batch.
		return nil, metadata.Partition{}, kerr.InvalidRecord, "a produce request carries one record batch per partition"
	}
	ep, part, kerrErr := pd.ledPartition(t, rp.Partition)
	if kerrErr != nil {
		if kerrErr == kerr.NotLeaderForPartition {
			sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = part.Leader, part.LeaderEpoch
		}
		return nil, part, kerrErr, ""
	}
	if err := pd.repl.CheckMinISR(t, rp.Partition, part); req.Acks == -1 && err != nil {
		return nil, part, kerr.NotEnoughReplicas, *plugin.ErrorMessage(err)
	}
	if req.TransactionID != nil {
		// The guard before the coordinator adds the partition to
		// the transaction (Produce v12+): a refused partition must
		// not get the transaction's markers.
		err := plugin.CheckTopicChange(pd.plugins, plugin.TopicChange{Topic: t.Name, Op: plugin.OpWrite})
		if err == nil {
			err = pd.verifyTxn(pr.ctx, req.Version, *req.TransactionID, t.Name, rp.Partition, ep, rp.Records)
		}
		if err != nil {
			var kerrErr *kerr.Error
			if !errors.As(err, &kerrErr) {
				kerrErr = kerr.UnknownServerError
			}
			return nil, part, kerrErr, err.Error()
		}
	}
	return ep, part, nil, ""
}

// append appends a checked partition's batch to ep in a goroutine of its
// own, answering in sp once it is durable (and, for acks=all, replicated).
// Partitions append concurrently so that Pebble groups their commits (and
// fsyncs) instead of paying one per partition.
func (pr *produce) append(t *metadata.Topic, rp kmsg.ProduceRequestTopicPartition, ep *engine.Partition, part metadata.Partition, sp *kmsg.ProduceResponseTopicPartition) {
	pd, rc, req, ctx := pr.pd, pr.rc, pr.req, pr.ctx
	areq := &engine.AppendRequest{
		Topic: t.Name, TopicID: t.ID, Partition: rp.Partition,
		Origin: engine.OriginClient, Records: rp.Records, Acks: req.Acks,
	}
	pr.applied.Add(1)
	pr.synced.Add(1)
	go func() {
		defer pr.synced.Done()
		// Validation decompresses the batch: what that takes is
		// counted in the request budget while it runs.
		inflate, err := pd.reqBytes.AcquireInflate(ctx, engine.DecodeMemory(rp.Records))
		wait := func() (engine.AppendResult, error) { return engine.AppendResult{}, err }
		if err == nil {
			wait = ep.AppendAsync(ctx, areq)
			pd.reqBytes.ReleaseInflate(inflate)
		}
		pr.applied.Done()
		res, err := wait()
		if err == nil && req.Acks == -1 && len(part.Replicas) > 1 {
			// acks=all: answered once every ISR member has it.
			err = pd.repl.AwaitReplicated(ctx, t, rp.Partition, part.LeaderEpoch, ep, res.LastOffset, time.Duration(req.TimeoutMillis)*time.Millisecond)
		}
		if err != nil {
			pd.log.Debug("produce rejected", "topic", t.Name, "partition", rp.Partition, "err", err)
			sp.ErrorCode, sp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
			if !kerr.IsRetriable(err) && pd.refusals.first(rc.ClientID, t.Name, sp.ErrorCode) {
				pd.log.Warn("produce refused (logged once per client, topic and error)", "client_id", rc.ClientID, "client", rc.ClientAddr,
					"topic", t.Name, "err", *sp.ErrorMessage, "code", kerr.ErrorForCode(sp.ErrorCode))
			}
			pd.m.produceErrors.Inc()
			return
		}
		sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = res.BaseOffset, res.LogAppendTime, res.LogStartOffset
		pd.m.produceBytes.Add(len(rp.Records))
	}()
}

// respond answers the request once its partitions are appended: with acks
// set, a response sent once they are durable; with acks=0 none, or
// errAcks0Failed if a partition failed.
func (pr *produce) respond(resp *kmsg.ProduceResponse) (kmsg.Response, error) {
	if pr.req.Acks != 0 {
		// The batches are in their logs, in this request's order: the
		// connection may go on with its next request while these wait
		// for their fsync (see network.PendingResponse).
		pr.applied.Wait()
		ready := make(chan struct{})
		go func() { pr.synced.Wait(); close(ready) }()
		return &network.PendingResponse{Response: resp, Ready: ready}, nil
	}
	pr.synced.Wait()
	failed := pr.failed
	for i := range resp.Topics {
		for _, sp := range resp.Topics[i].Partitions {
			failed = failed || sp.ErrorCode != 0
		}
	}
	if failed {
		// Kafka closes an acks=0 producer's connection on error: it is
		// the only signal such a client gets to refresh metadata.
		return nil, errAcks0Failed
	}
	return nil, nil
}

// verifyTxn is KIP-890's defence against hanging transactions: the first
// transactional batch of a producer in a partition is appended only if
// the transaction coordinator has the partition in the producer's
// ongoing transaction (a late batch of a zombie or of a transaction that
// already ended would otherwise start a transaction nobody ends). From
// Produce v12 (KIP-890 part 2, transaction.version 2) the coordinator
// adds the partition instead: such clients skip AddPartitionsToTxn.
func (pd *producer) verifyTxn(ctx context.Context, version int16, txnID, topic string, partition int32, ep *engine.Partition, records []byte) error {
	tc := txnCoordinator(pd.plugins)
	h, err := engine.ParseBatchHeader(records)
	if tc == nil || err != nil || !h.Transactional() {
		return nil // not a transactional batch (or not one at all: the engine says so)
	}
	pid, epoch := h.ProducerID, h.ProducerEpoch
	if cur, open := ep.OpenTxn(pid); open && cur == epoch {
		return nil // verified when the transaction's first batch came
	}
	tp := plugin.TopicPartition{Topic: topic, Partition: partition}
	if adder, ok := tc.(plugin.TxnPartitionAdder); ok && version >= 12 {
		return adder.AddTxnPartition(ctx, txnID, pid, epoch, tp)
	}
	return tc.VerifyTxnPartition(ctx, txnID, pid, epoch, tp)
}

// legacyMessages reports whether records start with a message set of
// magic 0 or 1 rather than a record batch.
func legacyMessages(records []byte) bool {
	_, err := engine.ParseBatchHeader(records)
	return errors.Is(err, kerr.UnsupportedForMessageFormat)
}

// oneBatch reports whether records hold at most one record batch (what
// is in it, the engine checks).
func oneBatch(records []byte) bool {
	h, err := engine.ParseBatchHeader(records)
	return err != nil || int64(len(records)) <= h.Size()
}

var errAcks0Failed = errors.New("acks=0 produce failed: closing the connection so that the client refreshes its metadata")

// refusals remembers which clients were refused a produce to a topic
// for good (a non-retriable error), so that the broker logs it once per
// client, topic and error: some clients show only the error's name
// (librdkafka's kcat prints "Broker: Policy violation" for a read-only
// mirror topic), and the operator finds the reason, the mirror named,
// in the log. It forgets everything past 10,000 entries.
type refusals struct {
	mu   sync.Mutex
	seen map[refusal]struct{}
}

type refusal struct {
	client, topic string
	code          int16
}

// first reports whether this refusal is new.
func (r *refusals) first(client, topic string, code int16) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := refusal{client, topic, code}
	if _, ok := r.seen[k]; ok {
		return false
	}
	if r.seen == nil || len(r.seen) >= 10000 {
		r.seen = map[refusal]struct{}{}
	}
	r.seen[k] = struct{}{}
	return true
}

// checkWritable is Host.CheckWritable: the checks of an acks=all append
// before it, against the applied image. It returns the leader epoch to
// wait in.
func (pd *producer) checkWritable(id engine.TopicID, p int32) (int32, error) {
	t := pd.applied.get().TopicsByID[id]
	_, part, kerrErr := pd.ledPartition(t, p)
	switch {
	case kerrErr == kerr.UnknownTopicOrPartition:
		return -1, fmt.Errorf("partition %d of topic %s: %w", p, id, kerrErr)
	case kerrErr != nil:
		return -1, fmt.Errorf("%s-%d is led by broker %d: %w", t.Name, p, part.Leader, kerrErr)
	}
	if err := pd.repl.CheckMinISR(t, p, part); err != nil {
		return -1, err
	}
	return part.LeaderEpoch, nil
}

// awaitReplicated is Host.AwaitReplicated: the wait of an acks=all
// append after it, until the high watermark covers last.
func (pd *producer) awaitReplicated(ctx context.Context, id engine.TopicID, p int32, leaderEpoch int32, last int64, timeout time.Duration) error {
	t := pd.applied.get().TopicsByID[id]
	ep := pd.engine.Partition(id, p)
	if t == nil || ep == nil {
		return fmt.Errorf("partition %d of topic %s is gone: %w", p, id, kerr.UnknownTopicOrPartition)
	}
	return pd.repl.AwaitReplicated(ctx, t, p, leaderEpoch, ep, last, timeout)
}
