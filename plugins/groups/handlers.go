package groups

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Authorization: each handler checks, in one place at its top, the ACL
// operations Apache Kafka checks for it (rc.Allowed; everything is allowed
// until the security plugin installs an authorizer).

func (p *Plugin) handleJoin(ctx context.Context, rc *plugin.RequestContext, req *kmsg.JoinGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation, resp.MemberID = -1, req.MemberID
	fail := func(err error) kmsg.Response {
		resp.ErrorCode = plugin.ErrorCode(err)
		return resp
	}
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	if req.Group == "" {
		return fail(kerr.InvalidGroupID)
	}
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	if session < p.cfg.MinSession || session > p.cfg.MaxSession {
		return fail(kerr.InvalidSessionTimeout)
	}
	a := joinArgs{version: req.Version, group: req.Group, memberID: req.MemberID, instanceID: req.InstanceID,
		clientID: rc.ClientID, clientHost: "/" + hostOf(rc.ClientAddr), sessionMs: req.SessionTimeoutMillis,
		rebalanceMs: req.RebalanceTimeoutMillis, protocolType: req.ProtocolType}
	if req.Version == 0 {
		a.rebalanceMs = req.SessionTimeoutMillis
	}
	for _, pr := range req.Protocols {
		a.protocols = append(a.protocols, protocol{pr.Name, pr.Metadata})
	}
	var ch chan joinResult
	if err := p.do(ctx, req.Group, func(s *shardState) (err error) {
		ch, err = s.join(a)
		return err
	}); err != nil {
		return fail(err)
	}
	var r joinResult
	select {
	case r = <-ch:
	case <-ctx.Done():
		p.forget(req.Group, func(m *member) bool { return m.join == ch }, func(m *member) { m.join = nil })
		return fail(kerr.RebalanceInProgress) // the client is gone; nothing is sent
	}
	resp.MemberID = r.memberID
	if r.err != nil {
		return fail(r.err)
	}
	resp.Generation, resp.LeaderID, resp.Members = r.generation, r.leader, r.members
	resp.Protocol = &r.protocol
	if req.Version >= 7 {
		resp.ProtocolType = &req.ProtocolType
	}
	return resp
}

// forget clears what a member whose client went away was waiting for.
func (p *Plugin) forget(group string, match func(*member) bool, clear func(*member)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.do(ctx, group, func(s *shardState) error {
		if g := s.groups[group]; g != nil {
			for _, m := range g.members {
				if match(m) {
					clear(m)
				}
			}
		}
		return nil
	})
}

func hostOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return strings.Trim(addr[:i], "[]")
	}
	return addr
}

func (p *Plugin) handleSync(ctx context.Context, rc *plugin.RequestContext, req *kmsg.SyncGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	fail := func(err error) kmsg.Response {
		resp.ErrorCode = plugin.ErrorCode(err)
		return resp
	}
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	if req.Group == "" {
		return fail(kerr.InvalidGroupID)
	}
	a := syncArgs{group: req.Group, memberID: req.MemberID, instanceID: req.InstanceID, generation: req.Generation,
		protocolType: req.ProtocolType, protocol: req.Protocol, assignments: map[string][]byte{}}
	for _, as := range req.GroupAssignment {
		a.assignments[as.MemberID] = as.MemberAssignment
	}
	var ch chan syncResult
	var ptype, proto string
	if err := p.do(ctx, req.Group, func(s *shardState) (err error) {
		ch, err = s.sync(a)
		if g := s.groups[req.Group]; g != nil {
			ptype, proto = g.protocolType, g.protocol
		}
		return err
	}); err != nil {
		return fail(err)
	}
	var r syncResult
	select {
	case r = <-ch:
	case <-ctx.Done():
		p.forget(req.Group, func(m *member) bool { return m.sync == ch }, func(m *member) { m.sync = nil })
		return fail(kerr.RebalanceInProgress)
	}
	if r.err != nil {
		return fail(r.err)
	}
	resp.MemberAssignment = r.assignment
	if req.Version >= 5 {
		resp.ProtocolType, resp.Protocol = &ptype, &proto
	}
	return resp
}

func (p *Plugin) handleHeartbeat(ctx context.Context, rc *plugin.RequestContext, req *kmsg.HeartbeatRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	resp.ErrorCode = plugin.ErrorCode(p.do(ctx, req.Group, func(s *shardState) error {
		return s.heartbeatReq(req.Group, req.MemberID, req.InstanceID, req.Generation)
	}))
	return resp
}

