package share_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestShareACLs: the share APIs check Kafka's ACLs. READ on the group for
// the heartbeat, fetch and acknowledge, DESCRIBE on the subscribed topics
// for the heartbeat, READ on a topic to fetch it, CLUSTER_ACTION for the
// share-group state APIs.
func TestShareACLs(t *testing.T) {
	props := maps.Clone(testProps)
	maps.Copy(props, map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms": "PLAIN",
		"tandem.sasl.plain.users": "bob:bob-secret",
		"authorizer.class.name":   "StandardAuthorizer",
		"super.users":             "User:ANONYMOUS",
	})
	b := tandemtest.StartInProcess(t, props)
	admin := tandemtest.Client(t, b.Addr())
	tandemtest.CreateTopic(t, b.Addr(), "secret", 1)
	bob := tandemtest.Client(t, b.ListenerAddr("SASL_PLAINTEXT"), kgo.SASL(plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism()))
	ctx := context.Background()
	allow := func(acl *kadm.ACLBuilder) {
		t.Helper()
		res, err := kadm.NewClient(admin).CreateACLs(ctx, acl.ResourcePatternType(kadm.ACLPatternLiteral).Allow("User:bob"))
		if err != nil || res[0].Err != nil {
			t.Fatalf("create ACL: %v %+v", err, res)
		}
	}
	heartbeat := func(group string) *kmsg.ShareGroupHeartbeatResponse {
		t.Helper()
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.GroupID, req.MemberID, req.SubscribedTopicNames = group, "bob-1", []string{"secret"}
		resp, err := req.RequestWith(ctx, bob)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// Without any ACL on the group, even finding its coordinator fails.
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.SubscribedTopicNames = "g", "bob-1", []string{"secret"}
	if _, err := req.RequestWith(ctx, bob); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("heartbeat without READ on the group: %v", err)
	}
	allow(kadm.NewACLs().Groups("g").Operations(kadm.OpRead))
	if r := heartbeat("g"); r.ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("heartbeat without DESCRIBE on the topic: %d", r.ErrorCode)
	}
	allow(kadm.NewACLs().Topics("secret").Operations(kadm.OpDescribe))
	r := heartbeat("g")
	if r.ErrorCode != 0 || r.Assignment == nil {
		t.Fatalf("heartbeat with the ACLs: %+v", r)
	}
	s := &sharer{t: t, cl: bob, group: "g", id: "bob-1", topic: r.Assignment.TopicPartitions[0].TopicID}
	if resp, p := s.fetch(10); resp.ErrorCode != 0 || p.ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("fetch without READ on the topic: %d / %d", resp.ErrorCode, p.ErrorCode)
	}
	other := &sharer{t: t, cl: bob, group: "h", id: "bob-1", topic: s.topic}
	if resp, _ := other.fetch(10); resp.ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("fetch without READ on the group: %d", resp.ErrorCode)
	}
	read := kmsg.NewPtrReadShareGroupStateRequest()
	read.GroupID = "g"
	read.Topics = []kmsg.ReadShareGroupStateRequestTopic{{TopicID: s.topic, Partitions: []kmsg.ReadShareGroupStateRequestTopicPartition{{Partition: 0}}}}
	resp, err := read.RequestWith(ctx, bob)
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("ReadShareGroupState without CLUSTER_ACTION: %v %+v", err, resp)
	}
}
