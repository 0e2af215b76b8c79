package txn

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// errRetry asks InitProducerId to run again once a fenced transaction is
// aborted.
var errRetry = errors.New("retry")

// InitTransactionalProducerID implements plugin.TxnCoordinator: the
// broker has checked WRITE on the transactional id. A known id gets its
// epoch bumped, which fences every older producer of the id; a
// transaction the old producer left open is aborted first.
func (p *Plugin) InitTransactionalProducerID(ctx context.Context, rc *plugin.RequestContext, req *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	id := *req.TransactionalID
	if id == "" {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp
	}
	if req.TransactionTimeoutMillis <= 0 || int64(req.TransactionTimeoutMillis) > p.cfg.MaxTimeout.Milliseconds() {
		resp.ErrorCode = kerr.InvalidTransactionTimeout.Code
		return resp
	}
	given := req.Version >= 3 && req.ProducerID >= 0
	for attempt := 0; attempt < 3; attempt++ {
		var end *ending
		err := p.do(ctx, id, func(s *shardState) error {
			m := s.txns[id]
			if m == nil {
				pid, err := p.producerID(ctx)
				if err != nil {
					return err
				}
				n := &txnMeta{id: id, pid: pid, timeoutMs: req.TransactionTimeoutMillis, state: stEmpty, startMs: -1, nextPid: -1}
				if err := s.put(n); err != nil {
					return err
				}
				resp.ProducerID, resp.ProducerEpoch = n.pid, n.epoch
				return nil
			}
			if given && (req.ProducerID != m.pid || req.ProducerEpoch > m.epoch) {
				// KIP-360: only the id's current producer may bump its
				// own epoch; anyone else holds a stale id.
				return fmt.Errorf("transactional id %s has producer %d epoch %d, not %d/%d: %w", id, m.pid, m.epoch, req.ProducerID, req.ProducerEpoch, fenced(req.Version, 4))
			}
			switch {
			case m.state == stPrepareCommit || m.state == stPrepareAbort:
				return kerr.ConcurrentTransactions
			case m.state == stOngoing || len(s.openOffsetPartitions(m.pid)) > 0:
				// (offsets alone, from a transaction.version 2 client,
				// are an ongoing transaction too)
				e, err := s.prepareEnd(m, false, true, false)
				if err != nil {
					return err
				}
				end = &e
				return errRetry
			}
			n := m.clone()
			if n.epoch >= maxEpoch {
				pid, err := p.producerID(ctx)
				if err != nil {
					return err
				}
				n.pid, n.epoch = pid, 0
			} else {
				n.epoch++
			}
			n.timeoutMs, n.state, n.parts, n.startMs = req.TransactionTimeoutMillis, stEmpty, nil, -1
			n.tv = 0 // the new producer's requests say which version it speaks
			if err := s.put(n); err != nil {
				return err
			}
			resp.ProducerID, resp.ProducerEpoch = n.pid, n.epoch
			return nil
		})
		if errors.Is(err, errRetry) {
			if err := p.complete(ctx, *end); err != nil {
				resp.ErrorCode = kerr.ConcurrentTransactions.Code // the client retries
				return resp
			}
			continue
		}
		resp.ErrorCode = plugin.ErrorCode(err)
		if err != nil {
			p.log.Debug("InitProducerId", "transactional_id", id, "err", err)
		}
		return resp
	}
	resp.ErrorCode = kerr.ConcurrentTransactions.Code
	return resp
}

// checkProducer validates a request's producer against the id's state.
func checkProducer(m *txnMeta, pid int64, epoch int16, version, fencedSince int16) error {
	switch {
	case m == nil || m.pid != pid:
		return kerr.InvalidProducerIDMapping
	case epoch != m.epoch:
		return fenced(version, fencedSince)
	case m.state == stPrepareCommit || m.state == stPrepareAbort:
		return kerr.ConcurrentTransactions
	}
	return nil
}