func (p *Plugin) handleLeave(ctx context.Context, rc *plugin.RequestContext, req *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	members := req.Members
	if req.Version < 3 {
		members = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	errs := make([]error, len(members))
	err := p.do(ctx, req.Group, func(s *shardState) error {
		for i, m := range members {
			errs[i] = s.leave(req.Group, m.MemberID, m.InstanceID)
		}
		return nil
	})
	if err != nil {
		resp.ErrorCode = plugin.ErrorCode(err)
		return resp
	}
	if req.Version < 3 {
		resp.ErrorCode = plugin.ErrorCode(errs[0])
		return resp
	}
	for i, m := range members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = m.MemberID, m.InstanceID, plugin.ErrorCode(errs[i])
		resp.Members = append(resp.Members, rm)
	}
	return resp
}

func (p *Plugin) topicExists(topic string, partition int32) bool {
	img := p.Image()
	if img == nil {
		return false
	}
	t := img.Topics[topic]
	return t != nil && partition >= 0 && int(partition) < len(t.Partitions)
}

func (p *Plugin) handleOffsetCommit(ctx context.Context, rc *plugin.RequestContext, req *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	codes := map[tp]int16{}
	commits := map[tp]offset{}
	groupAllowed := rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group)
	nowMs := p.now().UnixMilli()
	for _, t := range req.Topics {
		topicAllowed := rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic)
		for _, pt := range t.Partitions {
			k := tp{t.Topic, pt.Partition}
			switch {
			case !groupAllowed:
				codes[k] = kerr.GroupAuthorizationFailed.Code
			case req.Group == "":
				codes[k] = kerr.InvalidGroupID.Code
			case !topicAllowed:
				codes[k] = kerr.TopicAuthorizationFailed.Code
			default:
				epoch := int32(-1)
				if req.Version >= 6 {
					epoch = pt.LeaderEpoch
				}
				p.checkCommit(k, pt.Offset, epoch, pt.Metadata, nowMs, codes, commits)
			}
		}
	}
	if len(commits) > 0 {
		gen := req.Generation
		if req.Version == 0 {
			gen = -1
		}
		c := plugin.ErrorCode(p.do(ctx, req.Group, func(s *shardState) error {
			return s.commitOffsets(req.Group, req.MemberID, req.InstanceID, gen, commits)
		}))
		for k := range commits {
			codes[k] = c
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, pt := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = pt.Partition, codes[tp{t.Topic, pt.Partition}]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// fetchTopic is a topic of an OffsetFetch request.
type fetchTopic struct {
	topic      string
	partitions []int32
}

func (p *Plugin) handleOffsetFetch(ctx context.Context, rc *plugin.RequestContext, req *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	groups := req.Groups
	if req.Version < 8 {
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = req.Group
		if req.Topics != nil || req.Version < 2 { // null topics (all) only from v2
			g.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
		}
		for _, t := range req.Topics {
			g.Topics = append(g.Topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions})
		}
		groups = []kmsg.OffsetFetchRequestGroup{g}
	}
	for _, rg := range groups {
		var topics []fetchTopic
		if rg.Topics != nil {
			topics = []fetchTopic{}
			for _, t := range rg.Topics {
				topics = append(topics, fetchTopic{t.Topic, t.Partitions})
			}
		}
		resp.Groups = append(resp.Groups, p.fetchGroup(ctx, rc, rg.Group, rg.MemberID, rg.MemberEpoch, topics, req.RequireStable))
	}
	if req.Version < 8 {
		g := resp.Groups[0]
		resp.Groups = nil
		resp.ErrorCode = g.ErrorCode
		for _, t := range g.Topics {
			rt := kmsg.OffsetFetchResponseTopic{Topic: t.Topic}
			for _, pt := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetFetchResponseTopicPartition{Partition: pt.Partition,
					Offset: pt.Offset, LeaderEpoch: pt.LeaderEpoch, Metadata: pt.Metadata, ErrorCode: pt.ErrorCode})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if req.Version < 2 && g.ErrorCode != 0 {
			// v0/v1 have no group error: it goes on every partition.
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					resp.Topics[i].Partitions[j].ErrorCode = g.ErrorCode
				}
			}
		}
	}
	return resp
}

