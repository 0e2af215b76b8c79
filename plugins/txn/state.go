package txn

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Transaction states, Kafka's (kmsg.TransactionState numbers them as
// __transaction_state stores them).
const (
	stEmpty         = kmsg.TransactionStateEmpty
	stOngoing       = kmsg.TransactionStateOngoing
	stPrepareCommit = kmsg.TransactionStatePrepareCommit
	stPrepareAbort  = kmsg.TransactionStatePrepareAbort
	stCompleteCommt = kmsg.TransactionStateCompleteCommit
	stCompleteAbort = kmsg.TransactionStateCompleteAbort
	stDead          = kmsg.TransactionStateDead
)

// stateName is the state as DescribeTransactions and ListTransactions
// name it.
func stateName(s kmsg.TransactionState) string {
	names := [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}
	if int(s) < len(names) {
		return names[s]
	}
	return "Unknown"
}

// txnMeta is one transactional id's state, as a TxnMetadataValue stores it.
type txnMeta struct {
	id        string
	pid       int64
	epoch     int16
	timeoutMs int32
	state     kmsg.TransactionState
	parts     map[plugin.TopicPartition]bool
	startMs   int64 // start of the transaction, -1 when none
	updateMs  int64
	// tv is the transaction.version the client last used (2: KIP-890
	// part 2, every end bumps the epoch). nextPid is the producer id the
	// producer moves to when its epoch is exhausted by a bump, -1 if none.
	tv      int16
	nextPid int64
}

// endedWith reports whether m is what a transaction.version 2 EndTxn
// with epoch left behind: the transaction ending or ended, the epoch one
// above. Its producer may not have read the answer (the coordinator
// stopped, the connection broke) and sends the same request again. As in
// Kafka, the retry is recognized from the stored state alone, so that it
// is still recognized after the coordinator restarted or moved; fencing
// the producer there instead would be fatal to it. A fence bumps the
// epoch twice (prepareEnd), so that a fenced producer's EndTxn is never
// taken for a retry.
func (m *txnMeta) endedWith(epoch int16) bool {
	switch m.state {
	case stPrepareCommit, stPrepareAbort, stCompleteCommt, stCompleteAbort:
		return m.tv >= 2 && int32(epoch)+1 == int32(m.epoch)
	}
	return false
}

func (m *txnMeta) clone() *txnMeta {
	c := *m
	c.parts = maps.Clone(m.parts)
	if c.parts == nil {
		c.parts = map[plugin.TopicPartition]bool{}
	}
	return &c
}

