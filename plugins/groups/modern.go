package groups

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
)

// groupKind is the protocol a group uses: the classic one (JoinGroup,
// SyncGroup), KIP-848's consumer protocol (ConsumerGroupHeartbeat) or
// KIP-932's share protocol (ShareGroupHeartbeat). A group ID names one
// group of one kind; an empty classic group and an empty consumer group
// convert into each other (KIP-848's migration of empty groups).
type groupKind int8

const (
	kindClassic groupKind = iota
	kindConsumer
	kindShare
)

// String is the group type of ListGroups and DescribeGroups.
func (k groupKind) String() string { return [...]string{"classic", "consumer", "share"}[k] }

// Member states of the consumer protocol (Kafka's MemberState codes).
const (
	memberStable              int8 = 0
	memberUnrevokedPartitions int8 = 1
	memberUnreleased          int8 = 2
)

// Member epochs a client sends to leave.
const (
	leaveEpoch       int32 = -1
	staticLeaveEpoch int32 = -2
)

// modern is the state of a consumer group (KIP-848) or a share group
// (KIP-932): members each with an epoch, a group epoch bumped by every
// change of membership or subscribed metadata, and a target assignment
// computed by the broker for that epoch. A consumer group's members
// converge to their target one heartbeat at a time, releasing partitions
// before others receive them (owners); a share group's members take
// their target at once, since share groups may share partitions.
type modern struct {
	epoch           int32
	assignmentEpoch int32
	metadataHash    int64
	createdMs       int64
	members         map[string]*mmember
	static          map[string]string     // group.instance.id → member id
	target          map[string]assignment // member id → target assignment
	owners          map[tpid]string       // partition → member that has it assigned or pending revocation
	regexes         map[string]regexValue // resolved regular expressions (consumer groups)
	// Share groups: the partitions whose share-partition state was
	// initialized, and the topics whose state is being deleted.
	initialized map[uuid.UUID]initTopic
	deleting    map[uuid.UUID]initTopic
	// checked is the metadata image index the group's subscribed
	// metadata was last compared at (not persisted).
	checked uint64
}

// tpid is a partition by topic ID.
type tpid struct {
	id uuid.UUID
	p  int32
}

// mmember is a member of a modern group.
type mmember struct {
	id                   string
	instanceID, rackID   *string
	clientID, clientHost string
	topics               []string // subscribed topic names, sorted
	regex                *string
	rebalanceTimeoutMs   int32
	assignor             *string
	epoch, prevEpoch     int32
	state                int8
	assigned, revoking   assignment
	hasMeta              bool // a member metadata record exists (replay)

	stopSession   func() bool
	stopRebalance func() bool
}

func newModern(nowMs int64) *modern {
	return &modern{createdMs: nowMs, members: map[string]*mmember{}, static: map[string]string{},
		target: map[string]assignment{}, owners: map[tpid]string{}, regexes: map[string]regexValue{},
		initialized: map[uuid.UUID]initTopic{}, deleting: map[uuid.UUID]initTopic{}}
}

func (m *mmember) clone() *mmember {
	c := *m
	c.topics = slices.Clone(m.topics)
	c.assigned, c.revoking = m.assigned.clone(), m.revoking.clone()
	return &c
}

func (m *mmember) metaValue() memberValue {
	return memberValue{instanceID: m.instanceID, rackID: m.rackID, clientID: m.clientID, clientHost: m.clientHost,
		topics: m.topics, regex: m.regex, rebalanceTimeoutMs: m.rebalanceTimeoutMs, assignor: m.assignor}
}

func (m *mmember) currentValue() currentValue {
	return currentValue{epoch: m.epoch, prevEpoch: m.prevEpoch, state: m.state, assigned: m.assigned, revoking: m.revoking}
}

