package groups

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinArgs is a JoinGroup request as the shard needs it.
type joinArgs struct {
	version                int16
	group, memberID        string
	instanceID             *string
	clientID, clientHost   string
	sessionMs, rebalanceMs int32
	protocolType           string
	protocols              []protocol
}

// join handles JoinGroup as Kafka's classic coordinator does. The answer
// arrives on the returned channel: at once, or when the rebalance
// completes.
func (s *shardState) join(a joinArgs) (chan joinResult, error) {
	ch := make(chan joinResult, 1)
	g, err := s.joinedGroup(a)
	if err != nil {
		return nil, err
	}
	if a.memberID == "" {
		return s.joinNew(g, a, ch)
	}
	if a.instanceID != nil {
		if cur, ok := g.static[*a.instanceID]; ok && cur != a.memberID {
			return nil, kerr.FencedInstanceID
		}
	}
	if _, ok := g.pending[a.memberID]; ok {
		if len(g.members) >= s.p.cfg.MaxSize {
			return nil, kerr.GroupMaxSizeReached
		}
		s.addMember(g, a.member(a.memberID, ch))
		return ch, nil
	}
	m := g.members[a.memberID]
	if m == nil {
		return nil, kerr.UnknownMemberID
	}
	return s.rejoin(g, m, a, ch)
}

// joinedGroup is the classic group a JoinGroup joins: the existing one,
// an empty consumer group converted (KIP-848's downgrade), or a new one
// for a member without an id; its protocols must fit the member's.
func (s *shardState) joinedGroup(a joinArgs) (*group, error) {
	g := s.groups[a.group]
	if g != nil && g.kind != kindClassic {
		if g.kind != kindConsumer || !g.isEmpty() || !s.p.allowsMigration(kindClassic) {
			return nil, fmt.Errorf("group %s is a %s group: %w", a.group, g.kind, kerr.InconsistentGroupProtocol)
		}
		// KIP-848's downgrade of an empty consumer group: its records
		// go, its committed offsets stay with the classic group.
		if err := s.write(modernTombstones(g)...); err != nil {
			return nil, err
		}
		s.p.log.Info("converting an empty consumer group", "group", a.group, "to", kindClassic)
		ng := newGroup(a.group, s.nowMs())
		ng.offsets = g.offsets
		s.groups[a.group], g = ng, ng
	}
	if g == nil {
		if a.memberID != "" {
			return nil, kerr.UnknownMemberID
		}
		g = newGroup(a.group, s.nowMs())
		s.groups[a.group] = g
	}
	if len(g.members) == 0 {
		if a.protocolType == "" || len(a.protocols) == 0 {
			return nil, kerr.InconsistentGroupProtocol
		}
	} else if g.protocolType != a.protocolType || len(s.commonProtocols(g, a.protocols)) == 0 {
		return nil, kerr.InconsistentGroupProtocol
	}
	return g, nil
}

// member is the member a JoinGroup makes, with id, answered on ch.
func (a joinArgs) member(id string, ch chan joinResult) *member {
	return &member{id: id, clientID: a.clientID, clientHost: a.clientHost, instanceID: a.instanceID,
		sessionTimeoutMs: a.sessionMs, rebalanceTimeoutMs: a.rebalanceMs, protocolType: a.protocolType,
		protocols: a.protocols, join: ch}
}

// joinNew handles a JoinGroup without a member id: a static member
// rejoining under a new id, a member told to come back with its id
// (KIP-394), or a member added.
func (s *shardState) joinNew(g *group, a joinArgs, ch chan joinResult) (chan joinResult, error) {
	id := newMemberID(a.clientID)
	if a.instanceID != nil {
		if old := g.members[g.static[*a.instanceID]]; old != nil {
			return ch, s.rejoinStatic(g, old, a.member(id, ch), a)
		}
	} else if a.version >= 4 {
		// KIP-394: the member must come back with the id, so that
		// a client that never gets this answer leaves no ghost.
		g.pending[id] = s.sh.AfterFunc(time.Duration(a.sessionMs)*time.Millisecond, func() {
			if _, ok := g.pending[id]; ok {
				delete(g.pending, id)
				s.tryCompleteJoin(g)
			}
		})
		ch <- joinResult{err: kerr.MemberIDRequired, memberID: id}
		return ch, nil
	}
	if len(g.members) >= s.p.cfg.MaxSize {
		return nil, kerr.GroupMaxSizeReached
	}
	s.addMember(g, a.member(id, ch))
	return ch, nil
}

