package groups

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

func (p *Plugin) handleConsumerGroupHeartbeat(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ConsumerGroupHeartbeatRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(err error) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
		return resp
	}
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	if err := p.checkConsumerHeartbeat(req); err != nil {
		return fail(err)
	}
	if denied := deniedTopics(rc, req.SubscribedTopicNames); len(denied) > 0 {
		return fail(fmt.Errorf("not authorized to describe topics %v: %w", denied, kerr.TopicAuthorizationFailed))
	}
	a := &cgHeartbeat{group: req.Group, memberID: req.MemberID, epoch: req.MemberEpoch, instanceID: req.InstanceID,
		rackID: req.RackID, rebalanceMs: req.RebalanceTimeoutMillis, topics: req.SubscribedTopicNames,
		regex: req.SubscribedTopicRegex, assignor: req.ServerAssignor, clientID: rc.ClientID, clientHost: "/" + hostOf(rc.ClientAddr)}
	if req.MemberID == "" { // v0: the coordinator names new members
		a.memberID = uuid.Random().Base64()
	}
	if a.assignor != nil {
		name, _ := assignorName(*a.assignor)
		a.assignor = &name
	}
	if req.Topics != nil {
		a.owned = assignment{}
		for _, t := range req.Topics {
			for _, part := range t.Partitions {
				a.owned.add(t.TopicID, part)
			}
		}
	}
	var ans cgAnswer
	if err := p.do(ctx, req.Group, func(s *shardState) (err error) {
		ans, err = s.consumerHeartbeat(a)
		return err
	}); err != nil {
		return fail(err)
	}
	resp.MemberID, resp.MemberEpoch = &ans.memberID, ans.epoch
	resp.HeartbeatIntervalMillis = p.heartbeatInterval(req.Group, kindConsumer)
	if ans.assignment != nil {
		resp.Assignment = &kmsg.ConsumerGroupHeartbeatResponseAssignment{}
		for _, id := range ans.assignment.topicIDs() {
			resp.Assignment.Topics = append(resp.Assignment.Topics,
				kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{TopicID: id, Partitions: ans.assignment[id]})
		}
	}
	return resp
}

// checkConsumerHeartbeat validates a ConsumerGroupHeartbeat as Kafka
// does, with INVALID_REQUEST naming what is wrong.
func (p *Plugin) checkConsumerHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) error {
	invalid := func(msg string) error { return fmt.Errorf("%s: %w", msg, kerr.InvalidRequest) }
	switch {
	case req.Group == "":
		return invalid("GroupId can't be empty.")
	case req.InstanceID != nil && *req.InstanceID == "":
		return invalid("InstanceId can't be empty.")
	case req.RackID != nil && *req.RackID == "":
		return invalid("RackId can't be empty.")
	case req.Version >= 1 && req.MemberID == "":
		return invalid("MemberId can't be empty.")
	}
	switch e := req.MemberEpoch; {
	case e > 0 || e == leaveEpoch:
		if req.MemberID == "" {
			return invalid("MemberId can't be empty.")
		}
	case e == 0:
		switch {
		case req.RebalanceTimeoutMillis == -1:
			return invalid("RebalanceTimeoutMs must be provided in first request.")
		case req.Topics == nil || len(req.Topics) > 0:
			return invalid("TopicPartitions must be empty when (re-)joining.")
		case req.SubscribedTopicNames == nil && req.SubscribedTopicRegex == nil:
			return invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
		}
	case e == staticLeaveEpoch:
		if req.MemberID == "" || req.InstanceID == nil {
			return invalid("MemberId and InstanceId can't be empty when a static member leaves.")
		}
	default:
		return invalid("MemberEpoch is invalid.")
	}
	if req.ServerAssignor != nil {
		name, ok := assignorName(*req.ServerAssignor)
		if !ok || !slices.Contains(p.cfg.Assignors, name) {
			return fmt.Errorf("ServerAssignor %s is not supported, these are: %v: %w", *req.ServerAssignor, p.cfg.Assignors, kerr.UnsupportedAssignor)
		}
	}
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != "" {
		if _, err := regexp.Compile(*req.SubscribedTopicRegex); err != nil {
			return fmt.Errorf("SubscribedTopicRegex %q: %v: %w", *req.SubscribedTopicRegex, err, kerr.InvalidRegularExpression)
		}
	}
	return nil
}

// deniedTopics lists the topics the request may not describe.
func deniedTopics(rc *plugin.RequestContext, topics []string) []string {
	var denied []string
	for _, t := range topics {
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t) {
			denied = append(denied, t)
		}
	}
	return denied
}

