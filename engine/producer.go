package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
)

// maxProducerBatches is how many recent batches per producer are kept to
// answer retries (max.in.flight.requests.per.connection is at most 5 for
// idempotent producers).
const maxProducerBatches = 5

// seqBatch is one recent batch of an idempotent producer.
type seqBatch struct {
	FirstSeq, LastSeq       int32
	FirstOffset, LastOffset int64
}

// producerEntry is the idempotence state of one producer ID.
type producerEntry struct {
	Epoch            int16
	LastTimestamp    int64
	CoordinatorEpoch int32
	TxnStart         int64 // first offset of the open transaction, or -1
	Batches          []seqBatch
}

func (pe *producerEntry) clone() *producerEntry {
	c := *pe
	c.Batches = append([]seqBatch(nil), pe.Batches...)
	return &c
}

func (pe *producerEntry) encode() []byte {
	b := make([]byte, 0, 23+24*len(pe.Batches))
	b = binary.BigEndian.AppendUint16(b, uint16(pe.Epoch))
	b = binary.BigEndian.AppendUint64(b, uint64(pe.LastTimestamp))
	b = binary.BigEndian.AppendUint32(b, uint32(pe.CoordinatorEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(pe.TxnStart))
	b = append(b, byte(len(pe.Batches)))
	for _, s := range pe.Batches {
		b = binary.BigEndian.AppendUint32(b, uint32(s.FirstSeq))
		b = binary.BigEndian.AppendUint32(b, uint32(s.LastSeq))
		b = binary.BigEndian.AppendUint64(b, uint64(s.FirstOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(s.LastOffset))
	}
	return b
}

func decodeProducer(b []byte) (*producerEntry, error) {
	if len(b) < 23 || len(b) != 23+24*int(b[22]) {
		return nil, fmt.Errorf("producer state of %d bytes is malformed", len(b))
	}
	pe := &producerEntry{
		Epoch:            int16(binary.BigEndian.Uint16(b)),
		LastTimestamp:    int64(binary.BigEndian.Uint64(b[2:])),
		CoordinatorEpoch: int32(binary.BigEndian.Uint32(b[10:])),
		TxnStart:         int64(binary.BigEndian.Uint64(b[14:])),
	}
	for r := b[23:]; len(r) > 0; r = r[24:] {
		pe.Batches = append(pe.Batches, seqBatch{
			FirstSeq:    int32(binary.BigEndian.Uint32(r)),
			LastSeq:     int32(binary.BigEndian.Uint32(r[4:])),
			FirstOffset: int64(binary.BigEndian.Uint64(r[8:])),
			LastOffset:  int64(binary.BigEndian.Uint64(r[16:])),
		})
	}
	return pe, nil
}

// producerTxn is the producer-state change of one append: entries are
// copied on first touch so that a rejected append changes nothing.
type producerTxn struct {
	base    map[int64]*producerEntry
	changed map[int64]*producerEntry
	// reset is set by a producer-state barrier: base no longer counts.
	reset bool
}

func (t *producerTxn) get(pid int64) *producerEntry {
	if pe, ok := t.changed[pid]; ok {
		return pe
	}
	if t.reset {
		return nil
	}
	return t.base[pid]
}

// resetAll applies a producer-state barrier at offset: every producer is
// forgotten, and a transaction still open is aborted in the index (the
// barrier is its end), so that read_committed consumers skip it and the
// LSO moves past it.
func (t *producerTxn) resetAll(offset int64) []abortedTxn {
	open := map[int64]int64{}
	if !t.reset {
		for pid, pe := range t.base {
			if pe.TxnStart >= 0 {
				open[pid] = pe.TxnStart
			}
		}
	}
	for pid, pe := range t.changed {
		delete(open, pid)
		if pe.TxnStart >= 0 {
			open[pid] = pe.TxnStart
		}
	}
	aborted := make([]abortedTxn, 0, len(open))
	for pid, first := range open {
		aborted = append(aborted, abortedTxn{pid, first, offset})
	}
	sort.Slice(aborted, func(i, j int) bool { return aborted[i].First < aborted[j].First })
	t.reset, t.changed = true, nil
	return aborted
}

func inSequence(last, first int32) bool {
	return first == last+1 || (last == math.MaxInt32 && first == 0)
}

// check validates b against the producer's state. It returns the original
// batch when b is a retry of one of the last few batches.
func (t *producerTxn) check(b recordbatch.Batch, origin Origin) (*seqBatch, error) {
	pid, epoch := b.ProducerID(), b.ProducerEpoch()
	cur := t.get(pid)
	if cur != nil && (origin == OriginInternal || origin == OriginTxnMarker) && b.IsControl() && epoch < cur.Epoch {
		// A transaction marker from a coordinator that lost a fencing race.
		return nil, fmt.Errorf("marker for producer %d epoch %d is older than %d: %w", pid, epoch, cur.Epoch, kerr.InvalidProducerEpoch)
	}
	if cur == nil || origin != OriginClient {
		return nil, nil // unknown producers may start at any sequence (Kafka, KIP-360)
	}
	if epoch < cur.Epoch {
		return nil, fmt.Errorf("producer %d epoch %d is older than %d: %w", pid, epoch, cur.Epoch, kerr.InvalidProducerEpoch)
	}
	if b.BaseSequence() < 0 {
		return nil, nil
	}
	if epoch != cur.Epoch {
		if b.BaseSequence() != 0 {
			return nil, fmt.Errorf("producer %d new epoch %d starts at sequence %d, not 0: %w", pid, epoch, b.BaseSequence(), kerr.OutOfOrderSequenceNumber)
		}
		return nil, nil
	}
	for i := range cur.Batches {
		if s := &cur.Batches[i]; s.FirstSeq == b.BaseSequence() && s.LastSeq == b.LastSequence() {
			return s, nil
		}
	}
	last := int32(-1)
	if n := len(cur.Batches); n > 0 {
		last = cur.Batches[n-1].LastSeq
	}
	if !inSequence(last, b.BaseSequence()) {
		return nil, fmt.Errorf("producer %d epoch %d: sequence %d after %d: %w", pid, epoch, b.BaseSequence(), last, kerr.OutOfOrderSequenceNumber)
	}
	return nil, nil
}

// abortedTxn is an entry of the aborted-transaction index: producer PID's
// transaction spanned [First, Last], Last being its ABORT marker.
type abortedTxn struct {
	PID         int64
	First, Last int64
}

// Control record types (the key of a control batch's record: version
// int16, type int16). Kafka defines 0 ABORT, 1 COMMIT and 2-6 for
// KRaft's own log. ControlPIDReset is Tandem's producer-state barrier
// (MIRROR_PID_RESET): a control batch of this type, with producer id -1,
// makes every partition replica forget all producer state at its offset,
// so that producers of a new cluster start afresh after mirroring.
// Clients skip control batches of types they do not know.
const (
	ControlAbort    int16 = 0
	ControlCommit   int16 = 1
	ControlPIDReset int16 = 100
)

// controlRecord reads a control batch's marker: its type (-1 if
// unreadable) and, for transaction markers, the coordinator epoch in the
// value (version int16, coordinator epoch int32).
func controlRecord(b recordbatch.Batch) (typ int16, coordEpoch int32) {
	typ = -1
	recordbatch.Walk(b, 1<<20, func(r *recordbatch.Record) error {
		if len(r.Key) >= 4 && typ < 0 {
			typ = int16(binary.BigEndian.Uint16(r.Key[2:]))
		}
		return nil
	})
	if typ == ControlAbort || typ == ControlCommit {
		// recordbatch.Walk does not keep values: read the value of the single
		// uncompressed record directly (markers are never compressed).
		if rec := b.Records(); b.Codec() == 0 && len(rec) >= 6 {
			coordEpoch = int32(binary.BigEndian.Uint32(rec[len(rec)-5:]))
		}
	}
	return typ, coordEpoch
}

func controlType(b recordbatch.Batch) int16 {
	typ, _ := controlRecord(b)
	return typ
}

// update records b (already given its offsets) in the producer's state.
// For an ABORT marker closing an open transaction it returns the aborted
// transaction.
func (t *producerTxn) update(b recordbatch.Batch) (aborted *abortedTxn) {
	pid := b.ProducerID()
	pe := t.changed[pid]
	if pe == nil {
		if old := t.get(pid); old != nil {
			pe = old.clone()
		} else {
			pe = &producerEntry{Epoch: b.ProducerEpoch(), TxnStart: -1}
		}
		if t.changed == nil {
			t.changed = make(map[int64]*producerEntry)
		}
		t.changed[pid] = pe
	}
	if b.ProducerEpoch() != pe.Epoch {
		pe.Epoch, pe.Batches = b.ProducerEpoch(), nil
	}
	pe.LastTimestamp = b.MaxTimestamp()
	switch {
	case b.IsControl():
		typ, coordEpoch := controlRecord(b)
		if pe.TxnStart >= 0 && typ == ControlAbort {
			aborted = &abortedTxn{pid, pe.TxnStart, b.BaseOffset()}
		}
		if typ == ControlAbort || typ == ControlCommit {
			pe.CoordinatorEpoch = coordEpoch
		}
		pe.TxnStart = -1
	case b.IsTransactional() && pe.TxnStart < 0:
		pe.TxnStart = b.BaseOffset()
	}
	if b.BaseSequence() >= 0 && !b.IsControl() {
		pe.Batches = append(pe.Batches, seqBatch{b.BaseSequence(), b.LastSequence(), b.BaseOffset(), b.LastOffset()})
		if len(pe.Batches) > maxProducerBatches {
			pe.Batches = pe.Batches[len(pe.Batches)-maxProducerBatches:]
		}
	}
	return aborted
}