// addPartitions adds partitions to the id's transaction, starting one if
// none is open. tv is the client's transaction.version (2 when the add
// is implied by a Produce v12+).
func (s *shardState) addPartitions(id string, pid int64, epoch int16, version, fencedSince, tv int16, parts []plugin.TopicPartition) error {
	m := s.txns[id]
	if err := checkProducer(m, pid, epoch, version, fencedSince); err != nil {
		return err
	}
	if m.state == stOngoing && m.tv >= tv && !slices.ContainsFunc(parts, func(tp plugin.TopicPartition) bool { return !m.parts[tp] }) {
		return nil
	}
	n := m.clone()
	if n.state != stOngoing {
		n.state, n.startMs, n.parts, n.tv = stOngoing, s.p.now().UnixMilli(), map[plugin.TopicPartition]bool{}, tv
	}
	n.tv = max(n.tv, tv)
	for _, tp := range parts {
		n.parts[tp] = true
	}
	return s.put(n)
}

// VerifyTxnPartition implements plugin.TxnCoordinator (KIP-890 part 1):
// the partition must be in the producer's ongoing transaction.
func (p *Plugin) VerifyTxnPartition(ctx context.Context, txnID string, pid int64, epoch int16, tp plugin.TopicPartition) error {
	if node, ok := p.remoteCoordinator(txnID); ok {
		return p.sendAddPartition(ctx, node, txnID, pid, epoch, tp, true)
	}
	return p.verifyLocal(ctx, txnID, pid, epoch, tp)
}

func (p *Plugin) verifyLocal(ctx context.Context, txnID string, pid int64, epoch int16, tp plugin.TopicPartition) error {
	return p.do(ctx, txnID, func(s *shardState) error {
		m := s.txns[txnID]
		switch {
		case m == nil || m.pid != pid:
			return fmt.Errorf("transactional id %s: producer %d unknown: %w", txnID, pid, kerr.InvalidProducerIDMapping)
		case epoch < m.epoch:
			return fmt.Errorf("transactional id %s: epoch %d is older than %d: %w", txnID, epoch, m.epoch, kerr.InvalidProducerEpoch)
		case m.state != stOngoing || !m.parts[tp]:
			return fmt.Errorf("%s-%d is not in transaction %s: %w", tp.Topic, tp.Partition, txnID, kerr.InvalidTxnState)
		}
		return nil
	})
}

// AddTxnPartition implements plugin.TxnPartitionAdder (KIP-890 part 2):
// a Produce v12+ (or TxnOffsetCommit v5+) of a transaction.version 2
// client adds its partition to the producer's transaction, starting one
// if none is open, instead of AddPartitionsToTxn. A stale epoch is
// INVALID_PRODUCER_EPOCH, as Kafka answers a produce.
func (p *Plugin) AddTxnPartition(ctx context.Context, txnID string, pid int64, epoch int16, tp plugin.TopicPartition) error {
	if err := plugin.CheckTopicChange(p.Host().Plugins(), plugin.TopicChange{Topic: tp.Topic, Op: plugin.OpWrite}); err != nil {
		return err
	}
	if node, ok := p.remoteCoordinator(txnID); ok {
		return p.sendAddPartition(ctx, node, txnID, pid, epoch, tp, false)
	}
	return p.addLocal(ctx, txnID, pid, epoch, tp)
}

func (p *Plugin) addLocal(ctx context.Context, txnID string, pid int64, epoch int16, tp plugin.TopicPartition) error {
	err := p.do(ctx, txnID, func(s *shardState) error {
		return s.addPartitions(txnID, pid, epoch, 0, 1, 2, []plugin.TopicPartition{tp})
	})
	if err != nil {
		return fmt.Errorf("transactional id %s: add %s-%d: %w", txnID, tp.Topic, tp.Partition, err)
	}
	return nil
}

// remoteCoordinator is the broker that coordinates txnID when it is not
// this one: the leader of its partition of __transaction_state.
func (p *Plugin) remoteCoordinator(txnID string) (int32, bool) {
	h, img := p.Host(), p.Image()
	if h == nil || img == nil {
		return -1, false
	}
	t := img.Topics[Topic]
	part := p.PartitionFor(txnID)
	if t == nil || int(part) >= len(t.Partitions) {
		return -1, false // not created yet: the local coordinator answers
	}
	leader := t.Partitions[part].Leader
	return leader, leader >= 0 && leader != h.NodeID()
}

