package groups

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Share groups (KIP-932): membership and assignment, as Kafka's group
// coordinator keeps them. Members consume the partitions of their topics
// together, so a member simply takes its target assignment: there is
// nothing to revoke. The records members fetch and acknowledge are the
// share-groups plugin's (plugins/share), which serves the share APIs
// through this plugin's plugin.ShareGroupCoordinator.

var _ plugin.ShareGroupCoordinator = (*Plugin)(nil)

// ShareGroupHeartbeat implements plugin.ShareGroupCoordinator.
func (p *Plugin) ShareGroupHeartbeat(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareGroupHeartbeatRequest) *kmsg.ShareGroupHeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	fail := func(err error) *kmsg.ShareGroupHeartbeatResponse {
		resp.ErrorCode, resp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
		return resp
	}
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.GroupID) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	if err := checkShareHeartbeat(req); err != nil {
		return fail(err)
	}
	if denied := deniedTopics(rc, req.SubscribedTopicNames); len(denied) > 0 {
		return fail(fmt.Errorf("not authorized to describe topics %v: %w", denied, kerr.TopicAuthorizationFailed))
	}
	a := &cgHeartbeat{group: req.GroupID, memberID: req.MemberID, epoch: req.MemberEpoch, rackID: req.RackID,
		topics: req.SubscribedTopicNames, clientID: rc.ClientID, clientHost: "/" + hostOf(rc.ClientAddr), rebalanceMs: -1}
	var ans cgAnswer
	if err := p.do(ctx, req.GroupID, func(s *shardState) (err error) {
		ans, err = s.shareHeartbeat(a)
		return err
	}); err != nil {
		return fail(err)
	}
	resp.MemberID, resp.MemberEpoch = &ans.memberID, ans.epoch
	resp.HeartbeatIntervalMillis = p.heartbeatInterval(req.GroupID, kindShare)
	if ans.assignment != nil {
		resp.Assignment = &kmsg.ShareGroupHeartbeatResponseAssignment{TopicPartitions: []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition{}}
		for _, id := range ans.assignment.topicIDs() {
			resp.Assignment.TopicPartitions = append(resp.Assignment.TopicPartitions,
				kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition{TopicID: id, Partitions: ans.assignment[id]})
		}
	}
	return resp
}

func checkShareHeartbeat(req *kmsg.ShareGroupHeartbeatRequest) error {
	invalid := func(msg string) error { return fmt.Errorf("%s: %w", msg, kerr.InvalidRequest) }
	switch e := req.MemberEpoch; {
	case req.GroupID == "":
		return invalid("GroupId can't be empty.")
	case req.RackID != nil && *req.RackID == "":
		return invalid("RackId can't be empty.")
	case req.MemberID == "":
		return invalid("MemberId can't be empty.")
	case e == 0 && len(req.SubscribedTopicNames) == 0:
		return invalid("SubscribedTopicNames must be set in first request.")
	case e < 0 && e != leaveEpoch:
		return invalid("MemberEpoch is invalid.")
	}
	return nil
}

