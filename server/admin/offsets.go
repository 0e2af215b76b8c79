package admin

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// ListOffsets special timestamps (KIP-734, KIP-1005, KIP-1023).
const (
	listLatest                = -1
	listEarliest              = -2
	listMaxTimestamp          = -3
	listEarliestLocal         = -4
	listLatestTiered          = -5
	listEarliestPendingUpload = -6
)

// checkLeaderEpoch compares a requester's current leader epoch with ours
// (KIP-320): older is fenced, newer means our metadata is behind; -1 skips
// the check.
func checkLeaderEpoch(requested int32, part metadata.Partition) *kerr.Error {
	switch {
	case requested < 0:
		return nil
	case requested < part.LeaderEpoch:
		return kerr.FencedLeaderEpoch
	case requested > part.LeaderEpoch:
		return kerr.UnknownLeaderEpoch
	}
	return nil
}

// HandleListOffsets answers offsets by timestamp and the special
// timestamps earliest, latest, max-timestamp and the tiered-storage ones.
//
// v0 (Kafka 3.x serves it, 4.0 dropped it; sarama sends it unless told
// the cluster is 0.10.1 or newer, as Burrow 1.2.1 does) answers a list
// of offsets, MaxNumOffsets at most. Kafka lists segment base offsets
// before the timestamp, newest first; Tandem answers the one offset a
// later version would (latest, earliest, or the first at the
// timestamp), which is what the clients that still send v0 ask for
// (MaxNumOffsets 1).
func (a *Admin) HandleListOffsets(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ListOffsetsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	img := a.Image()
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		t := img.Topics[rt.Topic]
		seen := map[int32]int{}
		for _, rp := range rt.Partitions {
			seen[rp.Partition]++
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			var kerrErr *kerr.Error
			if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, rt.Topic) {
				kerrErr = kerr.TopicAuthorizationFailed
			} else if seen[rp.Partition] > 1 && req.Version >= 2 {
				kerrErr = kerr.InvalidRequest
			} else {
				kerrErr = a.listOffset(req, t, &rp, &sp)
			}
			if kerrErr != nil {
				sp.ErrorCode = kerrErr.Code
				sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			}
			if req.Version == 0 && sp.Offset >= 0 && rp.MaxNumOffsets > 0 {
				sp.OldStyleOffsets = []int64{sp.Offset}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// listOffset answers one partition of a ListOffsets request into sp.
func (a *Admin) listOffset(req *kmsg.ListOffsetsRequest, t *metadata.Topic, rp *kmsg.ListOffsetsRequestTopicPartition, sp *kmsg.ListOffsetsResponseTopicPartition) *kerr.Error {
	ep, part, kerrErr := a.LedPartition(t, rp.Partition)
	if kerrErr != nil {
		return kerrErr
	}
	if kerrErr := checkLeaderEpoch(rp.CurrentLeaderEpoch, part); kerrErr != nil {
		return kerrErr
	}
	offs := ep.Offsets()
	// What a consumer may see: the high watermark, or the last stable
	// offset for read_committed. A follower (replica id >= 0) sees the
	// log end, as in Kafka.
	fetchable := offs.HighWatermark
	switch {
	case req.ReplicaID >= 0:
		fetchable = offs.LogEnd
	case req.IsolationLevel == 1:
		fetchable = offs.LastStable
	}
	switch rp.Timestamp {
	case listEarliest, listEarliestLocal:
		sp.Offset, sp.LeaderEpoch = offs.LogStart, ep.EpochAt(offs.LogStart)
	case listLatest:
		sp.Offset, sp.LeaderEpoch = fetchable, part.LeaderEpoch
	case listLatestTiered, listEarliestPendingUpload:
		// No tiered storage: nothing tiered and nothing pending upload.
	case listMaxTimestamp:
		if off, ts, epoch, ok := ep.MaxTimestamp(); ok && off < fetchable {
			sp.Offset, sp.Timestamp, sp.LeaderEpoch = off, ts, epoch
		}
	default:
		if off, ts, epoch, ok := ep.OffsetForTimestamp(rp.Timestamp); ok && off < fetchable {
			sp.Offset, sp.Timestamp, sp.LeaderEpoch = off, ts, epoch
		}
	}
	return nil
}

// HandleOffsetForLeaderEpoch answers, per partition, the end offset of the
// largest epoch <= the requested one (KIP-101/KIP-320), which followers
// and consumers use to detect log divergence after a leader change.
func (a *Admin) HandleOffsetForLeaderEpoch(ctx context.Context, rc *plugin.RequestContext, req *kmsg.OffsetForLeaderEpochRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	img := a.Image()
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		t := img.Topics[rt.Topic]
		// Followers need CLUSTER_ACTION (and only that, as in Kafka),
		// consumers DESCRIBE on the topic.
		var denied bool
		if req.ReplicaID >= 0 {
			denied = !rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, clusterName)
		} else {
			denied = !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, rt.Topic)
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, -1, -1
			ep, part, kerrErr := a.LedPartition(t, rp.Partition)
			if denied {
				kerrErr = kerr.TopicAuthorizationFailed
			}
			if kerrErr == nil {
				kerrErr = checkLeaderEpoch(rp.CurrentLeaderEpoch, part)
			}
			switch {
			case kerrErr != nil:
				sp.ErrorCode = kerrErr.Code
			case rp.LeaderEpoch > part.LeaderEpoch:
				// An epoch newer than any we know: undefined, as Kafka.
			case rp.LeaderEpoch == part.LeaderEpoch:
				sp.LeaderEpoch, sp.EndOffset = part.LeaderEpoch, ep.Offsets().LogEnd
			default:
				sp.LeaderEpoch, sp.EndOffset = ep.EndOffsetForEpoch(rp.LeaderEpoch)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// HandleDeleteRecords moves log start offsets forward.
func (a *Admin) HandleDeleteRecords(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DeleteRecordsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	img := a.Image()
	for _, rt := range req.Topics {
		st := kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		t := img.Topics[rt.Topic]
		for _, rp := range rt.Partitions {
			sp := kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition, sp.LowWatermark = rp.Partition, -1
			low, err := int64(-1), error(kerr.TopicAuthorizationFailed)
			if rc.Allowed(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, rt.Topic) {
				low, err = a.deleteRecords(t, rp.Partition, rp.Offset)
			}
			if err != nil {
				var kerrErr *kerr.Error
				if !errors.As(err, &kerrErr) {
					kerrErr = kerr.UnknownServerError
					a.Log.Error("delete records", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				}
				sp.ErrorCode = kerrErr.Code
			} else {
				sp.LowWatermark = low
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

func (a *Admin) deleteRecords(t *metadata.Topic, partition int32, offset int64) (int64, error) {
	ep, _, kerrErr := a.LedPartition(t, partition)
	if kerrErr != nil {
		return -1, kerrErr
	}
	if offset < -1 {
		return -1, kerr.OffsetOutOfRange
	}
	// Kafka refuses to delete records of a compact-only topic: compaction,
	// not deletion, governs what it keeps.
	if cfg := ep.Config(); cfg.Compact && !cfg.Delete {
		return -1, kerr.PolicyViolation
	}
	if err := plugin.CheckTopicChange(a.Plugins, plugin.TopicChange{Topic: t.Name, Op: plugin.OpDeleteRecords}); err != nil {
		return -1, err
	}
	return ep.DeleteRecords(offset)
}
