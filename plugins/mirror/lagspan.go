package mirror

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The lag in record time that every view shows (--describe's LAG-MS,
// --json's lag_ms, the console, tandem_mirror_lag_seconds, a forced
// failover's report) is the span of record time the records a failover
// now would give up cover: from the oldest of them to the source's
// newest record. The oldest record the destination lacks is the
// source's first record newer than the destination's newest (with
// timestamps in offset order, the record at the destination's end;
// testing/checker.Lost measures the same from what the source
// acknowledged, and the RPO campaign holds the two equal). Measured
// from the destination's newest record alone, a burst after a quiet gap
// read as the gap (1,000 records produced within a second after 110 s of
// quiet: "at least 110677 ms of data"), and a lone failover barrier
// after a failback as the minute before it.

// setLagSpans sets the lag in milliseconds of partitions behind their
// source whose newest source record time is newest[pt].
func (r *mirrorRun) setLagSpans(broker int32, newest map[*ledPartition]int64) {
	dstNewest := map[*ledPartition]int64{}
	for pt := range newest {
		ep, err := r.partition(pt)
		if err != nil {
			continue
		}
		_, dstTs, _, ok := ep.MaxTimestamp()
		if !ok {
			continue // an empty log keeps the previous value
		}
		dstNewest[pt] = dstTs
	}
	oldest := r.firstNewer(broker, dstNewest)
	r.mu.Lock()
	defer r.mu.Unlock()
	for pt, from := range dstNewest {
		if pt.srcEnd <= pt.dstLEO {
			continue // caught up meanwhile
		}
		if ts, ok := oldest[pt]; ok {
			from = max(from, ts)
		}
		pt.lagMs = max(1, newest[pt]-from)
	}
}

// firstNewer asks the source, per partition, for the time of its first
// record newer than after[pt] (ListOffsets by timestamp): the oldest
// record the destination lacks. A partition without one, or a source
// that does not answer, is left out (the span is then measured from
// after[pt], an upper bound).
func (r *mirrorRun) firstNewer(broker int32, after map[*ledPartition]int64) map[*ledPartition]int64 {
	out := map[*ledPartition]int64{}
	if len(after) == 0 {
		return out
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	idx := map[string]int{}
	for pt, ts := range after {
		i, ok := idx[pt.src] // the source's name (mirror.topic.prefix)
		if !ok {
			i = len(req.Topics)
			idx[pt.src] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = pt.src
			req.Topics = append(req.Topics, rt)
		}
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = pt.Partition, ts+1, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, lp)
	}
	resp, err := r.request(broker, req)
	if err != nil {
		return out // the fetches report the source's health
	}
	byKey := map[topicPartition]*ledPartition{} // by source name
	for pt := range after {
		byKey[topicPartition{Topic: pt.src, Partition: pt.Partition}] = pt
	}
	for _, rt := range resp.(*kmsg.ListOffsetsResponse).Topics {
		for _, rp := range rt.Partitions {
			if pt := byKey[topicPartition{Topic: rt.Topic, Partition: rp.Partition}]; pt != nil && rp.ErrorCode == 0 && rp.Offset >= 0 {
				out[pt] = rp.Timestamp
			}
		}
	}
	return out
}