// rejoin handles a JoinGroup of member m, by the group's state: a
// rebalance joined or started, or the current generation answered again.
func (s *shardState) rejoin(g *group, m *member, a joinArgs, ch chan joinResult) (chan joinResult, error) {
	update := func() {
		s.answerJoin(m, joinResult{err: kerr.RebalanceInProgress}) // a previous join of the same member
		m.protocols, m.sessionTimeoutMs, m.rebalanceTimeoutMs = a.protocols, a.sessionMs, a.rebalanceMs
		m.clientID, m.clientHost = a.clientID, a.clientHost
		m.join = ch
		s.heartbeat(g, m)
	}
	switch g.state {
	case statePreparingRebalance:
		update()
		s.tryCompleteJoin(g)
	case stateCompletingRebalance:
		if m.sameProtocols(a.protocols) {
			// The member missed our answer: give it again.
			ch <- s.currentJoin(g, m)
			s.heartbeat(g, m)
			return ch, nil
		}
		update()
		s.prepareRebalance(g, "member "+m.id+" changed its protocols")
	case stateStable:
		if m.id == g.leader || !m.sameProtocols(a.protocols) {
			update()
			s.prepareRebalance(g, "member "+m.id+" rejoined")
			return ch, nil
		}
		ch <- s.currentJoin(g, m)
		s.heartbeat(g, m)
	default:
		return nil, kerr.UnknownMemberID
	}
	return ch, nil
}

// currentJoin is the JoinGroup answer of the current generation.
func (s *shardState) currentJoin(g *group, m *member) joinResult {
	r := joinResult{generation: g.generation, protocol: g.protocol, leader: g.leader, memberID: m.id}
	if m.id == g.leader {
		for _, o := range g.sortedMembers() {
			jm := kmsg.NewJoinGroupResponseMember()
			jm.MemberID, jm.InstanceID, jm.ProtocolMetadata = o.id, o.instanceID, o.metadata(g.protocol)
			r.members = append(r.members, jm)
		}
	}
	return r
}

// rejoinStatic replaces a static member that rejoined with no member id
// (a restarted instance): the old id is fenced, and unless something
// changed the group keeps its generation and assignments (KIP-345).
func (s *shardState) rejoinStatic(g *group, old, m *member, a joinArgs) error {
	s.answerJoin(old, joinResult{err: kerr.FencedInstanceID})
	s.answerSync(old, syncResult{err: kerr.FencedInstanceID})
	if old.stopBeat != nil {
		old.stopBeat()
	}
	delete(g.members, old.id)
	m.assignment = old.assignment
	g.members[m.id] = m
	g.static[*a.instanceID] = m.id
	wasLeader := g.leader == old.id
	if wasLeader {
		g.leader = m.id
	}
	s.heartbeat(g, m)
	if g.state == stateStable && !wasLeader && old.sameProtocols(m.protocols) {
		if err := s.storeGroup(g); err != nil {
			// Undo: the old id stays the member.
			delete(g.members, m.id)
			g.members[old.id] = old
			g.static[*a.instanceID] = old.id
			m.join = nil
			s.heartbeat(g, old)
			return err
		}
		r := s.currentJoin(g, m)
		s.answerJoin(m, r)
		return nil
	}
	s.prepareRebalance(g, "static member "+*a.instanceID+" rejoined")
	return nil
}

// syncArgs is a SyncGroup request as the shard needs it.
type syncArgs struct {
	group, memberID        string
	instanceID             *string
	generation             int32
	protocolType, protocol *string
	assignments            map[string][]byte
}