// sendAddPartition asks the broker coordinating txnID, with
// AddPartitionsToTxn v4+ (Kafka's AddPartitionsToTxnManager, KIP-890),
// to verify that tp is in the producer's transaction (verifyOnly) or to
// add it (transaction.version 2). The answer is the partition's error.
func (p *Plugin) sendAddPartition(ctx context.Context, node int32, txnID string, pid int64, epoch int16, tp plugin.TopicPartition, verifyOnly bool) error {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
	tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = txnID, pid, epoch, verifyOnly
	rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
	rt.Topic, rt.Partitions = tp.Topic, []int32{tp.Partition}
	tx.Topics = append(tx.Topics, rt)
	req.Transactions = append(req.Transactions, tx)
	ctx, cancel := context.WithTimeout(ctx, markerTimeout)
	defer cancel()
	kresp, err := p.Host().Send(ctx, node, req)
	if err != nil {
		// The coordinator is unreachable (it may have just died):
		// the client retries once it finds the new one.
		return fmt.Errorf("transactional id %s: coordinator %d: %v: %w", txnID, node, err, kerr.NotCoordinator)
	}
	resp := kresp.(*kmsg.AddPartitionsToTxnResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("transactional id %s: coordinator %d: %w", txnID, node, err)
	}
	for _, rtx := range resp.Transactions {
		for _, t := range rtx.Topics {
			for _, part := range t.Partitions {
				if t.Topic == tp.Topic && part.Partition == tp.Partition {
					if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
						return fmt.Errorf("transactional id %s: %s-%d on coordinator %d: %w", txnID, tp.Topic, tp.Partition, node, err)
					}
					return nil
				}
			}
		}
	}
	return fmt.Errorf("transactional id %s: coordinator %d did not answer for %s-%d: %w", txnID, node, tp.Topic, tp.Partition, kerr.UnknownServerError)
}

// topicCheck is the per-partition error of AddPartitionsToTxn before the
// coordinator is asked: authorization and existence.
func (p *Plugin) topicCheck(rc *plugin.RequestContext, topic string, partition int32) *kerr.Error {
	if !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, topic) {
		return kerr.TopicAuthorizationFailed
	}
	img := p.Image()
	if img == nil {
		return kerr.UnknownTopicOrPartition
	}
	if t := img.Topics[topic]; t == nil || partition < 0 || int(partition) >= len(t.Partitions) {
		return kerr.UnknownTopicOrPartition
	}
	var ke *kerr.Error
	if err := plugin.CheckTopicChange(p.Host().Plugins(), plugin.TopicChange{Topic: topic, Op: plugin.OpWrite}); errors.As(err, &ke) {
		return ke // a read-only (mirror) topic: its transaction would end with a marker nobody may write
	}
	return nil
}

type txnTopic struct {
	topic      string
	partitions []int32
}

// addTxn answers one transaction of AddPartitionsToTxn: per topic, per
// partition codes.
func (p *Plugin) addTxn(ctx context.Context, rc *plugin.RequestContext, version int16, id string, pid int64, epoch int16, topics []txnTopic) map[string]map[int32]int16 {
	codes := map[string]map[int32]int16{}
	set := func(t string, part int32, c int16) {
		if codes[t] == nil {
			codes[t] = map[int32]int16{}
		}
		codes[t][part] = c
	}
	var parts []plugin.TopicPartition
	failed := false
	for _, t := range topics {
		for _, part := range t.partitions {
			if e := p.topicCheck(rc, t.topic, part); e != nil {
				set(t.topic, part, e.Code)
				failed = true
				continue
			}
			parts = append(parts, plugin.TopicPartition{Topic: t.topic, Partition: part})
		}
	}
	if !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, id) {
		for _, t := range topics {
			for _, part := range t.partitions {
				set(t.topic, part, kerr.TransactionalIDAuthorizationFailed.Code)
			}
		}
		return codes
	}
	if failed {
		for _, tp := range parts {
			set(tp.Topic, tp.Partition, kerr.OperationNotAttempted.Code)
		}
		return codes
	}
	c := plugin.ErrorCode(p.do(ctx, id, func(s *shardState) error {
		return s.addPartitions(id, pid, epoch, version, 2, 0, parts)
	}))
	for _, tp := range parts {
		set(tp.Topic, tp.Partition, c)
	}
	return codes
}

