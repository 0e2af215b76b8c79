package integration

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The share APIs in TestACLMatrix, with the bindings Kafka's
// AuthorizerIntegrationTest gives them: READ (heartbeat, fetch,
// acknowledge, alter offsets), DESCRIBE (describe, describe offsets) or
// DELETE (delete offsets) on the group, with DESCRIBE or READ on the
// topic; CLUSTER_ACTION for the share-group state APIs. Entries marked
// each are refused without any one of their bindings.

const (
	mShare     = "m-share"     // a share group with members on m-topic
	mShareDel  = "m-share-del" // an empty share group with a start offset on m-topic
	mShareOff  = "m-share-off" // another
	mShareAlt  = "m-share-alt" // AlterShareGroupOffsets creates it
	mShareStat = "m-share-state"
)

// shareMatrixFixtures makes m-share-del and m-share-off as the super
// user (cl).
func shareMatrixFixtures(t *testing.T, cl *kgo.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, g := range []string{mShareDel, mShareOff} {
		req := kmsg.NewPtrAlterShareGroupOffsetsRequest()
		req.GroupID = g
		req.Topics = []kmsg.AlterShareGroupOffsetsRequestTopic{{Topic: mTopic, Partitions: []kmsg.AlterShareGroupOffsetsRequestTopicPartition{{Partition: 0, StartOffset: 0}}}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("fixture share group %s: %v %+v", g, err, resp)
		}
	}
}