func (s *shardState) sync(a syncArgs) (chan syncResult, error) {
	g := s.groups[a.group]
	if g == nil {
		return nil, kerr.UnknownMemberID
	}
	m, err := s.checkMember(g, a.memberID, a.instanceID, a.generation)
	if err != nil {
		return nil, err
	}
	if a.protocolType != nil && *a.protocolType != g.protocolType || a.protocol != nil && *a.protocol != g.protocol {
		return nil, kerr.InconsistentGroupProtocol
	}
	ch := make(chan syncResult, 1)
	switch g.state {
	case statePreparingRebalance:
		return nil, kerr.RebalanceInProgress
	case stateStable:
		ch <- syncResult{assignment: m.assignment}
		s.heartbeat(g, m)
		return ch, nil
	case stateCompletingRebalance:
	default:
		return nil, kerr.UnknownMemberID
	}
	s.answerSync(m, syncResult{err: kerr.RebalanceInProgress})
	m.sync = ch
	s.heartbeat(g, m)
	if m.id != g.leader {
		return ch, nil
	}
	for _, o := range g.members {
		o.assignment = a.assignments[o.id]
	}
	if err := s.storeGroup(g); err != nil {
		for _, o := range g.members {
			o.assignment = nil
			s.answerSync(o, syncResult{err: err})
		}
		s.prepareRebalance(g, "storing the assignment failed")
		return ch, nil
	}
	s.setState(g, stateStable)
	for _, o := range g.members {
		s.answerSync(o, syncResult{assignment: o.assignment})
	}
	return ch, nil
}

// checkMember is the membership check SyncGroup, Heartbeat and
// OffsetCommit share: fencing of static members, then the member id, then
// the generation.
func (s *shardState) checkMember(g *group, memberID string, instanceID *string, generation int32) (*member, error) {
	if instanceID != nil {
		if cur, ok := g.static[*instanceID]; ok && cur != memberID {
			return nil, kerr.FencedInstanceID
		}
	}
	m := g.members[memberID]
	if m == nil {
		return nil, kerr.UnknownMemberID
	}
	if generation != g.generation {
		return nil, kerr.IllegalGeneration
	}
	return m, nil
}

func (s *shardState) heartbeatReq(group, memberID string, instanceID *string, generation int32) error {
	g := s.groups[group]
	if g == nil {
		return kerr.UnknownMemberID
	}
	m, err := s.checkMember(g, memberID, instanceID, generation)
	if err != nil {
		return err
	}
	switch g.state {
	case stateEmpty:
		return kerr.UnknownMemberID
	case statePreparingRebalance:
		s.heartbeat(g, m)
		return kerr.RebalanceInProgress
	}
	s.heartbeat(g, m)
	return nil
}

func (s *shardState) leave(group, memberID string, instanceID *string) error {
	g := s.groups[group]
	if g == nil {
		return kerr.UnknownMemberID
	}
	if instanceID != nil {
		cur, ok := g.static[*instanceID]
		if !ok {
			return kerr.UnknownMemberID
		}
		if memberID != "" && cur != memberID {
			return kerr.FencedInstanceID
		}
		memberID = cur
	}
	if stop, ok := g.pending[memberID]; ok {
		stop()
		delete(g.pending, memberID)
		s.tryCompleteJoin(g)
		return nil
	}
	m := g.members[memberID]
	if m == nil {
		return kerr.UnknownMemberID
	}
	s.removeMember(g, m)
	return nil
}

// commitOffsets applies OffsetCommit's group checks, then commits.
// Simple consumers and admins commit with generation -1 to a group with
// no members.
func (s *shardState) commitOffsets(group, memberID string, instanceID *string, generation int32, offsets map[tp]offset) error {
	g := s.groups[group]
	if g != nil && g.kind != kindClassic {
		if err := g.checkModernCommit(memberID, generation); err != nil {
			return err
		}
		return s.commit(group, offsets)
	}
	switch {
	case g == nil && generation < 0:
		return s.commit(group, offsets)
	case g == nil:
		return kerr.IllegalGeneration
	case generation < 0 && g.state == stateEmpty:
		return s.commit(group, offsets)
	}
	m, err := s.checkMember(g, memberID, instanceID, generation)
	if err != nil {
		return err
	}
	if g.state == stateCompletingRebalance {
		return kerr.RebalanceInProgress
	}
	s.heartbeat(g, m)
	return s.commit(group, offsets)
}
