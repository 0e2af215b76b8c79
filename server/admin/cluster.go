package admin

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// HandleDescribeCluster describes the registered brokers and the
// controller. Tandem's brokers are not separately addressable controllers,
// so a request for the controller endpoints is UNSUPPORTED_ENDPOINT_TYPE,
// as a Kafka broker answers.
func (a *Admin) HandleDescribeCluster(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DescribeClusterRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterName) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil
	}
	if req.Version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.ErrorMessage = cfgStr("The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
		return resp, nil
	}
	img := a.Image()
	resp.ClusterID, resp.ControllerID = img.ClusterID, img.ControllerID
	for _, br := range sortedBrokers(img) {
		// Kafka lists the brokers clients can use; v2 may ask for the
		// fenced ones too, marked (KIP-1073).
		if br.Fenced && !req.IncludeFencedBrokers {
			continue
		}
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.IsFenced = br.ID, br.Fenced
		rb.Host, rb.Port = EndpointFor(br, rc.Listener)
		if br.Rack != "" {
			rb.Rack = cfgStr(br.Rack)
		}
		resp.Brokers = append(resp.Brokers, rb)
	}
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = rc.AuthorizedOps(kmsg.ACLResourceTypeCluster, clusterName, ClusterOps...)
	}
	return resp, nil
}

// describeTopicPartitionsLimit is Kafka's max.request.partition.size.limit
// default: the most partitions one DescribeTopicPartitions answer holds.
const describeTopicPartitionsLimit = 2000

// HandleDescribeTopicPartitions (key 75, KIP-966) answers the partitions
// of the requested topics (all that the client may describe when none
// are named) in name order, from the cursor on, at most
// ResponsePartitionLimit of them, with NextCursor where the next answer
// starts. Tandem has no eligible leader replicas: ELR and LastKnownELR
// are empty.
func (a *Admin) HandleDescribeTopicPartitions(_ context.Context, rc *plugin.RequestContext, req *kmsg.DescribeTopicPartitionsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeTopicPartitionsResponse)
	img := a.Image()
	limit := int(req.ResponsePartitionLimit)
	if limit <= 0 || limit > describeTopicPartitionsLimit {
		limit = describeTopicPartitionsLimit
	}
	var names []string
	if len(req.Topics) == 0 {
		for _, t := range sortedTopics(img) {
			if rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Name) {
				names = append(names, t.Name)
			}
		}
	} else {
		for _, rt := range req.Topics {
			names = append(names, rt.Topic)
		}
		slices.Sort(names)
		names = slices.Compact(names)
	}
	var from string
	var fromPart int32
	if req.Cursor != nil {
		from, fromPart = req.Cursor.Topic, max(req.Cursor.Partition, 0)
	}
	left := limit
	for _, name := range names {
		if name < from {
			continue
		}
		rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
		rt.Topic = kmsg.StringPtr(name)
		rt.Partitions = []kmsg.DescribeTopicPartitionsResponseTopicPartition{}
		t := img.Topics[name]
		switch {
		case !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, name):
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case t == nil:
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		default:
			rt.TopicID, rt.IsInternal = t.ID, t.Internal
			rt.AuthorizedOperations = rc.AuthorizedOps(kmsg.ACLResourceTypeTopic, name, topicOps...)
			first := int32(0)
			if name == from {
				first = fromPart
			}
			for p := first; int(p) < len(t.Partitions); p++ {
				if left == 0 {
					resp.NextCursor = &kmsg.DescribeTopicPartitionsResponseNextCursor{Topic: name, Partition: p}
					break
				}
				part := t.Partitions[p]
				rp := kmsg.NewDescribeTopicPartitionsResponseTopicPartition()
				rp.Partition, rp.LeaderID, rp.LeaderEpoch = p, part.Leader, part.LeaderEpoch
				rp.Replicas, rp.ISR = part.Replicas, part.ISR
				rp.EligibleLeaderReplicas, rp.LastKnownELR = []int32{}, []int32{}
				rp.OfflineReplicas = offlineReplicas(img, part)
				if part.Leader == -1 {
					rp.ErrorCode = kerr.LeaderNotAvailable.Code
				}
				rt.Partitions = append(rt.Partitions, rp)
				left--
			}
		}
		resp.Topics = append(resp.Topics, rt)
		if resp.NextCursor != nil {
			break
		}
	}
	return resp, nil
}
