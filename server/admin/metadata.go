package admin

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// HandleMetadata answers from the applied image. Missing topics are
// auto-created when the request and the broker allow it.
func (a *Admin) HandleMetadata(ctx context.Context, rc *plugin.RequestContext, req *kmsg.MetadataRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	img := a.Image()

	// v0 has no null topics: an empty list means all of them.
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	createDenied := map[string]bool{}
	if !all {
		// Auto-create what is missing, then answer from the new image.
		img, createDenied = a.autoCreateTopics(ctx, rc, req, img)
	}

	resp.Brokers = metadataBrokers(img, rc)
	resp.ClusterID = &img.ClusterID
	resp.ControllerID = img.ControllerID
	if req.Version >= 8 && req.Version <= 10 && req.IncludeClusterAuthorizedOperations {
		resp.AuthorizedOperations = rc.AuthorizedOps(kmsg.ACLResourceTypeCluster, clusterName, ClusterOps...)
	}

	addTopic := func(t *metadata.Topic) {
		resp.Topics = append(resp.Topics, metadataTopic(img, rc, req, t))
	}
	topicErr := func(name *string, id [16]byte, err *kerr.Error) {
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic, rt.TopicID, rt.ErrorCode = name, id, err.Code
		rt.Partitions = []kmsg.MetadataResponseTopicPartition{}
		resp.Topics = append(resp.Topics, rt)
	}

	if all {
		// Listing all topics hides those the client may not describe.
		for _, t := range sortedTopics(img) {
			if rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Name) {
				addTopic(t)
			}
		}
		return resp, nil
	}
	for _, rt := range req.Topics {
		switch {
		case rt.Topic == nil && rt.TopicID != [16]byte{}:
			// An unauthorized ID is answered as unknown, not to leak it.
			if t := img.TopicsByID[rt.TopicID]; t != nil && rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Name) {
				addTopic(t)
			} else {
				topicErr(nil, rt.TopicID, kerr.UnknownTopicID)
			}
		case rt.Topic == nil:
			topicErr(nil, rt.TopicID, kerr.InvalidTopicException)
		case !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, *rt.Topic) || createDenied[*rt.Topic]:
			topicErr(rt.Topic, [16]byte{}, kerr.TopicAuthorizationFailed)
		case raftmeta.ValidTopicName(*rt.Topic) != nil:
			topicErr(rt.Topic, [16]byte{}, kerr.InvalidTopicException)
		case img.Topics[*rt.Topic] != nil:
			addTopic(img.Topics[*rt.Topic])
		default:
			topicErr(rt.Topic, [16]byte{}, kerr.UnknownTopicOrPartition)
		}
	}
	return resp, nil
}

// autoCreateTopics creates the topics a Metadata request names that are
// missing, when the request and the broker allow it, and returns the image
// to answer from (the new one if it created any) and the topics it was
// not allowed to create.
func (a *Admin) autoCreateTopics(ctx context.Context, rc *plugin.RequestContext, req *kmsg.MetadataRequest, img *metadata.Image) (*metadata.Image, map[string]bool) {
	createDenied := map[string]bool{}
	allow := a.AutoCreateTopics && (req.Version < 4 || req.AllowAutoTopicCreation)
	clusterCreate := allow && rc.Allowed(kmsg.ACLOperationCreate, kmsg.ACLResourceTypeCluster, clusterName)
	var create []string
	for _, rt := range req.Topics {
		if rt.Topic != nil && img.Topics[*rt.Topic] == nil && allow && raftmeta.ValidTopicName(*rt.Topic) == nil &&
			rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, *rt.Topic) {
			// Auto-creation needs CREATE on the cluster or the topic.
			if clusterCreate || rc.Allowed(kmsg.ACLOperationCreate, kmsg.ACLResourceTypeTopic, *rt.Topic) {
				create = append(create, *rt.Topic)
			} else {
				createDenied[*rt.Topic] = true
			}
		}
	}
	if len(create) > 0 {
		a.CreateTopicsAuto(ctx, create)
		img = a.Image()
	}
	return img, createDenied
}

// metadataBrokers lists the brokers clients can use (Kafka leaves out the
// fenced ones), by ID, with their endpoint on the request's listener.
func metadataBrokers(img *metadata.Image, rc *plugin.RequestContext) []kmsg.MetadataResponseBroker {
	var out []kmsg.MetadataResponseBroker
	for _, br := range sortedBrokers(img) {
		if br.Fenced {
			continue
		}
		rb := kmsg.NewMetadataResponseBroker()
		rb.NodeID = br.ID
		rb.Host, rb.Port = EndpointFor(br, rc.Listener)
		if br.Rack != "" {
			rb.Rack = &br.Rack
		}
		out = append(out, rb)
	}
	return out
}

// metadataTopic is topic t as a Metadata response lists it, with its
// partitions.
func metadataTopic(img *metadata.Image, rc *plugin.RequestContext, req *kmsg.MetadataRequest, t *metadata.Topic) kmsg.MetadataResponseTopic {
	rt := kmsg.NewMetadataResponseTopic()
	rt.Topic, rt.TopicID, rt.IsInternal = &t.Name, t.ID, t.Internal
	if req.IncludeTopicAuthorizedOperations {
		rt.AuthorizedOperations = rc.AuthorizedOps(kmsg.ACLResourceTypeTopic, t.Name, topicOps...)
	}
	for p, part := range t.Partitions {
		rp := kmsg.NewMetadataResponseTopicPartition()
		rp.Partition = int32(p)
		rp.Leader, rp.LeaderEpoch = part.Leader, part.LeaderEpoch
		rp.Replicas, rp.ISR = part.Replicas, part.ISR
		rp.OfflineReplicas = []int32{}
		rp.OfflineReplicas = offlineReplicas(img, part)
		if part.Leader == -1 {
			rp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	return rt
}

func sortedBrokers(img *metadata.Image) []metadata.Broker {
	out := make([]metadata.Broker, 0, len(img.Brokers))
	for _, br := range img.Brokers {
		out = append(out, br)
	}
	slices.SortFunc(out, func(a, b metadata.Broker) int { return int(a.ID) - int(b.ID) })
	return out
}

func sortedTopics(img *metadata.Image) []*metadata.Topic {
	out := make([]*metadata.Topic, 0, len(img.Topics))
	for _, t := range img.Topics {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *metadata.Topic) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// offlineReplicas are the replicas of part whose broker is fenced or not
// registered.
func offlineReplicas(img *metadata.Image, part metadata.Partition) []int32 {
	out := []int32{}
	for _, r := range part.Replicas {
		if br, ok := img.Brokers[r]; !ok || br.Fenced {
			out = append(out, r)
		}
	}
	return out
}

// EndpointFor returns where a client connected to the named listener
// reaches br: the same listener's advertised address, as Kafka answers
// Metadata, else br's registered one.
func EndpointFor(br metadata.Broker, listener string) (string, int32) {
	for _, e := range strings.Split(br.Endpoints, ",") {
		name, hp, ok := strings.Cut(e, "://")
		if !ok || name != listener {
			continue
		}
		h, p, err := net.SplitHostPort(hp)
		if port, err2 := strconv.Atoi(p); err == nil && err2 == nil {
			return h, int32(port)
		}
	}
	return br.Host, br.Port
}
