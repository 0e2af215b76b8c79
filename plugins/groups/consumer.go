package groups

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// KIP-848's consumer protocol, as Kafka's group coordinator runs it. A
// heartbeat carries the member's subscription (when it changed) and the
// partitions it owns; the coordinator
//
//  1. updates the member, bumping the group epoch when a subscription
//     or the subscribed topics' metadata changed;
//  2. computes a new target assignment for every member when the group
//     epoch is ahead of the assignment epoch (the server assignor);
//  3. moves the member one step towards its target: partitions it must
//     give up are revoked first (the member keeps its epoch until it
//     reports them gone), partitions still held by another member wait
//     (unreleased), the rest are assigned with the target epoch.
//
// Every step is written to __consumer_offsets before it is applied and
// answered.

// change is one state change of a modern group: the records to write and
// what to apply to memory once they are written.
type change struct {
	recs  []coord.Record
	apply []func()
}

func (c *change) put(k modernKey, value []byte) {
	c.recs = append(c.recs, coord.Record{Key: k.encode(), Value: value})
}

func (c *change) then(fn func()) { c.apply = append(c.apply, fn) }

// commitChange writes the change's records, then applies it.
func (s *shardState) commitChange(c *change) error {
	if err := s.write(c.recs...); err != nil {
		return err
	}
	for _, fn := range c.apply {
		fn()
	}
	return nil
}

// cgHeartbeat is a ConsumerGroupHeartbeat request as the shard needs it.
// Nil fields did not change since the member's last heartbeat.
type cgHeartbeat struct {
	group, memberID      string
	epoch                int32
	instanceID, rackID   *string
	rebalanceMs          int32 // -1: unchanged
	topics               []string
	regex                *string
	assignor             *string
	owned                assignment // the partitions the member owns; nil: not sent
	clientID, clientHost string
}

// cgAnswer is what the heartbeat answers.
type cgAnswer struct {
	memberID   string
	epoch      int32
	assignment assignment // nil: not sent (unchanged)
}

// allowsMigration says whether an empty group may convert to kind.
func (p *Plugin) allowsMigration(to groupKind) bool {
	switch p.cfg.Migration {
	case "bidirectional":
		return true
	case "upgrade":
		return to == kindConsumer
	case "downgrade":
		return to == kindClassic
	}
	return false
}

// isEmpty says whether the group has no members.
func (g *group) isEmpty() bool {
	if g.kind == kindClassic {
		return len(g.members) == 0 && len(g.pending) == 0
	}
	return len(g.m.members) == 0
}

// modernGroupFor returns the group of kind named name. With create, a
// missing group is made, and an empty group of another kind converts
// (its committed offsets stay); the new group enters memory when c is
// applied.
func (s *shardState) modernGroupFor(c *change, name string, kind groupKind, create bool) (*group, error) {
	g := s.groups[name]
	if g != nil && g.kind == kind {
		return g, nil
	}
	switch {
	case g == nil && !create:
		return nil, fmt.Errorf("%s group %s not found: %w", kind, name, kerr.GroupIDNotFound)
	case g != nil && (!create || g.kind != kindClassic || !g.isEmpty() || kind == kindConsumer && !s.p.allowsMigration(kindConsumer)):
		return nil, fmt.Errorf("group %s is not a %s group: %w", name, kind, kerr.GroupIDNotFound)
	}
	ng := newGroup(name, s.nowMs())
	ng.kind, ng.m = kind, newModern(s.nowMs())
	if g != nil {
		ng.offsets = g.offsets
		c.recs = append(c.recs, coord.Record{Key: groupKey(name)}) // the classic group's tombstone
		s.p.log.Info("converting an empty classic group", "group", name, "to", kind)
	}
	c.then(func() { s.groups[name] = ng })
	return ng, nil
}

