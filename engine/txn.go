package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// isBarrier reports whether b is a producer-state barrier (see
// ControlPIDReset).
func isBarrier(b recordbatch.Batch) bool {
	return b.IsControl() && b.ProducerID() < 0 && controlType(b) == ControlPIDReset
}

// controlBatch encodes a control batch of one record: key (version 0,
// typ), value (version 0, coordinator epoch) for transaction markers and
// no value for the barrier. Offsets are assigned by the append.
func controlBatch(pid int64, epoch int16, typ int16, coordEpoch int32, now time.Time) []byte {
	key := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0), uint16(typ))
	var value []byte
	if typ == ControlAbort || typ == ControlCommit {
		value = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, 0), uint32(coordEpoch))
	}
	r := kmsg.Record{Key: key, Value: value}
	rec := r.AppendTo(nil)
	r.Length = int32(len(rec) - 1) // a zero Length took one byte
	ts := now.UnixMilli()
	b := kmsg.RecordBatch{
		Magic:          2,
		Attributes:     recordbatch.AttrControl | recordbatch.AttrTransactional,
		FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: -1,
		NumRecords: 1,
		Records:    r.AppendTo(nil),
	}
	if typ == ControlPIDReset {
		b.Attributes = recordbatch.AttrControl // no transaction of its own
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[recordbatch.OffBatchLength:], uint32(len(out)-12))
	recordbatch.Batch(out).FixCRC()
	return out
}

// Marker is one transaction marker to write to a partition.
type Marker struct {
	ProducerID       int64
	ProducerEpoch    int16
	CoordinatorEpoch int32
	Commit           bool
}

// WriteTxnMarkers appends transaction markers (COMMIT or ABORT control
// batches) as the transaction coordinator does at the end of a
// transaction, in one durable append. A marker older than the producer's
// epoch in this partition fails with INVALID_PRODUCER_EPOCH; a newer one
// (an epoch bumped to fence a producer, or transaction.version 2's bump
// at every end) becomes the producer's epoch, which fences the old one.
// It returns the offset of the last marker.
func (p *Partition) WriteTxnMarkers(ctx context.Context, markers ...Marker) (int64, error) {
	return p.writeMarkers(ctx, OriginTxnMarker, markers)
}

func (p *Partition) writeMarkers(ctx context.Context, origin Origin, markers []Marker) (int64, error) {
	if len(markers) == 0 {
		return -1, nil
	}
	var recs []byte
	now := p.e.cfg.Now()
	for _, m := range markers {
		typ := ControlAbort
		if m.Commit {
			typ = ControlCommit
		}
		recs = append(recs, controlBatch(m.ProducerID, m.ProducerEpoch, typ, m.CoordinatorEpoch, now)...)
	}
	res, err := p.Append(ctx, &AppendRequest{Topic: p.topic, TopicID: p.id, Partition: p.part,
		Origin: origin, Records: recs, Acks: -1})
	if err != nil {
		return -1, fmt.Errorf("write transaction markers: %w", err)
	}
	return res.LastOffset, nil
}

// AbortOpenTransactions writes an ABORT marker for every transaction open
// in the partition, whoever appended its batches (a client, or a mirror
// fetcher copying a source cluster's log), with the producer's current
// epoch and coordinator epoch. The mirror plugin calls it when a mirrored
// partition fails over: the source's coordinator will never end those
// transactions here. It returns the producer ids aborted.
func (p *Partition) AbortOpenTransactions(ctx context.Context) ([]int64, error) {
	p.mu.Lock()
	var markers []Marker
	for pid, pe := range p.producers {
		if pe.TxnStart >= 0 {
			markers = append(markers, Marker{ProducerID: pid, ProducerEpoch: pe.Epoch, CoordinatorEpoch: pe.CoordinatorEpoch})
		}
	}
	p.mu.Unlock()
	sort.Slice(markers, func(i, j int) bool { return markers[i].ProducerID < markers[j].ProducerID })
	if _, err := p.writeMarkers(ctx, OriginPluginControl, markers); err != nil {
		return nil, fmt.Errorf("%s-%d: abort open transactions: %w", p.topic, p.part, err)
	}
	pids := make([]int64, len(markers))
	for i, m := range markers {
		pids[i] = m.ProducerID
	}
	return pids, nil
}

// WriteProducerBarrier appends a producer-state barrier (ControlPIDReset,
// the mirror plugin's MIRROR_PID_RESET) and returns its offset. From that
// offset on the partition knows no producer: idempotent producers of the
// new cluster may start at any sequence, and a transaction still open is
// treated as aborted (call AbortOpenTransactions first so that consumers
// also see its ABORT marker).
func (p *Partition) WriteProducerBarrier(ctx context.Context) (int64, error) {
	res, err := p.Append(ctx, &AppendRequest{Topic: p.topic, TopicID: p.id, Partition: p.part, Origin: OriginPluginControl,
		Records: controlBatch(-1, -1, ControlPIDReset, 0, p.e.cfg.Now()), Acks: -1})
	if err != nil {
		return -1, fmt.Errorf("%s-%d: write producer barrier: %w", p.topic, p.part, err)
	}
	return res.BaseOffset, nil
}

// OpenTxn reports whether producer pid has a transaction open in the
// partition, and the producer's epoch here.
func (p *Partition) OpenTxn(pid int64) (epoch int16, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pe := p.producers[pid]
	if pe == nil {
		return -1, false
	}
	return pe.Epoch, pe.TxnStart >= 0
}

// AbortedTxns returns the partition's aborted-transaction index: producer
// id, first offset and the offset of the ABORT marker (or barrier).
func (p *Partition) AbortedTxns() []AbortedRange {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]AbortedRange, len(p.aborted))
	for i, a := range p.aborted {
		out[i] = AbortedRange{ProducerID: a.PID, FirstOffset: a.First, LastOffset: a.Last}
	}
	return out
}

// AbortedRange is one aborted transaction of a partition.
type AbortedRange struct {
	ProducerID              int64
	FirstOffset, LastOffset int64
}