// addTxnBroker answers one transaction of AddPartitionsToTxn v4+, which
// only brokers send (CLUSTER_ACTION is checked, not the client's ACLs,
// which the sending broker checked): verifyOnly is KIP-890 part 1's
// check of a produce, otherwise it is the implicit add of part 2
// (transaction.version 2), as the sending broker's own coordinator
// would do it (VerifyTxnPartition, AddTxnPartition).
func (p *Plugin) addTxnBroker(ctx context.Context, id string, pid int64, epoch int16, verifyOnly bool, topics []txnTopic) map[string]map[int32]int16 {
	codes := map[string]map[int32]int16{}
	for _, t := range topics {
		codes[t.topic] = map[int32]int16{}
		for _, part := range t.partitions {
			tp := plugin.TopicPartition{Topic: t.topic, Partition: part}
			var err error
			if verifyOnly {
				err = p.verifyLocal(ctx, id, pid, epoch, tp)
			} else {
				err = p.addLocal(ctx, id, pid, epoch, tp)
			}
			codes[t.topic][part] = plugin.ErrorCode(err)
		}
	}
	return codes
}

func (p *Plugin) handleAddPartitions(ctx context.Context, rc *plugin.RequestContext, req *kmsg.AddPartitionsToTxnRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if req.Version < 4 {
		topics := make([]txnTopic, len(req.Topics))
		for i, t := range req.Topics {
			topics[i] = txnTopic{t.Topic, t.Partitions}
		}
		codes := p.addTxn(ctx, rc, req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch, topics)
		for _, t := range req.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, part := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = part, codes[t.Topic][part]
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	// v4+ is broker to broker (KIP-890): batched, with a verify-only mode.
	if !rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, plugin.ClusterResource) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	}
	for _, tx := range req.Transactions {
		topics := make([]txnTopic, len(tx.Topics))
		for i, t := range tx.Topics {
			topics[i] = txnTopic{t.Topic, t.Partitions}
		}
		codes := p.addTxnBroker(ctx, tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly, topics)
		rtx := kmsg.NewAddPartitionsToTxnResponseTransaction()
		rtx.TransactionalID = tx.TransactionalID
		for _, t := range tx.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
			rt.Topic = t.Topic
			for _, part := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
				rp.Partition, rp.ErrorCode = part, codes[t.Topic][part]
				rt.Partitions = append(rt.Partitions, rp)
			}
			rtx.Topics = append(rtx.Topics, rt)
		}
		resp.Transactions = append(resp.Transactions, rtx)
	}
	return resp
}

func (p *Plugin) handleAddOffsets(ctx context.Context, rc *plugin.RequestContext, req *kmsg.AddOffsetsToTxnRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	switch {
	case !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, req.TransactionalID):
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
	case !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group):
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
	default:
		groups, ok := p.groupOffsets()
		if !ok {
			resp.ErrorCode = kerr.InvalidRequest.Code
			break
		}
		tp := groups.OffsetsPartition(req.Group)
		resp.ErrorCode = plugin.ErrorCode(p.do(ctx, req.TransactionalID, func(s *shardState) error {
			return s.addPartitions(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Version, 2, 0, []plugin.TopicPartition{tp})
		}))
	}
	return resp
}

// groupOffsets is the consumer-groups plugin, which owns the partitions
// AddOffsetsToTxn adds; a build without it has no offsets to commit.
func (p *Plugin) groupOffsets() (plugin.GroupOffsets, bool) {
	if h := p.Host(); h != nil {
		return plugin.Find[plugin.GroupOffsets](h.Plugins())
	}
	return nil, false
}