// consumerHeartbeat handles ConsumerGroupHeartbeat.
func (s *shardState) consumerHeartbeat(a *cgHeartbeat) (cgAnswer, error) {
	img := s.p.Image()
	c := &change{}
	g, err := s.modernGroupFor(c, a.group, kindConsumer, a.epoch == 0)
	if err != nil {
		return cgAnswer{}, err
	}
	if a.epoch == leaveEpoch || a.epoch == staticLeaveEpoch {
		return s.consumerLeave(c, g, a)
	}
	m := g.m
	old, replaced, err := s.consumerMember(g, a)
	if err != nil {
		return cgAnswer{}, err
	}
	cur := s.updatedMember(old, replaced, a)
	self := func(id string) bool { return id == cur.id || replaced != nil && id == replaced.id }

	if replaced != nil {
		s.replaceConsumer(c, g, cur, replaced)
	}
	if old == nil || !sameMeta(old, cur) {
		c.put(modernKey{recConsumerMember, g.name, cur.id}, cur.metaValue().encode(true))
	}

	// The members as they will be, for the subscription and assignment.
	members := []*mmember{cur}
	for _, o := range m.sortedMembers() {
		if !self(o.id) {
			members = append(members, o)
		}
	}
	bump := old == nil && replaced == nil || old != nil && !sameSubscription(old, cur)
	regexes, err := s.resolveRegexes(c, g, members, img, bump)
	if err != nil {
		return cgAnswer{}, err
	}
	epoch := s.consumerGroupEpoch(c, g, members, regexes, img, bump)
	targetEpoch, target := s.consumerTarget(c, g, cur, replaced, members, regexes, img, epoch)

	exists := func(id uuid.UUID) bool { return img.TopicsByID[id] != nil }
	owner := func(k tpid) bool { o, ok := m.owners[k]; return ok && !self(o) }
	next := reconcile(cur, target, targetEpoch, a.owned, owner, exists)
	if old == nil || !sameCurrent(old, next) {
		c.put(modernKey{recConsumerCurrent, g.name, next.id}, next.currentValue().encode(true))
	}
	if err := s.commitMember(c, g, next); err != nil {
		return cgAnswer{}, err
	}
	s.armRebalance(g, next)

	ans := cgAnswer{memberID: next.id, epoch: next.epoch}
	full := a.epoch == 0 || a.rebalanceMs != -1 && (a.topics != nil || a.regex != nil) && a.owned != nil
	if full || old == nil || !old.assigned.equal(next.assigned) {
		ans.assignment = next.assigned
	}
	return ans, nil
}

// replaceConsumer writes in c that static member cur takes over from
// replaced: replaced's records go and its target assignment becomes
// cur's.
func (s *shardState) replaceConsumer(c *change, g *group, cur, replaced *mmember) {
	m := g.m
	c.recs = append(c.recs, memberTombstones(kindConsumer, g.name, replaced.id)...)
	if t, ok := m.target[replaced.id]; ok {
		c.put(modernKey{recConsumerTargetMember, g.name, cur.id}, targetValue(t))
	}
	c.then(func() {
		t, had := m.target[replaced.id]
		m.removeMember(replaced)
		if had {
			m.target[cur.id] = t
		}
	})
}

// consumerGroupEpoch is the group's epoch after a heartbeat: bumped (and
// written in c) when bump says the members or their subscriptions changed,
// or when the metadata of the topics members subscribe to did.
func (s *shardState) consumerGroupEpoch(c *change, g *group, members []*mmember, regexes map[string][]string, img *metadata.Image, bump bool) int32 {
	m := g.m
	epoch := m.epoch
	if bump || img.Index != m.checked {
		hash := metadataHash(img, subscribedNames(members, regexes))
		bump = bump || hash != m.metadataHash
		c.then(func() { m.checked, m.metadataHash = img.Index, hash })
		if bump {
			epoch++
			c.put(modernKey{typ: recConsumerMetadata, group: g.name}, groupMetaValue{epoch: epoch, metadataHash: hash, createdMs: m.createdMs}.encode(true))
			c.then(func() { m.epoch = epoch })
		}
	}
	return epoch
}