func sameMeta(a, b *mmember) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.instanceID, b.instanceID) && eq(a.rackID, b.rackID) && a.clientID == b.clientID &&
		a.clientHost == b.clientHost && slices.Equal(a.topics, b.topics) && eq(a.regex, b.regex) &&
		a.rebalanceTimeoutMs == b.rebalanceTimeoutMs && eq(a.assignor, b.assignor)
}

func sameCurrent(a, b *mmember) bool {
	return a.epoch == b.epoch && a.prevEpoch == b.prevEpoch && a.state == b.state &&
		a.assigned.equal(b.assigned) && a.revoking.equal(b.revoking)
}

// sortedMembers lists the members by id.
func (m *modern) sortedMembers() []*mmember {
	ms := make([]*mmember, 0, len(m.members))
	for _, mm := range m.members {
		ms = append(ms, mm)
	}
	slices.SortFunc(ms, func(a, b *mmember) int { return strings.Compare(a.id, b.id) })
	return ms
}

// stateName is the group state as Kafka names it: Empty, Assigning
// (a new target assignment is due), Reconciling (some member has not
// reached the target yet) or Stable; share groups are Empty or Stable.
func (g *group) modernState() string {
	m := g.m
	switch {
	case len(m.members) == 0:
		return "Empty"
	case g.kind == kindShare:
		return "Stable"
	case m.epoch > m.assignmentEpoch:
		return "Assigning"
	}
	for _, mm := range m.members {
		if mm.epoch != m.assignmentEpoch || mm.state != memberStable {
			return "Reconciling"
		}
	}
	return "Stable"
}

// stateName is the group's state as DescribeGroups and ListGroups
// report it.
func (g *group) stateName() string {
	if g.kind == kindClassic {
		return g.state.String()
	}
	return g.modernState()
}

// protocolTypeName is the group's protocol type as ListGroups reports it.
func (g *group) protocolTypeName() string {
	switch g.kind {
	case kindConsumer:
		return "consumer"
	case kindShare:
		return "share"
	}
	return g.protocolType
}

// checkModernCommit is OffsetCommit's and TxnOffsetCommit's check of a
// consumer group member: an admin or simple consumer (epoch -1) commits
// only to an empty group; a member must exist and send its current epoch.
func (g *group) checkModernCommit(memberID string, epoch int32) error {
	if g.kind == kindShare {
		return fmt.Errorf("group %s is a share group: %w", g.name, kerr.GroupIDNotFound)
	}
	if epoch < 0 && len(g.m.members) == 0 {
		return nil
	}
	mm := g.m.members[memberID]
	switch {
	case mm == nil:
		return fmt.Errorf("member %s is not in group %s: %w", memberID, g.name, kerr.UnknownMemberID)
	case epoch != mm.epoch:
		return fmt.Errorf("member epoch %d, expected %d: %w", epoch, mm.epoch, kerr.StaleMemberEpoch)
	}
	return nil
}

// setOwner records (or clears, with member "") the member holding each
// partition of a.
func (m *modern) setOwners(a assignment, member string) {
	for t, ps := range a {
		for _, p := range ps {
			k := tpid{t, p}
			if member == "" {
				delete(m.owners, k)
			} else {
				m.owners[k] = member
			}
		}
	}
}

// commitMember writes change c, which puts member next, and then installs
// next and arms its session timer.
func (s *shardState) commitMember(c *change, g *group, next *mmember) error {
	m := g.m
	wasEmpty := len(m.members) == 0
	c.then(func() {
		m.putMember(next)
		if wasEmpty {
			s.setEmptySince(g)
		}
	})
	if err := s.commitChange(c); err != nil {
		return err
	}
	s.armSession(g, next)
	return nil
}

// putMember installs member mm (replacing its previous state) and keeps
// the partition owners and static ids in step.
func (m *modern) putMember(mm *mmember) {
	if old := m.members[mm.id]; old != nil {
		m.dropOwners(old)
		if old.instanceID != nil && m.static[*old.instanceID] == old.id {
			delete(m.static, *old.instanceID)
		}
	}
	m.members[mm.id] = mm
	if mm.instanceID != nil {
		m.static[*mm.instanceID] = mm.id
	}
	m.setOwners(mm.assigned, mm.id)
	m.setOwners(mm.revoking, mm.id)
}