// shareMatrix has the entries of the share APIs (keys 76-79, 83-87,
// 90-92). Some requests need the super user (cl) first: a member in
// m-share, so that ShareGroupDescribe has a topic to check; a share
// session, for ShareAcknowledge; a state, for WriteShareGroupState.
func shareMatrix(t *testing.T, cl *kgo.Client, topicID [16]byte, seq func() string) map[int16]matrixEntry {
	ctx := context.Background()
	admin := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("%s as the super user: %v", kmsg.NameForKey(req.Key()), err)
		}
		return resp
	}
	joinShare := func(member string) {
		t.Helper()
		hb := kmsg.NewPtrShareGroupHeartbeatRequest()
		hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = mShare, member, []string{mTopic}
		if r := admin(hb).(*kmsg.ShareGroupHeartbeatResponse); r.ErrorCode != 0 {
			t.Fatalf("join %s to %s: %+v", member, mShare, r)
		}
	}
	shareFetch := func(member string) *kmsg.ShareFetchRequest {
		r := kmsg.NewPtrShareFetchRequest()
		r.GroupID, r.MemberID, r.MaxBytes, r.MaxRecords, r.BatchSize = kmsg.StringPtr(mShare), kmsg.StringPtr(member), 1<<20, 10, 10
		r.Topics = []kmsg.ShareFetchRequestTopic{{TopicID: topicID, Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0, PartitionMaxBytes: 1 << 20}}}}
		return r
	}
	groupTopic := func(gop, top kmsg.ACLOperation, group string) []grant {
		return []grant{{kmsg.ACLResourceTypeGroup, group, gop}, topicG(top)}
	}
	read, describe := kmsg.ACLOperationRead, kmsg.ACLOperationDescribe
	state := []grant{clusterG(kmsg.ACLOperationClusterAction)}
	return map[int16]matrixEntry{
		76: {need: groupTopic(read, describe, mShare), each: true, req: func() kmsg.Request {
			r := kmsg.NewPtrShareGroupHeartbeatRequest()
			r.GroupID, r.MemberID, r.SubscribedTopicNames = mShare, "m-hb-"+seq(), []string{mTopic}
			return r
		}, code: func(r kmsg.Response) int16 { return r.(*kmsg.ShareGroupHeartbeatResponse).ErrorCode }},
		77: {need: groupTopic(describe, describe, mShare), each: true, req: func() kmsg.Request {
			joinShare("m-desc-" + seq()) // a member assigned m-topic
			r := kmsg.NewPtrShareGroupDescribeRequest()
			r.GroupIDs = []string{mShare}
			return r
		}, code: func(r kmsg.Response) int16 {
			g := r.(*kmsg.ShareGroupDescribeResponse).Groups[0]
			if g.ErrorCode == 0 && len(g.Members) == 0 {
				t.Errorf("ShareGroupDescribe of %s: no members", mShare)
			}
			return g.ErrorCode
		}},
		78: {need: groupTopic(read, read, mShare), each: true, req: func() kmsg.Request {
			return shareFetch("m-fetch-" + seq()) // epoch 0: a new session
		}, code: func(r kmsg.Response) int16 {
			fr := r.(*kmsg.ShareFetchResponse)
			if fr.ErrorCode != 0 || len(fr.Topics) == 0 {
				return fr.ErrorCode
			}
			return fr.Topics[0].Partitions[0].ErrorCode
		}},
		79: {need: groupTopic(read, read, mShare), each: true, req: func() kmsg.Request {
			member := "m-ack-" + seq()
			if fr := admin(shareFetch(member)).(*kmsg.ShareFetchResponse); fr.ErrorCode != 0 { // opens the session
				t.Fatalf("open a share session for %s: %+v", member, fr)
			}
			r := kmsg.NewPtrShareAcknowledgeRequest()
			r.GroupID, r.MemberID, r.ShareSessionEpoch = kmsg.StringPtr(mShare), kmsg.StringPtr(member), 1
			r.Topics = []kmsg.ShareAcknowledgeRequestTopic{{TopicID: topicID, Partitions: []kmsg.ShareAcknowledgeRequestTopicPartition{{Partition: 0}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			ar := r.(*kmsg.ShareAcknowledgeResponse)
			if ar.ErrorCode != 0 || len(ar.Topics) == 0 {
				return ar.ErrorCode
			}
			return ar.Topics[0].Partitions[0].ErrorCode
		}},
		83: {need: state, req: func() kmsg.Request {
			r := kmsg.NewPtrInitializeShareGroupStateRequest()
			r.GroupID = mShareStat
			r.Topics = []kmsg.InitializeShareGroupStateRequestTopic{{TopicID: topicID, Partitions: []kmsg.InitializeShareGroupStateRequestTopicPartition{{Partition: 0, StartOffset: 0}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.InitializeShareGroupStateResponse).Topics[0].Partitions[0].ErrorCode
		}},
		84: {need: state, req: func() kmsg.Request {
			r := kmsg.NewPtrReadShareGroupStateRequest()
			r.GroupID = mShareStat
			r.Topics = []kmsg.ReadShareGroupStateRequestTopic{{TopicID: topicID, Partitions: []kmsg.ReadShareGroupStateRequestTopicPartition{{Partition: 0}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.ReadShareGroupStateResponse).Topics[0].Partitions[0].ErrorCode
		}},
		85: {need: state, req: func() kmsg.Request {
			init := kmsg.NewPtrInitializeShareGroupStateRequest() // a state to write to
			init.GroupID = mShareStat + "-w-" + seq()             // a fresh state: epoch 0
			init.Topics = []kmsg.InitializeShareGroupStateRequestTopic{{TopicID: topicID, Partitions: []kmsg.InitializeShareGroupStateRequestTopicPartition{{Partition: 0, StartOffset: 0}}}}
			if ir := admin(init).(*kmsg.InitializeShareGroupStateResponse); ir.Topics[0].Partitions[0].ErrorCode != 0 {
				t.Fatalf("initialize a share state: %+v", ir)
			}
			r := kmsg.NewPtrWriteShareGroupStateRequest()
			r.GroupID = init.GroupID
			r.Topics = []kmsg.WriteShareGroupStateRequestTopic{{TopicID: topicID, Partitions: []kmsg.WriteShareGroupStateRequestTopicPartition{{Partition: 0, StartOffset: 1}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.WriteShareGroupStateResponse).Topics[0].Partitions[0].ErrorCode
		}},
		86: {need: state, req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteShareGroupStateRequest()
			r.GroupID = mShareStat + "-d"
			r.Topics = []kmsg.DeleteShareGroupStateRequestTopic{{TopicID: topicID, Partitions: []kmsg.DeleteShareGroupStateRequestTopicPartition{{Partition: 0}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.DeleteShareGroupStateResponse).Topics[0].Partitions[0].ErrorCode
		}},
		87: {need: state, req: func() kmsg.Request {
			r := kmsg.NewPtrReadShareGroupStateSummaryRequest()
			r.GroupID = mShareStat
			r.Topics = []kmsg.ReadShareGroupStateSummaryRequestTopic{{TopicID: topicID, Partitions: []kmsg.ReadShareGroupStateSummaryRequestTopicPartition{{Partition: 0}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			return r.(*kmsg.ReadShareGroupStateSummaryResponse).Topics[0].Partitions[0].ErrorCode
		}},
		90: {need: groupTopic(describe, describe, mShareOff), each: true, req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
			r.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: mShareOff,
				Topics: []kmsg.DescribeShareGroupOffsetsRequestGroupTopic{{Topic: mTopic, Partitions: []int32{0}}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			g := r.(*kmsg.DescribeShareGroupOffsetsResponse).Groups[0]
			if g.ErrorCode != 0 || len(g.Topics) == 0 {
				return g.ErrorCode
			}
			if p := g.Topics[0].Partitions[0]; p.ErrorCode == 0 && p.StartOffset != 0 {
				t.Errorf("DescribeShareGroupOffsets of %s: start offset %d, want 0", mShareOff, p.StartOffset)
			}
			return g.Topics[0].Partitions[0].ErrorCode
		}},
		91: {need: groupTopic(read, read, mShareAlt), each: true, req: func() kmsg.Request {
			r := kmsg.NewPtrAlterShareGroupOffsetsRequest()
			r.GroupID = mShareAlt
			r.Topics = []kmsg.AlterShareGroupOffsetsRequestTopic{{Topic: mTopic, Partitions: []kmsg.AlterShareGroupOffsetsRequestTopicPartition{{Partition: 0, StartOffset: 1}}}}
			return r
		}, code: func(r kmsg.Response) int16 {
			ar := r.(*kmsg.AlterShareGroupOffsetsResponse)
			if ar.ErrorCode != 0 || len(ar.Topics) == 0 {
				return ar.ErrorCode
			}
			return ar.Topics[0].Partitions[0].ErrorCode
		}},
		92: {need: groupTopic(kmsg.ACLOperationDelete, read, mShareDel), each: true, req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
			r.GroupID = mShareDel
			r.Topics = []kmsg.DeleteShareGroupOffsetsRequestTopic{{Topic: mTopic}}
			return r
		}, code: func(r kmsg.Response) int16 {
			dr := r.(*kmsg.DeleteShareGroupOffsetsResponse)
			if dr.ErrorCode != 0 || len(dr.Topics) == 0 {
				return dr.ErrorCode
			}
			return dr.Topics[0].ErrorCode
		}},
	}
}