// consumerTarget is member cur's target assignment and its epoch: the
// current one, or, when the group's epoch passed the assignment's, every
// member's computed again (written in c where it changed).
func (s *shardState) consumerTarget(c *change, g *group, cur, replaced *mmember, members []*mmember, regexes map[string][]string, img *metadata.Image, epoch int32) (int32, assignment) {
	m := g.m
	targetEpoch, target := m.assignmentEpoch, m.target[cur.id]
	if replaced != nil && target == nil {
		target = m.target[replaced.id]
	}
	if epoch <= m.assignmentEpoch {
		return targetEpoch, target
	}
	prev := func(id string) assignment {
		if id == cur.id && replaced != nil {
			return m.target[replaced.id]
		}
		return m.target[id]
	}
	targets := s.computeTargets(members, prev, regexes, img)
	for _, mm := range members {
		if t := targets[mm.id]; !t.equal(prev(mm.id)) || mm.id == cur.id && replaced != nil {
			c.put(modernKey{recConsumerTargetMember, g.name, mm.id}, targetValue(t))
		}
	}
	c.put(modernKey{typ: recConsumerTargetMeta, group: g.name}, epochValue(epoch))
	c.then(func() {
		for id, t := range targets {
			m.target[id] = t
		}
		m.assignmentEpoch = epoch
	})
	return epoch, targets[cur.id]
}

// consumerMember finds the member a heartbeat is from: old is its state
// (nil for a new member); replaced is the static member with the same
// instance id that a new member id takes over from.
func (s *shardState) consumerMember(g *group, a *cgHeartbeat) (old, replaced *mmember, err error) {
	m := g.m
	old = m.members[a.memberID]
	if a.instanceID != nil {
		if id, ok := m.static[*a.instanceID]; ok && id != a.memberID {
			if a.epoch != 0 {
				return nil, nil, fmt.Errorf("instance %s is member %s: %w", *a.instanceID, id, kerr.FencedInstanceID)
			}
			replaced = m.members[id]
			if replaced != nil && replaced.epoch != staticLeaveEpoch {
				return nil, nil, fmt.Errorf("instance %s is still used by member %s: %w", *a.instanceID, id, kerr.UnreleasedInstanceID)
			}
		}
	}
	if a.epoch > 0 {
		switch {
		case old == nil:
			return nil, nil, fmt.Errorf("member %s is not in group %s: %w", a.memberID, g.name, kerr.UnknownMemberID)
		case a.epoch > old.epoch,
			a.epoch < old.epoch && (a.epoch != old.prevEpoch || !subset(a.owned, old.assigned)):
			return nil, nil, fmt.Errorf("member %s sent epoch %d, its epoch is %d: %w", a.memberID, a.epoch, old.epoch, kerr.FencedMemberEpoch)
		}
	}
	if old == nil && replaced == nil && len(m.members) >= s.p.cfg.Consumer.MaxSize {
		return nil, nil, fmt.Errorf("group %s has %d members: %w", g.name, len(m.members), kerr.GroupMaxSizeReached)
	}
	return old, replaced, nil
}

// updatedMember is the member with the heartbeat's changes applied. A
// member joining again with its id (epoch 0) owns nothing: it gets its
// target assignment again, which recovers a lost response. A static
// member replacing an earlier instance keeps that instance's partitions.
func (s *shardState) updatedMember(old, replaced *mmember, a *cgHeartbeat) *mmember {
	var cur *mmember
	switch {
	case replaced != nil:
		cur = replaced.clone()
		cur.id = a.memberID
		cur.epoch, cur.prevEpoch, cur.state = 0, 0, memberStable
		cur.stopSession, cur.stopRebalance = nil, nil
	case old != nil:
		cur = old.clone()
		if a.epoch == 0 {
			cur.epoch, cur.prevEpoch, cur.state = 0, 0, memberStable
			cur.assigned, cur.revoking = assignment{}, assignment{}
		}
	default:
		cur = &mmember{id: a.memberID, assigned: assignment{}, revoking: assignment{}, rebalanceTimeoutMs: -1}
	}
	cur.clientID, cur.clientHost = a.clientID, a.clientHost
	if a.instanceID != nil {
		cur.instanceID = a.instanceID
	}
	if a.rackID != nil {
		cur.rackID = a.rackID
	}
	if a.rebalanceMs != -1 {
		cur.rebalanceTimeoutMs = a.rebalanceMs
	}
	if a.assignor != nil {
		cur.assignor = a.assignor
	}
	if a.topics != nil {
		cur.topics = slices.Sorted(slices.Values(a.topics))
		cur.topics = slices.Compact(cur.topics)
	}
	if a.regex != nil {
		cur.regex = a.regex
		if *a.regex == "" {
			cur.regex = nil
		}
	}
	return cur
}