// dropOwners clears the partitions mm holds, where it still holds them.
func (m *modern) dropOwners(mm *mmember) {
	for _, a := range []assignment{mm.assigned, mm.revoking} {
		for t, ps := range a {
			for _, p := range ps {
				if m.owners[tpid{t, p}] == mm.id {
					delete(m.owners, tpid{t, p})
				}
			}
		}
	}
}

// removeMember drops a member from memory (its records were written).
func (m *modern) removeMember(mm *mmember) {
	stopTimers(mm)
	m.dropOwners(mm)
	delete(m.members, mm.id)
	delete(m.target, mm.id)
	if mm.instanceID != nil && m.static[*mm.instanceID] == mm.id {
		delete(m.static, *mm.instanceID)
	}
}

func stopTimers(mm *mmember) {
	if mm.stopSession != nil {
		mm.stopSession()
		mm.stopSession = nil
	}
	if mm.stopRebalance != nil {
		mm.stopRebalance()
		mm.stopRebalance = nil
	}
}

// modernTypes are the record types of a group kind, in the order of
// metadata, member, target metadata, target member, current assignment.
func modernTypes(k groupKind) (meta, member, targetMeta, targetMember, current int16) {
	if k == kindShare {
		return recShareMetadata, recShareMember, recShareTargetMeta, recShareTargetMember, recShareCurrent
	}
	return recConsumerMetadata, recConsumerMember, recConsumerTargetMeta, recConsumerTargetMember, recConsumerCurrent
}

// memberTombstones are the records that delete a member.
func memberTombstones(k groupKind, group, member string) []coord.Record {
	_, mem, _, tm, cur := modernTypes(k)
	return []coord.Record{
		{Key: modernKey{cur, group, member}.encode()},
		{Key: modernKey{tm, group, member}.encode()},
		{Key: modernKey{mem, group, member}.encode()},
	}
}

// modernTombstones are the records that delete a modern group (its
// committed offsets are not among them).
func modernTombstones(g *group) []coord.Record {
	var recs []coord.Record
	for _, mm := range g.m.sortedMembers() {
		recs = append(recs, memberTombstones(g.kind, g.name, mm.id)...)
	}
	meta, _, tmeta, _, _ := modernTypes(g.kind)
	for _, re := range slices.Sorted(maps.Keys(g.m.regexes)) {
		recs = append(recs, coord.Record{Key: modernKey{recConsumerRegex, g.name, re}.encode()})
	}
	if g.kind == kindShare {
		recs = append(recs, coord.Record{Key: modernKey{typ: recShareStatePartitions, group: g.name}.encode()})
	}
	return append(recs,
		coord.Record{Key: modernKey{typ: tmeta, group: g.name}.encode()},
		coord.Record{Key: modernKey{typ: meta, group: g.name}.encode()})
}