func (m *txnMeta) sortedParts() []plugin.TopicPartition {
	return slices.SortedFunc(maps.Keys(m.parts), func(a, b plugin.TopicPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
}

// Records of __transaction_state, in Apache Kafka's formats:
// TxnMetadataKey v0 (transactional id) → TxnMetadataValue v0.
func txnKey(id string) []byte {
	k := kmsg.TxnMetadataKey{Version: 0, TransactionalID: id}
	return k.AppendTo(nil)
}

// Transactions of transaction.version 2 are stored as TxnMetadataValue v1,
// whose tagged fields carry it and the next producer id, as Kafka 4 does.
func txnValue(m *txnMeta) []byte {
	v := kmsg.NewTxnMetadataValue()
	v.ProducerID, v.ProducerEpoch, v.TimeoutMillis = m.pid, m.epoch, m.timeoutMs
	v.State, v.LastUpdateTimestamp, v.StartTimestamp = m.state, m.updateMs, m.startMs
	if m.tv >= 2 {
		v.Version, v.ClientTransactionVersion = 1, m.tv
		if m.nextPid >= 0 {
			v.NextProducerID, v.NextProducerEpoch = m.nextPid, 0
		}
	}
	var cur *kmsg.TxnMetadataValueTopic
	for _, tp := range m.sortedParts() {
		if cur == nil || cur.Topic != tp.Topic {
			v.Topics = append(v.Topics, kmsg.TxnMetadataValueTopic{Topic: tp.Topic})
			cur = &v.Topics[len(v.Topics)-1]
		}
		cur.Partitions = append(cur.Partitions, tp.Partition)
	}
	return v.AppendTo(nil)
}

func decodeTxn(key, value []byte) (*txnMeta, string, error) {
	if len(key) < 2 || binary.BigEndian.Uint16(key) != 0 {
		return nil, "", fmt.Errorf("unknown key of %d bytes", len(key))
	}
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(key); err != nil {
		return nil, "", fmt.Errorf("transaction key: %w", err)
	}
	if value == nil {
		return nil, k.TransactionalID, nil
	}
	var v kmsg.TxnMetadataValue
	if err := v.ReadFrom(value); err != nil {
		return nil, "", fmt.Errorf("transaction %s value: %w", k.TransactionalID, err)
	}
	m := &txnMeta{id: k.TransactionalID, pid: v.ProducerID, epoch: v.ProducerEpoch, timeoutMs: v.TimeoutMillis,
		state: v.State, parts: map[plugin.TopicPartition]bool{}, startMs: v.StartTimestamp, updateMs: v.LastUpdateTimestamp,
		tv: v.ClientTransactionVersion, nextPid: v.NextProducerID}
	for _, t := range v.Topics {
		for _, p := range t.Partitions {
			m.parts[plugin.TopicPartition{Topic: t.Topic, Partition: p}] = true
		}
	}
	return m, k.TransactionalID, nil
}

// shardState is one partition of __transaction_state: the transactional
// ids hashed to it. The coordinator runtime serialises every call.
type shardState struct {
	p    *Plugin
	sh   *coord.Shard // set by Loaded
	txns map[string]*txnMeta
}

// Replay implements coord.StateMachine.
func (s *shardState) Replay(key, value []byte) error {
	m, id, err := decodeTxn(key, value)
	if err != nil {
		s.p.log.Warn("skipping undecodable record of "+Topic, "err", err)
		return nil
	}
	if m == nil {
		delete(s.txns, id)
		return nil
	}
	s.txns[id] = m
	return nil
}

// Loaded implements coord.StateMachine: transactions that were being
// completed when the previous coordinator stopped are completed now (the
// outcome was decided: only markers and the final record may be missing),
// and the expiry pass starts.
func (s *shardState) Loaded(sh *coord.Shard) {
	s.sh = sh
	for _, m := range s.txns {
		if m.state == stPrepareCommit || m.state == stPrepareAbort {
			s.p.completeLater(s.endOf(m), 0)
		}
	}
	var expire func()
	expire = func() {
		s.abortExpired()
		sh.AfterFunc(s.p.cfg.AbortInterval, expire)
	}
	sh.AfterFunc(s.p.cfg.AbortInterval, expire)
}

// Unloaded implements coord.StateMachine. Nothing waits on the state.
func (s *shardState) Unloaded() { s.txns = nil }

// put writes m's record, then makes it the state.
func (s *shardState) put(m *txnMeta) error {
	m.updateMs = s.p.now().UnixMilli()
	if err := s.sh.Write(s.sh.Context(), coord.Record{Key: txnKey(m.id), Value: txnValue(m)}); err != nil {
		return err
	}
	s.txns[m.id] = m
	return nil
}

// ending is a transaction whose outcome is written (PrepareCommit or
// PrepareAbort) and whose markers are to be written.
type ending struct {
	id         string
	pid        int64
	epoch      int16
	coordEpoch int32
	commit     bool
	parts      []plugin.TopicPartition
	attempts   int // at writing its markers, so far
}

// ending reports whether m is still being ended as e says (m may be nil).
func (m *txnMeta) ending(e ending) bool {
	want := stPrepareAbort
	if e.commit {
		want = stPrepareCommit
	}
	return m != nil && m.pid == e.pid && m.epoch == e.epoch && m.state == want
}

func (s *shardState) endOf(m *txnMeta) ending {
	return ending{id: m.id, pid: m.pid, epoch: m.epoch, coordEpoch: s.sh.Epoch(), commit: m.state == stPrepareCommit, parts: m.sortedParts()}
}

// prepareEnd moves an ongoing transaction to PrepareCommit or
// PrepareAbort; fence bumps the epoch first, so that the producer that
// ran the transaction is fenced (a timed-out transaction, or a new
// producer taking the transactional id over). bump is transaction.version
// 2's epoch bump at the end of every transaction (KIP-890 part 2): the
// markers carry the new epoch and the producer goes on with it. A fenced
// version 2 transaction gets both bumps, as in Kafka (the fence, then the
// end's): one alone would make the fenced producer's EndTxn look like a
// retry of its own end (see endedWith).
func (s *shardState) prepareEnd(m *txnMeta, commit, fence, bump bool) (ending, error) {
	n := m.clone()
	n.state = stPrepareAbort
	if commit {
		n.state = stPrepareCommit
	}
	if fence && n.epoch < maxEpoch {
		n.epoch++
	}
	if bump || fence && n.tv >= 2 {
		if err := s.bumpEpoch(n); err != nil {
			return ending{}, err
		}
	}
	for _, tp := range s.openOffsetPartitions(n.pid) {
		n.parts[tp] = true
	}
	if err := s.put(n); err != nil {
		return ending{}, err
	}
	return s.endOf(n), nil
}

// bumpEpoch is KIP-890 part 2's epoch bump at the end of a transaction.
// An exhausted epoch moves the producer to a new producer id once the
// transaction completes (the markers still carry the old id).
func (s *shardState) bumpEpoch(n *txnMeta) error {
	n.tv = 2
	n.epoch++
	if n.epoch >= maxEpoch && n.nextPid < 0 {
		pid, err := s.p.producerID(s.sh.Context())
		if err != nil {
			return err
		}
		n.nextPid = pid
	}
	return nil
}

// producerAfterEnd is the producer id and epoch a transaction.version 2
// producer goes on with once its transaction is complete.
func (m *txnMeta) producerAfterEnd() (int64, int16) {
	if m.nextPid >= 0 {
		return m.nextPid, 0
	}
	return m.pid, m.epoch
}

// openOffsetPartitions lists the partitions, led here, of the plugins
// keeping transactional records (plugin.TxnMarkerWriter: the groups
// plugin's offsets topic) in which producer pid has a transaction
// open. Clients of transaction.version 2 skip AddOffsetsToTxn and send
// TxnOffsetCommit v5, whose handler (the groups plugin) is to add the
// partition itself (plugin.TxnPartitionAdder); ending a transaction adds
// these too, so that its offsets get their marker even where the handler
// does not.
func (s *shardState) openOffsetPartitions(pid int64) []plugin.TopicPartition {
	h := s.p.Host()
	if h == nil {
		return nil
	}
	var out []plugin.TopicPartition
	for _, w := range plugin.All[plugin.TxnMarkerWriter](h.Plugins()) {
		out = append(out, w.OpenTxnPartitions(pid)...)
	}
	return out
}

// abortExpired aborts the transactions open longer than their timeout
// (transaction.abort.timed.out.transaction.cleanup.interval.ms runs it).
func (s *shardState) abortExpired() {
	now := s.p.now().UnixMilli()
	for _, m := range s.txns {
		if m.state != stOngoing || m.startMs+int64(m.timeoutMs) > now {
			continue
		}
		e, err := s.prepareEnd(m, false, true, false)
		if err != nil {
			s.p.log.Warn("aborting timed-out transaction", "transactional_id", m.id, "err", err)
			continue
		}
		s.p.log.Info("aborting timed-out transaction", "transactional_id", m.id, "producer_id", m.pid, "timeout_ms", m.timeoutMs)
		s.p.completeLater(e, 0)
	}
}