func sameSubscription(a, b *mmember) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return slices.Equal(a.topics, b.topics) && eq(a.regex, b.regex) && eq(a.assignor, b.assignor) && eq(a.rackID, b.rackID)
}

// subset says whether every owned partition is in a; nil owned is not.
func subset(owned, a assignment) bool {
	if owned == nil {
		return false
	}
	for t, ps := range owned {
		for _, p := range ps {
			if !a.has(t, p) {
				return false
			}
		}
	}
	return true
}

// resolveRegexes resolves the regular expressions members subscribe with
// against the topics of img (whole-name matches, as Kafka's RE2J), when
// one is new or the image changed, and records what changed. It returns
// each regex's topics.
func (s *shardState) resolveRegexes(c *change, g *group, members []*mmember, img *metadata.Image, force bool) (map[string][]string, error) {
	m := g.m
	out := map[string][]string{}
	for _, mm := range members {
		if mm.regex == nil {
			continue
		}
		re := *mm.regex
		if _, done := out[re]; done {
			continue
		}
		v, ok := m.regexes[re]
		if ok && img.Index == m.checked && !force {
			out[re] = v.topics
			continue
		}
		rx, err := regexp.Compile(`^(?:` + re + `)$`)
		if err != nil {
			return nil, fmt.Errorf("subscribed regular expression %q: %v: %w", re, err, kerr.InvalidRegularExpression)
		}
		var topics []string
		for name := range img.Topics {
			if rx.MatchString(name) {
				topics = append(topics, name)
			}
		}
		slices.Sort(topics)
		out[re] = topics
		if !ok || !slices.Equal(v.topics, topics) {
			nv := regexValue{topics: topics, version: int64(img.Index), timestampMs: s.nowMs()}
			c.put(modernKey{recConsumerRegex, g.name, re}, nv.encode())
			c.then(func() { m.regexes[re] = nv })
		}
	}
	for re := range m.regexes {
		if _, used := out[re]; !used {
			c.put(modernKey{recConsumerRegex, g.name, re}, nil)
			c.then(func() { delete(m.regexes, re) })
		}
	}
	return out, nil
}

