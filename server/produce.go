package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// ledPartition finds partition p of t if this broker leads it: the one
// leadership check of appends (produce, plugin.Host.CheckWritable). The code is
// UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist and
// NOT_LEADER_OR_FOLLOWER when another broker (or none) leads it.
func (b *Broker) ledPartition(t *metadata.Topic, p int32) (*engine.Partition, metadata.Partition, *kerr.Error) {
	if t == nil || p < 0 || int(p) >= len(t.Partitions) {
		return nil, metadata.Partition{}, kerr.UnknownTopicOrPartition
	}
	part := t.Partitions[p]
	if part.Leader != b.cfg.NodeID {
		return nil, part, kerr.NotLeaderForPartition
	}
	ep := b.engine.Partition(t.ID, p)
	if ep == nil {
		// The image says we lead it but the engine has not created it:
		// only possible for an image not yet applied, so ask for a retry.
		return nil, part, kerr.NotLeaderForPartition
	}
	return ep, part, nil
}

// internalClientID may write to internal topics, as in Kafka.
const internalClientID = "__admin_client"

func (b *Broker) handleProduce(ctx context.Context, rc *RequestContext, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	img := b.image()
	// The append must finish even if the client hangs up: acks=0 clients
	// may close right after writing.
	ctx = context.WithoutCancel(ctx)

	// applied: every partition's batches are in its log; synced: and
	// durable, with the response filled in.
	var applied, synced sync.WaitGroup
	failed := false
	// A transactional produce needs WRITE on its transactional id, or
	// every partition fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
	txnDenied := req.TransactionID != nil && !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, *req.TransactionID)
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i, rt := range req.Topics {
		st := &resp.Topics[i]
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		var t *metadata.Topic
		missing := kerr.UnknownTopicOrPartition
		if req.Version >= 13 {
			t, missing = img.TopicsByID[rt.TopicID], kerr.UnknownTopicID
		} else {
			t = img.Topics[rt.Topic]
		}
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for j, rp := range rt.Partitions {
			sp := &st.Partitions[j]
			*sp = kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			fail := func(err *kerr.Error, msg string) {
				failed = true
				sp.ErrorCode = err.Code
				if msg != "" {
					sp.ErrorMessage = &msg
				}
				b.m.produceErrors.Inc()
			}
			name := rt.Topic
			if t != nil {
				name = t.Name
			}
			switch {
			case txnDenied:
				fail(kerr.TransactionalIDAuthorizationFailed, "")
				continue
			case (t != nil || req.Version < 13) && !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, name):
				fail(kerr.TopicAuthorizationFailed, "")
				continue
			case t == nil:
				fail(missing, "")
				continue
			case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
				fail(kerr.InvalidRequiredAcks, "")
				continue
			case t.Internal && rc.ClientID != internalClientID:
				fail(kerr.InvalidTopicException, "cannot produce to internal topic "+t.Name)
				continue
			case legacyMessages(rp.Records):
				// Message sets (magic 0 and 1) predate record batches; we
				// store only batches, like Kafka 4.
				fail(kerr.UnsupportedForMessageFormat, "record batches of magic 2 only")
				continue
			case !oneBatch(rp.Records):
				// As Kafka since Produce v3: a producer sends one batch
				// per partition, and the append, its sequence check and
				// its acknowledgement are of that one batch.
				fail(kerr.InvalidRecord, "a produce request carries one record batch per partition")
				continue
			}
			ep, part, kerrErr := b.ledPartition(t, rp.Partition)
			if kerrErr != nil {
				fail(kerrErr, "")
				if kerrErr == kerr.NotLeaderForPartition {
					sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = part.Leader, part.LeaderEpoch
				}
				continue
			}
			if err := b.repl.CheckMinISR(t, rp.Partition, part); req.Acks == -1 && err != nil {
				fail(kerr.NotEnoughReplicas, *plugin.ErrorMessage(err))
				continue
			}
			if req.TransactionID != nil {
				// The guard before the coordinator adds the partition to
				// the transaction (Produce v12+): a refused partition must
				// not get the transaction's markers.
				err := plugin.CheckTopicChange(b.cfg.Plugins, plugin.TopicChange{Topic: t.Name, Op: plugin.OpWrite})
				if err == nil {
					err = b.verifyTxn(ctx, req.Version, *req.TransactionID, t.Name, rp.Partition, ep, rp.Records)
				}
				if err != nil {
					var kerrErr *kerr.Error
					if !errors.As(err, &kerrErr) {
						kerrErr = kerr.UnknownServerError
					}
					fail(kerrErr, err.Error())
					continue
				}
			}
			areq := &engine.AppendRequest{
				Topic: t.Name, TopicID: t.ID, Partition: rp.Partition,
				Origin: engine.OriginClient, Records: rp.Records, Acks: req.Acks,
			}
			// Partitions append concurrently so that Pebble groups their
			// commits (and fsyncs) instead of paying one per partition.
			applied.Add(1)
			synced.Add(1)
			go func() {
				defer synced.Done()
				// Validation decompresses the batch: what that takes is
				// counted in the request budget while it runs.
				inflate, err := b.reqBytes.AcquireInflate(ctx, engine.DecodeMemory(rp.Records))
				wait := func() (engine.AppendResult, error) { return engine.AppendResult{}, err }
				if err == nil {
					wait = ep.AppendAsync(ctx, areq)
					b.reqBytes.ReleaseInflate(inflate)
				}
				applied.Done()
				res, err := wait()
				if err == nil && req.Acks == -1 && len(part.Replicas) > 1 {
					// acks=all: answered once every ISR member has it.
					err = b.repl.AwaitReplicated(ctx, t, rp.Partition, part.LeaderEpoch, ep, res.LastOffset, time.Duration(req.TimeoutMillis)*time.Millisecond)
				}
				if err != nil {
					b.log.Debug("produce rejected", "topic", t.Name, "partition", rp.Partition, "err", err)
					sp.ErrorCode, sp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
					if !kerr.IsRetriable(err) && b.produceRefusals.first(rc.ClientID, t.Name, sp.ErrorCode) {
						b.log.Warn("produce refused (logged once per client, topic and error)", "client_id", rc.ClientID, "client", rc.ClientAddr,
							"topic", t.Name, "err", *sp.ErrorMessage, "code", kerr.ErrorForCode(sp.ErrorCode))
					}
					b.m.produceErrors.Inc()
					return
				}
				sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = res.BaseOffset, res.LogAppendTime, res.LogStartOffset
				b.m.produceBytes.Add(len(rp.Records))
			}()
		}
	}
	if req.Acks != 0 {
		// The batches are in their logs, in this request's order: the
		// connection may go on with its next request while these wait
		// for their fsync (see pendingResponse).
		applied.Wait()
		ready := make(chan struct{})
		go func() { synced.Wait(); close(ready) }()
		return &pendingResponse{Response: resp, ready: ready}, nil
	}
	synced.Wait()
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

// pendingResponse is a response that may be sent once ready is closed:
// a produce whose batches are appended but not yet durable.
type pendingResponse struct {
	kmsg.Response
	ready <-chan struct{}
}

// verifyTxn is KIP-890's defence against hanging transactions: the first
// transactional batch of a producer in a partition is appended only if
// the transaction coordinator has the partition in the producer's
// ongoing transaction (a late batch of a zombie or of a transaction that
// already ended would otherwise start a transaction nobody ends). From
// Produce v12 (KIP-890 part 2, transaction.version 2) the coordinator
// adds the partition instead: such clients skip AddPartitionsToTxn.
func (b *Broker) verifyTxn(ctx context.Context, version int16, txnID, topic string, partition int32, ep *engine.Partition, records []byte) error {
	tc := b.txnCoordinator()
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