func (p *Plugin) handleConsumerGroupDescribe(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ConsumerGroupDescribeRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	for _, name := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group, rg.AuthorizedOperations = name, -2147483648
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, name) {
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		err := p.do(ctx, name, func(s *shardState) error {
			g := s.groups[name]
			if g == nil || g.kind != kindConsumer {
				return fmt.Errorf("group %s is not a consumer group: %w", name, kerr.GroupIDNotFound)
			}
			img := p.Image()
			m := g.m
			rg.State, rg.Epoch, rg.AssignmentEpoch = g.modernState(), m.epoch, m.assignmentEpoch
			rg.AssignorName = preferredAssignor(m.sortedMembers(), p.cfg.Assignors[0])
			for _, mm := range m.sortedMembers() {
				dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				dm.MemberID, dm.InstanceID, dm.RackID, dm.MemberEpoch = mm.id, mm.instanceID, mm.rackID, mm.epoch
				dm.ClientID, dm.ClientHost, dm.SubscribedTopics, dm.SubscribedTopicRegex = mm.clientID, mm.clientHost, mm.topics, mm.regex
				if dm.SubscribedTopics == nil {
					dm.SubscribedTopics = []string{}
				}
				dm.Assignment, dm.TargetAssignment = kmsgAssignment(img, mm.assigned), kmsgAssignment(img, m.target[mm.id])
				dm.MemberType = 1 // the consumer protocol (0 would be classic)
				rg.Members = append(rg.Members, dm)
			}
			return nil
		})
		rg.ErrorCode, rg.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
		if req.IncludeAuthorizedOperations && err == nil {
			rg.AuthorizedOperations = rc.AuthorizedOps(kmsg.ACLResourceTypeGroup, name,
				kmsg.ACLOperationRead, kmsg.ACLOperationDescribe, kmsg.ACLOperationDelete, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// kmsgAssignment is an assignment as ConsumerGroupDescribe reports it,
// with topic names.
func kmsgAssignment(img *metadata.Image, a assignment) kmsg.Assignment {
	out := kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{}}
	for _, id := range a.topicIDs() {
		tp := kmsg.AssignmentTopicPartition{TopicID: id, Partitions: a[id]}
		if img != nil {
			if t := img.TopicsByID[id]; t != nil {
				tp.Topic = t.Name
			}
		}
		out.TopicPartitions = append(out.TopicPartitions, tp)
	}
	return out
}

// consumerAssignmentBytes is an assignment in the classic protocol's
// ConsumerMemberAssignment encoding (DescribeGroups of a consumer group).
func consumerAssignmentBytes(img *metadata.Image, a assignment) []byte {
	var ca kmsg.ConsumerMemberAssignment
	for _, id := range a.topicIDs() {
		if t := img.TopicsByID[id]; t != nil {
			ca.Topics = append(ca.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t.Name, Partitions: a[id]})
		}
	}
	return ca.AppendTo(nil)
}

// consumerMetadataBytes is a member's subscription in the classic
// protocol's ConsumerMemberMetadata encoding.
func consumerMetadataBytes(mm *mmember, regexes map[string]regexValue) []byte {
	md := kmsg.ConsumerMemberMetadata{Version: 0, Topics: slices.Clone(mm.topics)}
	if mm.regex != nil {
		md.Topics = append(md.Topics, regexes[*mm.regex].topics...)
	}
	if md.Topics == nil {
		md.Topics = []string{}
	}
	return md.AppendTo(nil)
}

// describeConsumerGroup fills a DescribeGroups answer for a consumer
// group as Kafka does: protocol type "consumer", the assignor as the
// protocol, subscriptions and assignments in the classic encodings.
func (p *Plugin) describeConsumerGroup(g *group, rg *kmsg.DescribeGroupsResponseGroup) {
	img := p.Image()
	m := g.m
	rg.State, rg.ProtocolType = g.modernState(), "consumer"
	rg.Protocol = preferredAssignor(m.sortedMembers(), p.cfg.Assignors[0])
	for _, mm := range m.sortedMembers() {
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.InstanceID, dm.ClientID, dm.ClientHost = mm.id, mm.instanceID, mm.clientID, mm.clientHost
		dm.ProtocolMetadata = consumerMetadataBytes(mm, m.regexes)
		if img != nil {
			dm.MemberAssignment = consumerAssignmentBytes(img, mm.assigned)
		}
		rg.Members = append(rg.Members, dm)
	}
}