// shareHeartbeat handles ShareGroupHeartbeat.
func (s *shardState) shareHeartbeat(a *cgHeartbeat) (cgAnswer, error) {
	img := s.p.Image()
	c := &change{}
	g, err := s.modernGroupFor(c, a.group, kindShare, a.epoch == 0)
	if err != nil {
		return cgAnswer{}, err
	}
	m := g.m
	old := m.members[a.memberID]
	if a.epoch == leaveEpoch {
		if old == nil {
			return cgAnswer{}, fmt.Errorf("member %s is not in group %s: %w", a.memberID, g.name, kerr.UnknownMemberID)
		}
		s.fence(c, g, old)
		if err := s.commitChange(c); err != nil {
			return cgAnswer{}, err
		}
		return cgAnswer{memberID: a.memberID, epoch: leaveEpoch}, nil
	}
	switch {
	case a.epoch > 0 && old == nil:
		return cgAnswer{}, fmt.Errorf("member %s is not in group %s: %w", a.memberID, g.name, kerr.UnknownMemberID)
	case a.epoch > 0 && (a.epoch > old.epoch || a.epoch < old.epoch && a.epoch != old.prevEpoch):
		return cgAnswer{}, fmt.Errorf("member %s sent epoch %d, its epoch is %d: %w", a.memberID, a.epoch, old.epoch, kerr.FencedMemberEpoch)
	case old == nil && len(m.members) >= s.p.cfg.Share.MaxSize:
		return cgAnswer{}, fmt.Errorf("group %s has %d members: %w", g.name, len(m.members), kerr.GroupMaxSizeReached)
	}
	var cur *mmember
	if old != nil {
		cur = old.clone()
	} else {
		cur = &mmember{id: a.memberID, assigned: assignment{}, revoking: assignment{}, rebalanceTimeoutMs: -1}
	}
	cur.clientID, cur.clientHost = a.clientID, a.clientHost
	if a.rackID != nil {
		cur.rackID = a.rackID
	}
	if a.topics != nil {
		cur.topics = slices.Compact(slices.Sorted(slices.Values(a.topics)))
	}
	if old == nil || !sameMeta(old, cur) {
		c.put(modernKey{recShareMember, g.name, cur.id}, cur.metaValue().encode(false))
	}
	members := []*mmember{cur}
	for _, o := range m.sortedMembers() {
		if o.id != cur.id {
			members = append(members, o)
		}
	}
	bump := old == nil || !slices.Equal(old.topics, cur.topics)
	epoch := m.epoch
	if bump || img.Index != m.checked {
		hash := metadataHash(img, subscribedNames(members, nil))
		bump = bump || hash != m.metadataHash
		c.then(func() { m.checked, m.metadataHash = img.Index, hash })
	}
	if bump {
		epoch++
		c.put(modernKey{typ: recShareMetadata, group: g.name}, groupMetaValue{epoch: epoch}.encode(false))
		c.then(func() { m.epoch = epoch })
	}
	target := m.target[cur.id]
	if epoch > m.assignmentEpoch {
		targets := s.shareTargets(members, img)
		for _, mm := range members {
			if t := targets[mm.id]; !t.equal(m.target[mm.id]) {
				c.put(modernKey{recShareTargetMember, g.name, mm.id}, targetValue(t))
			}
		}
		c.put(modernKey{typ: recShareTargetMeta, group: g.name}, epochValue(epoch))
		c.then(func() {
			for id, t := range targets {
				m.target[id] = t
			}
			m.assignmentEpoch = epoch
		})
		target = targets[cur.id]
		s.noteInitialized(c, g, targets, img)
	}
	next := cur.clone()
	if target == nil {
		target = assignment{}
	}
	if next.epoch != epoch || !next.assigned.equal(target) {
		next.prevEpoch, next.epoch, next.assigned = next.epoch, max(epoch, m.assignmentEpoch), target.clone()
		c.put(modernKey{recShareCurrent, g.name, next.id}, next.currentValue().encode(false))
	}
	if err := s.commitMember(c, g, next); err != nil {
		return cgAnswer{}, err
	}
	ans := cgAnswer{memberID: next.id, epoch: next.epoch}
	if a.epoch == 0 || old == nil || !old.assigned.equal(next.assigned) {
		ans.assignment = next.assigned
	}
	return ans, nil
}

// shareTargets runs the share assignor over members.
func (s *shardState) shareTargets(members []*mmember, img *metadata.Image) map[string]assignment {
	in := &assignInput{topics: map[uuid.UUID]*assignTopic{}}
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(a, b *mmember) int { return strings.Compare(a.id, b.id) })
	for _, mm := range sorted {
		in.members = append(in.members, assignMember{id: mm.id, topics: memberTopics(mm, nil, img, in)})
	}
	return assignShare(in)
}

// noteInitialized records, in ShareGroupStatePartitionMetadata, the
// partitions the group is assigned for the first time: their share state
// starts when a member first fetches them (share.auto.offset.reset), and
// the group's admin APIs and deletion find them there.
func (s *shardState) noteInitialized(c *change, g *group, targets map[string]assignment, img *metadata.Image) {
	m := g.m
	init := map[uuid.UUID]initTopic{}
	for id, t := range m.initialized {
		init[id] = initTopic{name: t.name, partitions: slices.Clone(t.partitions)}
	}
	added := false
	for _, a := range targets {
		for id, ps := range a {
			t := init[id]
			if tt := img.TopicsByID[id]; tt != nil {
				t.name = tt.Name
			}
			for _, p := range ps {
				if i, ok := slices.BinarySearch(t.partitions, p); !ok {
					t.partitions = slices.Insert(t.partitions, i, p)
					added = true
				}
			}
			init[id] = t
		}
	}
	if !added {
		return
	}
	c.put(modernKey{typ: recShareStatePartitions, group: g.name}, statePartitionsValue(init, m.deleting))
	c.then(func() { m.initialized = init })
}