// subscribedNames are the topic names any member subscribes to, by name
// or through a regex.
func subscribedNames(members []*mmember, regexes map[string][]string) []string {
	var names []string
	for _, mm := range members {
		names = append(names, mm.topics...)
		if mm.regex != nil {
			names = append(names, regexes[*mm.regex]...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// metadataHash fingerprints what the assignment depends on in the
// metadata of the subscribed topics (IDs, partition counts, racks): a
// change bumps the group epoch (Kafka 4.1's MetadataHash).
func metadataHash(img *metadata.Image, names []string) int64 {
	h := fnv.New64a()
	for _, name := range names {
		t := img.Topics[name]
		if t == nil {
			continue
		}
		at := newAssignTopic(img, t)
		fmt.Fprintf(h, "%s/%x/%d;", name, t.ID[:], at.partitions)
		for _, racks := range at.racks {
			fmt.Fprintf(h, "%v,", racks)
		}
	}
	return int64(h.Sum64())
}

// memberTopics are the IDs of the existing topics a member subscribes to.
func memberTopics(mm *mmember, regexes map[string][]string, img *metadata.Image, in *assignInput) []uuid.UUID {
	names := slices.Clone(mm.topics)
	if mm.regex != nil {
		names = append(names, regexes[*mm.regex]...)
	}
	var ids []uuid.UUID
	for _, name := range names {
		if t := img.Topics[name]; t != nil && !slices.Contains(ids, t.ID) {
			ids = append(ids, t.ID)
			if in.topics[t.ID] == nil {
				in.topics[t.ID] = newAssignTopic(img, t)
			}
		}
	}
	return ids
}

// computeTargets runs the group's server assignor over members; prev is
// each member's current target, which the uniform assignor keeps where
// it can.
func (s *shardState) computeTargets(members []*mmember, prev func(string) assignment, regexes map[string][]string, img *metadata.Image) map[string]assignment {
	in := &assignInput{topics: map[uuid.UUID]*assignTopic{}}
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(a, b *mmember) int { return cmpString(a.id, b.id) })
	for _, mm := range sorted {
		am := assignMember{id: mm.id, topics: memberTopics(mm, regexes, img, in), prev: prev(mm.id)}
		if mm.rackID != nil {
			am.rack = *mm.rackID
		}
		in.members = append(in.members, am)
	}
	if preferredAssignor(sorted, s.p.cfg.Assignors[0]) == "range" {
		return assignRange(in)
	}
	return assignUniform(in)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// reconcile moves a member one step towards its target (Kafka's
// CurrentAssignmentBuilder): partitions to give up are revoked first,
// with the member keeping its epoch until it no longer owns them;
// partitions another member still holds (taken) are left for later;
// the rest are assigned at the target epoch. Partitions of deleted
// topics (exists false) are dropped without a revocation.
func reconcile(cur *mmember, target assignment, targetEpoch int32, owned assignment, taken func(tpid) bool, exists func(uuid.UUID) bool) *mmember {
	switch cur.state {
	case memberStable:
		if cur.epoch == targetEpoch {
			return cur
		}
		return nextAssignment(cur, cur.epoch, target, targetEpoch, owned, taken, exists)
	case memberUnrevokedPartitions:
		if ownsAny(owned, cur.revoking) {
			return cur
		}
		return nextAssignment(cur, cur.epoch+1, target, targetEpoch, owned, taken, exists)
	default: // unreleased partitions, or a state of a newer version
		return nextAssignment(cur, cur.epoch, target, targetEpoch, owned, taken, exists)
	}
}

// ownsAny says whether the member still owns any of a; a member that did
// not report what it owns (nil) is taken to own them all.
func ownsAny(owned, a assignment) bool {
	if owned == nil {
		return true
	}
	for t, ps := range owned {
		for _, p := range ps {
			if a.has(t, p) {
				return true
			}
		}
	}
	return false
}

func nextAssignment(cur *mmember, memberEpoch int32, target assignment, targetEpoch int32, owned assignment, taken func(tpid) bool, exists func(uuid.UUID) bool) *mmember {
	keep, revoke, add := assignment{}, assignment{}, assignment{}
	unreleased := false
	topics := map[uuid.UUID]bool{}
	for t := range target {
		topics[t] = true
	}
	for t := range cur.assigned {
		topics[t] = true
	}
	for t := range topics {
		if !exists(t) {
			continue
		}
		for _, p := range cur.assigned[t] {
			if target.has(t, p) {
				keep.add(t, p)
			} else {
				revoke.add(t, p)
			}
		}
		for _, p := range target[t] {
			switch {
			case keep.has(t, p):
			case taken(tpid{t, p}):
				unreleased = true
			default:
				add.add(t, p)
			}
		}
	}
	next := cur.clone()
	setEpoch := func(e int32) {
		if e != next.epoch {
			next.prevEpoch, next.epoch = next.epoch, e
		}
	}
	next.revoking = assignment{}
	switch {
	case len(revoke) > 0 && ownsAny(owned, revoke):
		next.state = memberUnrevokedPartitions
		setEpoch(memberEpoch)
		next.assigned, next.revoking = keep, revoke
	default:
		for t, ps := range add {
			for _, p := range ps {
				keep.add(t, p)
			}
		}
		next.state = memberStable
		if unreleased {
			next.state = memberUnreleased
		}
		setEpoch(targetEpoch)
		next.assigned = keep
	}
	return next
}

// consumerLeave handles a heartbeat with epoch -1 (the member leaves) or
// -2 (a static member leaves for now: it keeps its partitions until its
// session expires or its instance returns).
func (s *shardState) consumerLeave(c *change, g *group, a *cgHeartbeat) (cgAnswer, error) {
	m := g.m
	id := a.memberID
	if a.instanceID != nil {
		cur, ok := m.static[*a.instanceID]
		if !ok {
			return cgAnswer{}, fmt.Errorf("instance %s is not in group %s: %w", *a.instanceID, g.name, kerr.UnknownMemberID)
		}
		if cur != id {
			return cgAnswer{}, fmt.Errorf("instance %s is member %s: %w", *a.instanceID, cur, kerr.FencedInstanceID)
		}
	}
	mm := m.members[id]
	if mm == nil {
		return cgAnswer{}, fmt.Errorf("member %s is not in group %s: %w", id, g.name, kerr.UnknownMemberID)
	}
	if a.epoch == staticLeaveEpoch {
		next := mm.clone()
		next.prevEpoch, next.epoch = mm.epoch, staticLeaveEpoch
		next.revoking = assignment{}
		c.put(modernKey{recConsumerCurrent, g.name, id}, next.currentValue().encode(true))
		c.then(func() { m.putMember(next) })
		if err := s.commitChange(c); err != nil {
			return cgAnswer{}, err
		}
		s.armSession(g, next)
		s.armRebalance(g, next)
		return cgAnswer{memberID: id, epoch: staticLeaveEpoch}, nil
	}
	s.fence(c, g, mm)
	if err := s.commitChange(c); err != nil {
		return cgAnswer{}, err
	}
	return cgAnswer{memberID: id, epoch: leaveEpoch}, nil
}

// fence adds to c the removal of a member (it left, its session expired,
// or it did not revoke in time): its records are deleted and the group
// epoch is bumped so that the others get its partitions.
func (s *shardState) fence(c *change, g *group, mm *mmember) {
	m := g.m
	c.recs = append(c.recs, memberTombstones(g.kind, g.name, mm.id)...)
	epoch := m.epoch + 1
	meta, _, _, _, _ := modernTypes(g.kind)
	c.put(modernKey{typ: meta, group: g.name}, groupMetaValue{epoch: epoch, metadataHash: m.metadataHash, createdMs: m.createdMs}.encode(g.kind == kindConsumer))
	if mm.regex != nil {
		used := false
		for _, o := range m.members {
			used = used || o.id != mm.id && o.regex != nil && *o.regex == *mm.regex
		}
		if _, ok := m.regexes[*mm.regex]; ok && !used {
			re := *mm.regex
			c.put(modernKey{recConsumerRegex, g.name, re}, nil)
			c.then(func() { delete(m.regexes, re) })
		}
	}
	c.then(func() {
		m.removeMember(mm)
		m.epoch = epoch
		if len(m.members) == 0 {
			s.setEmptySince(g)
		}
		if g.kind == kindShare {
			s.p.shareMemberLeft(g.name, mm.id) // its records are released
		}
	})
}

// fenceNow removes a member at once (session or rebalance timeout).
func (s *shardState) fenceNow(g *group, mm *mmember, why string) {
	c := &change{}
	s.fence(c, g, mm)
	if err := s.commitChange(c); err != nil {
		s.p.log.Warn("removing a member", "group", g.name, "member", mm.id, "why", why, "err", err)
		return
	}
	s.p.log.Info("member removed", "group", g.name, "member", mm.id, "why", why)
}

// setEmptySince records when the group's membership last changed to or
// from empty: offsets of an empty group expire from then.
func (s *shardState) setEmptySince(g *group) { g.stateMs = s.nowMs() }

// armSession (re)starts a member's session timer.
func (s *shardState) armSession(g *group, mm *mmember) {
	if mm.stopSession != nil {
		mm.stopSession()
	}
	id, name := mm.id, g.name
	mm.stopSession = s.sh.AfterFunc(s.p.sessionTimeout(g), func() {
		if s.groups[name] != g {
			return
		}
		if cur := g.m.members[id]; cur != nil {
			s.fenceNow(g, cur, "session timeout")
		}
	})
}

// armRebalance starts the rebalance timer of a member that must revoke
// partitions (once per epoch), or stops it once it has.
func (s *shardState) armRebalance(g *group, mm *mmember) {
	if mm.state != memberUnrevokedPartitions {
		if mm.stopRebalance != nil {
			mm.stopRebalance()
			mm.stopRebalance = nil
		}
		return
	}
	if mm.stopRebalance != nil {
		return // armed when this revocation began
	}
	id, epoch := mm.id, mm.epoch
	d := time.Duration(max(mm.rebalanceTimeoutMs, 0)) * time.Millisecond
	mm.stopRebalance = s.sh.AfterFunc(d, func() {
		if cur := g.m.members[id]; s.groups[g.name] == g && cur != nil && cur.state == memberUnrevokedPartitions && cur.epoch == epoch {
			s.fenceNow(g, cur, "rebalance timeout: partitions not revoked")
		}
	})
}