func (p *Plugin) handleEndTxn(ctx context.Context, rc *plugin.RequestContext, req *kmsg.EndTxnRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if !rc.Allowed(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, req.TransactionalID) {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp
	}
	// EndTxn v5+ is transaction.version 2 (KIP-890 part 2): every end
	// bumps the producer epoch, the markers carry the new epoch and the
	// response hands it to the producer for its next transaction.
	tv2 := req.Version >= 5
	var end *ending
	err := p.do(ctx, req.TransactionalID, func(s *shardState) error {
		m := s.txns[req.TransactionalID]
		if m == nil || m.pid != req.ProducerID {
			return kerr.InvalidProducerIDMapping
		}
		// A retry of the EndTxn that bumped the epoch carries the old one.
		retry := tv2 && m.endedWith(req.ProducerEpoch)
		if req.ProducerEpoch != m.epoch && !retry {
			return fenced(req.Version, 2)
		}
		err := s.endTxn(m, req.Commit, tv2, retry, &end)
		if err == nil && tv2 {
			resp.ProducerID, resp.ProducerEpoch = s.txns[m.id].producerAfterEnd()
		}
		return err
	})
	if err == nil && end != nil {
		// The outcome is written: the markers follow before we answer,
		// so that the producer's next transaction finds this one done
		// (on failure they are retried in the background).
		p.complete(ctx, *end)
	}
	resp.ErrorCode = plugin.ErrorCode(err)
	return resp
}

// endTxn ends m's transaction for an EndTxn whose producer is checked;
// *end is set when markers are to be written.
func (s *shardState) endTxn(m *txnMeta, commit, tv2, retry bool, end **ending) error {
	// A version 2 transaction may have only offsets in it (its client
	// skipped AddOffsetsToTxn): it is ongoing all the same.
	if m.state == stOngoing && !retry || tv2 && !retry && m.state != stPrepareCommit && m.state != stPrepareAbort &&
		len(s.openOffsetPartitions(m.pid)) > 0 {
		e, err := s.prepareEnd(m, commit, false, tv2)
		if err != nil {
			return err
		}
		*end = &e
		return nil
	}
	switch m.state {
	case stCompleteCommt:
		if commit && (retry || !tv2) {
			return nil // a retry of the commit that completed
		}
	case stCompleteAbort:
		if !commit && (retry || !tv2) {
			return nil
		}
	case stPrepareCommit:
		if commit {
			return kerr.ConcurrentTransactions
		}
	case stPrepareAbort:
		if !commit {
			return kerr.ConcurrentTransactions
		}
	}
	if tv2 && !retry && !commit && m.state != stOngoing {
		// Version 2 clients abort a transaction in which nothing was
		// written (every produce failed) to bump the epoch: there are
		// no markers to write.
		n := m.clone()
		if err := s.bumpEpoch(n); err != nil {
			return err
		}
		n.state, n.parts, n.startMs = stCompleteAbort, map[plugin.TopicPartition]bool{}, -1
		if n.nextPid >= 0 {
			n.pid, n.epoch, n.nextPid = n.nextPid, 0, -1
		}
		return s.put(n)
	}
	return fmt.Errorf("transactional id %s is %s: %w", m.id, stateName(m.state), kerr.InvalidTxnState)
}