// ShareGroupDescribe implements plugin.ShareGroupCoordinator.
func (p *Plugin) ShareGroupDescribe(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareGroupDescribeRequest) *kmsg.ShareGroupDescribeResponse {
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	for _, name := range req.GroupIDs {
		rg := kmsg.NewShareGroupDescribeResponseGroup()
		rg.GroupID, rg.AuthorizedOperations = name, -2147483648
		if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, name) {
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		err := p.do(ctx, name, func(s *shardState) error {
			g := s.groups[name]
			if g == nil || g.kind != kindShare {
				return fmt.Errorf("group %s is not a share group: %w", name, kerr.GroupIDNotFound)
			}
			img := p.Image()
			rg.GroupState, rg.GroupEpoch, rg.AssignmentEpoch, rg.Assignor = g.modernState(), g.m.epoch, g.m.assignmentEpoch, "simple"
			for _, mm := range g.m.sortedMembers() {
				dm := kmsg.NewShareGroupDescribeResponseGroupMember()
				dm.MemberID, dm.RackID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = mm.id, mm.rackID, mm.epoch, mm.clientID, mm.clientHost
				dm.SubscribedTopicNames = slices.Clone(mm.topics)
				for _, id := range mm.assigned.topicIDs() {
					tp := kmsg.ShareGroupDescribeResponseGroupMemberAssignmentTopicPartition{TopicID: id, Partitions: mm.assigned[id]}
					if t := img.TopicsByID[id]; t != nil {
						tp.Topic = t.Name
					}
					dm.Assignment.TopicPartitions = append(dm.Assignment.TopicPartitions, tp)
				}
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

// ShareGroupConfig implements plugin.ShareGroupCoordinator.
func (p *Plugin) ShareGroupConfig(group string) plugin.ShareGroupConfig {
	c := plugin.ShareGroupConfig{
		RecordLock:     p.groupConfigMs(group, "share.record.lock.duration.ms"),
		MaxRecordLocks: p.cfg.MaxRecordLocks,
		ReadCommitted:  p.groupConfigValue(group, "share.isolation.level") == "read_committed",
	}
	c.DeliveryLimit, _ = strconv.Atoi(p.groupConfigValue(group, "share.delivery.count.limit"))
	c.AutoOffsetReset, c.ResetDuration, _ = parseAutoOffsetReset(p.groupConfigValue(group, "share.auto.offset.reset"))
	return c
}

// parseAutoOffsetReset reads share.auto.offset.reset: latest, earliest or
// by_duration:<ISO-8601 duration> (PnDTnHnMn.nS).
func parseAutoOffsetReset(v string) (string, time.Duration, error) {
	switch v {
	case "latest", "earliest":
		return v, 0, nil
	}
	iso, ok := strings.CutPrefix(v, "by_duration:")
	if !ok {
		return "latest", 0, fmt.Errorf("share.auto.offset.reset=%q: want latest, earliest or by_duration:<ISO-8601 duration>", v)
	}
	d, err := parseISODuration(iso)
	if err != nil || d < 0 {
		return "latest", 0, fmt.Errorf("share.auto.offset.reset=%q: %v", v, err)
	}
	return "by_duration", d, nil
}

// parseISODuration parses the days-to-seconds subset of ISO-8601
// durations that Java's Duration.parse accepts: PnDTnHnMn.nS.
func parseISODuration(s string) (time.Duration, error) {
	rest, ok := strings.CutPrefix(strings.ToUpper(s), "P")
	if !ok || rest == "" {
		return 0, fmt.Errorf("duration %q does not start with P", s)
	}
	var d time.Duration
	inTime := false
	for rest != "" {
		if rest[0] == 'T' {
			inTime, rest = true, rest[1:]
			continue
		}
		i := strings.IndexAny(rest, "DHMS")
		if i <= 0 {
			return 0, fmt.Errorf("duration %q is malformed", s)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %v", s, err)
		}
		unit := map[byte]time.Duration{'D': 24 * time.Hour, 'H': time.Hour, 'M': time.Minute, 'S': time.Second}[rest[i]]
		if rest[i] == 'D' && inTime || rest[i] != 'D' && !inTime {
			return 0, fmt.Errorf("duration %q is malformed", s)
		}
		d += time.Duration(n * float64(unit))
		rest = rest[i+1:]
	}
	return d, nil
}

// ShareGroupPartitions implements plugin.ShareGroupCoordinator.
func (p *Plugin) ShareGroupPartitions(ctx context.Context, group string) (string, []plugin.SharePartition, error) {
	state := stateDead.String()
	var parts []plugin.SharePartition
	err := p.doCreating(ctx, group, func(s *shardState) error {
		g := s.groups[group]
		switch {
		case g == nil:
			return nil
		case g.kind != kindShare:
			return fmt.Errorf("group %s is not a share group: %w", group, kerr.GroupIDNotFound)
		}
		state = g.modernState()
		parts = sharePartitions(g.m.initialized)
		return nil
	})
	return state, parts, err
}

func sharePartitions(init map[uuid.UUID]initTopic) []plugin.SharePartition {
	var parts []plugin.SharePartition
	for _, id := range sortedIDs(init) {
		for _, p := range init[id].partitions {
			parts = append(parts, plugin.SharePartition{TopicID: id, Topic: init[id].name, Partition: p})
		}
	}
	return parts
}

// SetShareGroupPartitions implements plugin.ShareGroupCoordinator.
func (p *Plugin) SetShareGroupPartitions(ctx context.Context, group string, add, remove []plugin.SharePartition) error {
	return p.doCreating(ctx, group, func(s *shardState) error {
		c := &change{}
		g, err := s.modernGroupFor(c, group, kindShare, true)
		if err != nil {
			return err
		}
		if !g.isEmpty() {
			return fmt.Errorf("share group %s has members: %w", group, kerr.NonEmptyGroup)
		}
		init := map[uuid.UUID]initTopic{}
		for id, t := range g.m.initialized {
			init[id] = initTopic{name: t.name, partitions: slices.Clone(t.partitions)}
		}
		for _, sp := range add {
			t := init[sp.TopicID]
			t.name = sp.Topic
			if i, ok := slices.BinarySearch(t.partitions, sp.Partition); !ok {
				t.partitions = slices.Insert(t.partitions, i, sp.Partition)
			}
			init[sp.TopicID] = t
		}
		for _, sp := range remove {
			t, ok := init[sp.TopicID]
			if !ok {
				continue
			}
			if i, ok := slices.BinarySearch(t.partitions, sp.Partition); ok {
				t.partitions = slices.Delete(t.partitions, i, i+1)
			}
			if len(t.partitions) == 0 {
				delete(init, sp.TopicID)
			} else {
				init[sp.TopicID] = t
			}
		}
		m := g.m
		if s.groups[group] != g { // a new group: its metadata first
			c.put(modernKey{typ: recShareMetadata, group: group}, groupMetaValue{epoch: m.epoch}.encode(false))
		}
		c.put(modernKey{typ: recShareStatePartitions, group: group}, statePartitionsValue(init, m.deleting))
		c.then(func() { m.initialized = init })
		return s.commitChange(c)
	})
}

// doCreating is do for another plugin's call, which no FindCoordinator
// preceded: the internal topic is created on first use.
func (p *Plugin) doCreating(ctx context.Context, group string, fn func(s *shardState) error) error {
	h := p.Host()
	if h == nil {
		return kerr.CoordinatorNotAvailable
	}
	if _, err := h.EnsureTopic(ctx, p.Topic()); err != nil {
		return err
	}
	return p.do(ctx, group, fn)
}

// shareMemberLeft tells the share-groups plugin that a member is gone.
func (p *Plugin) shareMemberLeft(group, member string) {
	if h := p.Host(); h != nil {
		for _, l := range plugin.All[plugin.ShareMemberListener](h.Plugins()) {
			l.ShareMemberLeft(group, member)
		}
	}
}

// deleteShareStates removes the share state of a share group's
// partitions (DeleteGroups), through the share-groups plugin.
func (p *Plugin) deleteShareStates(ctx context.Context, group string, parts []plugin.SharePartition) error {
	h := p.Host()
	if h == nil || len(parts) == 0 {
		return nil
	}
	store, ok := plugin.Find[plugin.ShareStateStore](h.Plugins())
	if !ok {
		return nil
	}
	return store.DeleteShareStates(ctx, group, parts)
}