// fetchGroup answers OffsetFetch for one group; topics nil means all.
// A group that never existed has no offsets: -1 and no error, as Kafka.
// A consumer-group member (OffsetFetch v9) sends its id and epoch: a
// stale epoch answers STALE_MEMBER_EPOCH, as in Kafka.
func (p *Plugin) fetchGroup(ctx context.Context, rc *plugin.RequestContext, group string, memberID *string, memberEpoch int32, topics []fetchTopic, requireStable bool) kmsg.OffsetFetchResponseGroup {
	out := kmsg.NewOffsetFetchResponseGroup()
	out.Group = group
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, group) {
		out.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return out
	}
	allowed := func(topic string) bool {
		return rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, topic)
	}
	err := p.do(ctx, group, func(s *shardState) error {
		var offsets map[tp]offset
		if g := s.groups[group]; g != nil && g.kind == kindConsumer && memberID != nil && memberEpoch >= 0 {
			if err := g.checkModernCommit(*memberID, memberEpoch); err != nil {
				return err
			}
		}
		if g := s.groups[group]; g != nil {
			offsets = g.offsets
		}
		if topics == nil { // every committed offset
			byTopic := map[string][]int32{}
			for k := range offsets {
				if allowed(k.topic) {
					byTopic[k.topic] = append(byTopic[k.topic], k.partition)
				}
			}
			for _, t := range slices.Sorted(maps.Keys(byTopic)) {
				ps := byTopic[t]
				slices.Sort(ps)
				topics = append(topics, fetchTopic{t, ps})
			}
		}
		for _, t := range topics {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic = t.topic
			ok := allowed(t.topic)
			for _, part := range t.partitions {
				rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = part, -1, -1, new(string)
				o, found := offsets[tp{t.topic, part}]
				switch {
				case !ok:
					rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				case requireStable && s.isPending(group, tp{t.topic, part}):
					rp.ErrorCode = kerr.UnstableOffsetCommit.Code
				case found:
					rp.Offset, rp.LeaderEpoch, rp.Metadata = o.offset, o.epoch, &o.metadata
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
		return nil
	})
	out.ErrorCode = plugin.ErrorCode(err)
	return out
}

func (p *Plugin) handleDescribe(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, name := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.AuthorizedOperations = name, -2147483648
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, name) {
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State = stateDead.String()
		err := p.do(ctx, name, func(s *shardState) error {
			g := s.groups[name]
			switch {
			case g == nil:
				return nil
			case g.kind == kindShare:
				return fmt.Errorf("group %s is not a classic group: %w", name, kerr.GroupIDNotFound)
			case g.kind == kindConsumer:
				p.describeConsumerGroup(g, &rg)
				return nil
			}
			rg.State, rg.ProtocolType, rg.Protocol = g.state.String(), g.protocolType, g.protocol
			for _, m := range g.sortedMembers() {
				dm := kmsg.NewDescribeGroupsResponseGroupMember()
				dm.MemberID, dm.InstanceID, dm.ClientID, dm.ClientHost = m.id, m.instanceID, m.clientID, m.clientHost
				if g.state == stateStable { // Kafka shows metadata and assignments only when stable
					dm.ProtocolMetadata, dm.MemberAssignment = m.metadata(g.protocol), m.assignment
				}
				rg.Members = append(rg.Members, dm)
			}
			return nil
		})
		rg.ErrorCode = plugin.ErrorCode(err)
		if err != nil && req.Version >= 6 {
			rg.ErrorMessage = plugin.ErrorMessage(err)
		}
		if req.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = 0
			for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe, kmsg.ACLOperationDelete} {
				if rc.Allowed(op, kmsg.ACLResourceTypeGroup, name) {
					rg.AuthorizedOperations |= 1 << op
				}
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (p *Plugin) handleList(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ListGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	all := rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, plugin.ClusterResource)
	match := func(filter []string, v string) bool {
		return len(filter) == 0 || slices.ContainsFunc(filter, func(f string) bool { return strings.EqualFold(f, v) })
	}
	for _, sh := range p.Runtime().Shards() {
		err := sh.Do(ctx, func(sh *coord.Shard) error {
			for _, g := range sh.State().(*shardState).groups {
				state := g.stateName()
				if state == stateDead.String() || !match(req.StatesFilter, state) || !match(req.TypesFilter, g.kind.String()) {
					continue
				}
				if !all && !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, g.name) {
					continue
				}
				lg := kmsg.NewListGroupsResponseGroup()
				lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = g.name, g.protocolTypeName(), state, g.kind.String()
				resp.Groups = append(resp.Groups, lg)
			}
			return nil
		})
		if c := plugin.ErrorCode(err); c != 0 && c != kerr.NotCoordinator.Code {
			resp.ErrorCode = c // loading or failed: the list is partial
		}
	}
	slices.SortFunc(resp.Groups, func(a, b kmsg.ListGroupsResponseGroup) int { return strings.Compare(a.Group, b.Group) })
	return resp
}

func (p *Plugin) handleDeleteGroups(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = name
		if !rc.Allowed(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeGroup, name) {
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		} else {
			rg.ErrorCode = plugin.ErrorCode(p.do(ctx, name, func(s *shardState) error { return s.deleteGroup(name) }))
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (s *shardState) deleteGroup(name string) error {
	g := s.groups[name]
	if g == nil {
		return kerr.GroupIDNotFound
	}
	if g.kind == kindClassic && g.state != stateEmpty || !g.isEmpty() {
		return kerr.NonEmptyGroup
	}
	recs := []coord.Record{{Key: groupKey(name)}}
	if g.kind != kindClassic {
		recs = modernTombstones(g)
	}
	if g.kind == kindShare {
		if err := s.p.deleteShareStates(s.sh.Context(), name, sharePartitions(g.m.initialized)); err != nil {
			return err
		}
	}
	for t := range g.offsets {
		recs = append(recs, coord.Record{Key: offsetKey(name, t)})
	}
	if err := s.write(recs...); err != nil {
		return err
	}
	s.setState(g, stateDead)
	delete(s.groups, name)
	return nil
}

func (p *Plugin) handleOffsetDelete(ctx context.Context, rc *plugin.RequestContext, req *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if !rc.Allowed(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeGroup, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	codes := map[tp]int16{}
	var del []tp
	for _, t := range req.Topics {
		ok := rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic)
		for _, pt := range t.Partitions {
			if !ok {
				codes[tp{t.Topic, pt.Partition}] = kerr.TopicAuthorizationFailed.Code
			} else {
				del = append(del, tp{t.Topic, pt.Partition})
			}
		}
	}
	resp.ErrorCode = plugin.ErrorCode(p.do(ctx, req.Group, func(s *shardState) error {
		return s.deleteOffsets(req.Group, del, codes)
	}))
	for _, t := range req.Topics {
		rt := kmsg.OffsetDeleteResponseTopic{Topic: t.Topic}
		for _, pt := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteResponseTopicPartition{Partition: pt.Partition, ErrorCode: codes[tp{t.Topic, pt.Partition}]})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// deleteOffsets removes committed offsets, except for topics the group's
// consumers are subscribed to (GROUP_SUBSCRIBED_TO_TOPIC).
func (s *shardState) deleteOffsets(name string, del []tp, codes map[tp]int16) error {
	g := s.groups[name]
	if g == nil {
		return kerr.GroupIDNotFound
	}
	subscribed := map[string]bool{}
	if g.kind != kindClassic {
		for _, mm := range g.m.members {
			for _, t := range mm.topics {
				subscribed[t] = true
			}
			if mm.regex != nil {
				for _, t := range g.m.regexes[*mm.regex].topics {
					subscribed[t] = true
				}
			}
		}
	} else if g.state != stateEmpty {
		if g.protocolType != "consumer" {
			return kerr.NonEmptyGroup
		}
		for _, m := range g.members {
			var md kmsg.ConsumerMemberMetadata
			if md.ReadFrom(m.metadata(g.protocol)) == nil {
				for _, t := range md.Topics {
					subscribed[t] = true
				}
			}
		}
	}
	var recs []coord.Record
	var gone []tp
	for _, t := range del {
		if subscribed[t.topic] {
			codes[t] = kerr.GroupSubscribedToTopic.Code
			continue
		}
		if _, ok := g.offsets[t]; ok {
			recs = append(recs, coord.Record{Key: offsetKey(name, t)})
			gone = append(gone, t)
		}
	}
	if err := s.write(recs...); err != nil {
		return err
	}
	for _, t := range gone {
		delete(g.offsets, t)
	}
	return nil
}

// checkCommit checks one partition of an OffsetCommit or TxnOffsetCommit
// that passed the ACL checks: the offset goes to commits, or the error
// that answers it to codes.
func (p *Plugin) checkCommit(k tp, off int64, epoch int32, metadata *string, nowMs int64, codes map[tp]int16, commits map[tp]offset) {
	switch {
	case !p.topicExists(k.topic, k.partition):
		codes[k] = kerr.UnknownTopicOrPartition.Code
	case metadata != nil && len(*metadata) > p.cfg.MaxMetadata:
		codes[k] = kerr.OffsetMetadataTooLarge.Code
	default:
		o := offset{offset: off, epoch: epoch, commitMs: nowMs}
		if metadata != nil {
			o.metadata = *metadata
		}
		commits[k] = o
	}
}