// replayModern applies a modern group record read back from the log.
func (s *shardState) replayModern(key, value []byte) error {
	k, err := decodeModernKey(key)
	if err != nil {
		return err
	}
	kind := kindConsumer
	switch k.typ {
	case recConsumerPartitions, recSharePartitions:
		return nil // deprecated metadata records
	case recShareMember, recShareMetadata, recShareTargetMeta, recShareTargetMember, recShareCurrent, recShareStatePartitions:
		kind = kindShare
	}
	g := s.groups[k.group]
	if value == nil {
		if g == nil || g.kind != kind {
			return nil
		}
		s.replayModernTombstone(g, k)
		return nil
	}
	if g == nil || g.kind != kind {
		// A new group, or one that replaces the empty group of the
		// other kind (migration): committed offsets stay.
		ng := newGroup(k.group, s.nowMs())
		ng.kind, ng.m = kind, newModern(s.nowMs())
		if g != nil {
			ng.offsets = g.offsets
		}
		g = ng
		s.groups[k.group] = g
	}
	m := g.m
	member := func() *mmember {
		mm := m.members[k.sub]
		if mm == nil {
			mm = &mmember{id: k.sub, assigned: assignment{}, revoking: assignment{}}
			m.members[k.sub] = mm
		}
		return mm
	}
	consumer := kind == kindConsumer
	switch k.typ {
	case recConsumerMetadata, recShareMetadata:
		v, err := decodeGroupMeta(value)
		if err != nil {
			return err
		}
		m.epoch, m.metadataHash = v.epoch, v.metadataHash
		if v.createdMs >= 0 {
			m.createdMs = v.createdMs
		}
	case recConsumerMember, recShareMember:
		v, err := decodeMember(value, consumer)
		if err != nil {
			return err
		}
		mm := member()
		mm.instanceID, mm.rackID, mm.clientID, mm.clientHost = v.instanceID, v.rackID, v.clientID, v.clientHost
		mm.topics, mm.regex, mm.rebalanceTimeoutMs, mm.assignor = v.topics, v.regex, v.rebalanceTimeoutMs, v.assignor
		slices.Sort(mm.topics)
		mm.hasMeta = true
	case recConsumerTargetMeta, recShareTargetMeta:
		e, err := decodeEpochValue(value)
		if err != nil {
			return err
		}
		m.assignmentEpoch = e
	case recConsumerTargetMember, recShareTargetMember:
		a, err := decodeTarget(value)
		if err != nil {
			return err
		}
		m.target[k.sub] = a
	case recConsumerCurrent, recShareCurrent:
		v, err := decodeCurrent(value, consumer)
		if err != nil {
			return err
		}
		mm := member()
		mm.epoch, mm.prevEpoch, mm.state, mm.assigned = v.epoch, v.prevEpoch, v.state, v.assigned
		if v.revoking != nil {
			mm.revoking = v.revoking
		}
	case recConsumerRegex:
		v, err := decodeRegex(value)
		if err != nil {
			return err
		}
		m.regexes[k.sub] = v
	case recShareStatePartitions:
		init, del, err := decodeStatePartitions(value)
		if err != nil {
			return err
		}
		m.initialized, m.deleting = init, del
	}
	return nil
}

func (s *shardState) replayModernTombstone(g *group, k modernKey) {
	m := g.m
	switch k.typ {
	case recConsumerMetadata, recShareMetadata:
		// The group is gone; its offsets (if any) stay, in an empty
		// simple group as Kafka keeps them.
		if len(g.offsets) == 0 {
			delete(s.groups, g.name)
			return
		}
		ng := newGroup(g.name, s.nowMs())
		ng.offsets = g.offsets
		s.groups[g.name] = ng
	case recConsumerMember, recShareMember, recConsumerCurrent, recShareCurrent:
		delete(m.members, k.sub)
	case recConsumerTargetMember, recShareTargetMember:
		delete(m.target, k.sub)
	case recConsumerRegex:
		delete(m.regexes, k.sub)
	case recShareStatePartitions:
		m.initialized, m.deleting = map[uuid.UUID]initTopic{}, map[uuid.UUID]initTopic{}
	}
}

// loadedModern rebuilds what replay leaves out (static ids, partition
// owners) and starts the members' session timers.
func (s *shardState) loadedModern(g *group) {
	m := g.m
	for id, mm := range m.members {
		if !mm.hasMeta { // a current assignment without member metadata: not a member
			delete(m.members, id)
			continue
		}
		m.putMember(mm)
	}
	for _, mm := range m.members {
		s.armSession(g, mm)
	}
	if len(m.members) > 0 {
		g.stateMs = s.nowMs()
	}
}