func (p *Plugin) handleWriteTxnMarkers(ctx context.Context, rc *plugin.RequestContext, req *kmsg.WriteTxnMarkersRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	allowed := rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, plugin.ClusterResource)
	for _, rm := range req.Markers {
		out := kmsg.NewWriteTxnMarkersResponseMarker()
		out.ProducerID = rm.ProducerID
		m := engine.Marker{ProducerID: rm.ProducerID, ProducerEpoch: rm.ProducerEpoch, CoordinatorEpoch: rm.CoordinatorEpoch, Commit: rm.Committed}
		for _, rt := range rm.Topics {
			ot := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			ot.Topic = rt.Topic
			for _, part := range rt.Partitions {
				op := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				op.Partition = part
				if !allowed {
					op.ErrorCode = kerr.ClusterAuthorizationFailed.Code
				} else if img := p.Image(); img == nil || img.Topics[rt.Topic] == nil || int(part) >= len(img.Topics[rt.Topic].Partitions) || part < 0 {
					op.ErrorCode = kerr.UnknownTopicOrPartition.Code
				} else if err := plugin.CheckTopicChange(p.Host().Plugins(), plugin.TopicChange{Topic: rt.Topic, Op: plugin.OpTxnMarkers}); err != nil {
					op.ErrorCode = plugin.ErrorCode(err)
				} else {
					op.ErrorCode = plugin.ErrorCode(p.writeLocalMarker(ctx, plugin.TopicPartition{Topic: rt.Topic, Partition: part}, m))
				}
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		resp.Markers = append(resp.Markers, out)
	}
	return resp
}

func describeState(m *txnMeta) kmsg.DescribeTransactionsResponseTransactionState {
	st := kmsg.NewDescribeTransactionsResponseTransactionState()
	st.TransactionalID, st.State, st.TimeoutMillis = m.id, stateName(m.state), m.timeoutMs
	st.StartTimestamp, st.ProducerID, st.ProducerEpoch = m.startMs, m.pid, m.epoch
	for _, tp := range m.sortedParts() {
		if n := len(st.Topics); n == 0 || st.Topics[n-1].Topic != tp.Topic {
			t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			t.Topic = tp.Topic
			st.Topics = append(st.Topics, t)
		}
		t := &st.Topics[len(st.Topics)-1]
		t.Partitions = append(t.Partitions, tp.Partition)
	}
	return st
}

func (p *Plugin) handleDescribe(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DescribeTransactionsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.ProducerEpoch = id, -1, -1
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, id) {
			st.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		err := p.do(ctx, id, func(s *shardState) error {
			m := s.txns[id]
			if m == nil {
				return kerr.TransactionalIDNotFound
			}
			st = describeState(m)
			return nil
		})
		st.ErrorCode = plugin.ErrorCode(err)
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}

func (p *Plugin) handleList(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ListTransactionsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	states := map[string]bool{}
	for _, s := range req.StateFilters {
		known := false
		for st := stEmpty; st <= kmsg.TransactionStatePrepareEpochFence; st++ {
			known = known || stateName(st) == s
		}
		if !known {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, s)
			continue
		}
		states[s] = true
	}
	var pattern *regexp.Regexp
	if req.Version >= 2 && req.TransactionalIDPattern != nil && *req.TransactionalIDPattern != "" {
		var err error
		if pattern, err = regexp.Compile(*req.TransactionalIDPattern); err != nil {
			resp.ErrorCode = kerr.InvalidRegularExpression.Code
			return resp
		}
	}
	now := p.now().UnixMilli()
	for _, sh := range p.Runtime().Shards() {
		sh.Do(ctx, func(*coord.Shard) error {
			for _, m := range sh.State().(*shardState).txns {
				switch {
				case len(req.StateFilters) > 0 && !states[stateName(m.state)]:
				case len(req.ProducerIDFilters) > 0 && !slices.Contains(req.ProducerIDFilters, m.pid):
				case req.DurationFilterMillis >= 0 && req.Version >= 1 && (m.startMs < 0 || now-m.startMs < req.DurationFilterMillis):
				case pattern != nil && !pattern.MatchString(m.id):
				case !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, m.id):
				default:
					st := kmsg.NewListTransactionsResponseTransactionState()
					st.TransactionalID, st.ProducerID, st.TransactionState = m.id, m.pid, stateName(m.state)
					resp.TransactionStates = append(resp.TransactionStates, st)
				}
			}
			return nil
		})
	}
	slices.SortFunc(resp.TransactionStates, func(a, b kmsg.ListTransactionsResponseTransactionState) int {
		if a.TransactionalID < b.TransactionalID {
			return -1
		}
		if a.TransactionalID > b.TransactionalID {
			return 1
		}
		return 0
	})
	return resp
}
