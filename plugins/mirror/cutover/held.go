package cutover

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/cut"
)

// errNotYet is a partition whose high watermark is below its StopAt:
// what it holds up there is not all readable yet.
var errNotYet = errors.New("the log's end is not replicated yet")

// held reads what the cut needs of member m's batches from offset from
// (or its log start, if later) to end: from this broker's log when it
// leads the partition, else from its leader with Fetch.
func (s Stage) held(ctx context.Context, m member, from, end int64) (cut.Part, error) {
	t := s.Target.Image().Topics[m.Topic]
	if t == nil || int(m.Partition) >= len(t.Partitions) {
		return cut.Part{}, fmt.Errorf("%s-%d: %w", m.Topic, m.Partition, kerr.UnknownTopicOrPartition)
	}
	leader := t.Partitions[m.Partition].Leader
	if ep := s.Target.Led(leader, m.id, m.Partition); ep != nil {
		if ep.Offsets().HighWatermark < end {
			return cut.Part{}, errNotYet
		}
		return cut.Held(ep, from, end)
	}
	if leader < 0 {
		return cut.Part{}, fmt.Errorf("%s-%d has no leader: %w", m.Topic, m.Partition, kerr.LeaderNotAvailable)
	}
	p := cut.Part{End: end, FromLogStart: true}
	if end <= 0 {
		return p, nil
	}
	// The last batch first: the answer says where the log starts and
	// how far it is readable.
	_, fp, err := s.fetchBatches(ctx, leader, m, end-1)
	if errors.Is(err, kerr.OffsetOutOfRange) {
		return p, nil // nothing held below end
	}
	if err != nil {
		return cut.Part{}, err
	}
	if fp.HighWatermark < end {
		return cut.Part{}, errNotYet
	}
	from = max(from, fp.LogStartOffset)
	p.FromLogStart, p.Stable = from <= fp.LogStartOffset, fp.LastStableOffset
	err = p.Read(from, func(off int64) ([]cut.Batch, error) {
		bs, _, err := s.fetchBatches(ctx, leader, m, off)
		return bs, err
	})
	if err != nil {
		return cut.Part{}, err
	}
	return p, nil
}

// fetchBatches fetches m's batches from offset (read uncommitted, about
// cut.FetchBytes bytes) from its leader and reads their headers.
func (s Stage) fetchBatches(ctx context.Context, leader int32, m member, offset int64) ([]cut.Batch, kmsg.FetchResponseTopicPartition, error) {
	var none kmsg.FetchResponseTopicPartition
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes = -1, cut.FetchBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = m.Topic, m.id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = m.Partition, offset, cut.FetchBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := s.Store.Send(ctx, leader, req)
	if err != nil {
		return nil, none, err
	}
	fr := resp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(fr.ErrorCode); err != nil {
		return nil, none, fmt.Errorf("fetching %s-%d from broker %d: %w", m.Topic, m.Partition, leader, err)
	}
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		return nil, none, fmt.Errorf("fetching %s-%d from broker %d: an answer for other partitions", m.Topic, m.Partition, leader)
	}
	fp := fr.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
		return nil, fp, fmt.Errorf("fetching %s-%d at %d from broker %d: %w", m.Topic, m.Partition, offset, leader, err)
	}
	var out []cut.Batch
	for _, b := range engine.WholeBatches(fp.RecordBatches) {
		cb, err := cut.BatchOf(b)
		if err != nil {
			return nil, none, fmt.Errorf("fetching %s-%d at %d from broker %d: %w", m.Topic, m.Partition, offset, leader, err)
		}
		out = append(out, cb)
	}
	return out, fp, nil
}
