package groups

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
)

type groupState int8

const (
	stateEmpty groupState = iota
	statePreparingRebalance
	stateCompletingRebalance
	stateStable
	stateDead
)

// String is the state as Kafka names it in DescribeGroups and ListGroups.
func (s groupState) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}[s]
}

// offset is a committed offset.
type offset struct {
	offset   int64
	epoch    int32
	metadata string
	commitMs int64
}

type protocol struct {
	name     string
	metadata []byte
}

// joinResult and syncResult answer a member waiting in JoinGroup or
// SyncGroup; the channels have room for one answer so that the shard never
// blocks on a handler.
type joinResult struct {
	err        error
	generation int32
	protocol   string
	leader     string
	memberID   string
	members    []kmsg.JoinGroupResponseMember // the leader's copy only
}

type syncResult struct {
	err        error
	assignment []byte
}

type member struct {
	id, clientID, clientHost string
	instanceID               *string
	rebalanceTimeoutMs       int32
	sessionTimeoutMs         int32
	protocolType             string
	protocols                []protocol
	assignment               []byte

	join     chan joinResult // waiting in JoinGroup
	sync     chan syncResult // waiting in SyncGroup
	isNew    bool            // joined during the current rebalance
	stopBeat func() bool     // session timer
}

func (m *member) metadata(name string) []byte {
	for _, p := range m.protocols {
		if p.name == name {
			return p.metadata
		}
	}
	return nil
}

func (m *member) sameProtocols(ps []protocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b protocol) bool {
		return a.name == b.name && string(a.metadata) == string(b.metadata)
	})
}

type group struct {
	name         string
	kind         groupKind
	m            *modern // consumer and share groups
	state        groupState
	stateMs      int64 // when the state last changed
	protocolType string
	protocol     string
	generation   int32
	leader       string
	members      map[string]*member
	pending      map[string]func() bool // member ids given out with MEMBER_ID_REQUIRED → their expiry timer
	static       map[string]string      // group.instance.id → member id
	offsets      map[tp]offset

	stopJoin     func() bool // the rebalance (or initial delay) timer
	delayed      bool        // the initial delay runs: only its timer completes the join
	newMemberAdd bool        // a member joined during the initial delay
}

func newGroup(name string, nowMs int64) *group {
	return &group{name: name, stateMs: nowMs, members: map[string]*member{}, pending: map[string]func() bool{},
		static: map[string]string{}, offsets: map[tp]offset{}}
}

func (g *group) sortedMembers() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b *member) int { return strings.Compare(a.id, b.id) })
	return ms
}

// shardState is one partition of __consumer_offsets: the groups hashed
// to it. The coordinator runtime serialises every call.
type shardState struct {
	p         *Plugin
	partition int32
	sh        *coord.Shard // set by Loaded
	groups    map[string]*group
	// pending holds transactional offset commits until their marker:
	// producer id → group → offsets.
	pending map[int64]map[string]map[tp]offset
}

func newShardState(p *Plugin, partition int32) *shardState {
	return &shardState{p: p, partition: partition, groups: map[string]*group{}}
}

func (s *shardState) nowMs() int64 { return s.p.now().UnixMilli() }

// Replay implements coord.StateMachine.
func (s *shardState) Replay(key, value []byte) error {
	if isModernKey(key) {
		if err := s.replayModern(key, value); err != nil {
			s.p.log.Warn("skipping undecodable record of "+Topic, "partition", s.partition, "err", err)
		}
		return nil
	}
	d, err := decodeRecord(key, value)
	if err != nil {
		// Records of types Tandem does not know (streams groups,
		// newer versions) are skipped, as Kafka skips unknown record
		// types.
		s.p.log.Warn("skipping undecodable record of "+Topic, "partition", s.partition, "err", err)
		return nil
	}
	g := s.groups[d.group]
	if d.isTP {
		if d.offset == nil {
			if g != nil {
				delete(g.offsets, d.tp)
				if g.kind == kindClassic && g.protocolType == "" && len(g.members) == 0 && len(g.offsets) == 0 {
					delete(s.groups, d.group) // a simple group whose last offset went
				}
			}
			return nil
		}
		if g == nil {
			g = newGroup(d.group, s.nowMs())
			s.groups[d.group] = g
		}
		g.offsets[d.tp] = offset{offset: d.offset.Offset, epoch: d.offset.LeaderEpoch, metadata: d.offset.Metadata, commitMs: d.offset.CommitTimestamp}
		return nil
	}
	if d.meta == nil { // the classic group was deleted or converted
		if g != nil && g.kind == kindClassic {
			if len(g.offsets) == 0 {
				delete(s.groups, d.group)
			} else { // a simple group holding the offsets, as Kafka keeps them
				ng := newGroup(d.group, s.nowMs())
				ng.offsets = g.offsets
				s.groups[d.group] = ng
			}
		}
		return nil
	}
	offsets := map[tp]offset{}
	if g != nil {
		offsets = g.offsets
	}
	g = newGroup(d.group, d.meta.CurrentStateTimestamp)
	g.offsets = offsets
	g.protocolType, g.generation = d.meta.ProtocolType, d.meta.Generation
	if d.meta.Protocol != nil {
		g.protocol = *d.meta.Protocol
	}
	if d.meta.Leader != nil {
		g.leader = *d.meta.Leader
	}
	for _, dm := range d.meta.Members {
		m := &member{id: dm.MemberID, instanceID: dm.InstanceID, clientID: dm.ClientID, clientHost: dm.ClientHost,
			rebalanceTimeoutMs: dm.RebalanceTimeoutMillis, sessionTimeoutMs: dm.SessionTimeoutMillis,
			protocolType: g.protocolType, protocols: []protocol{{g.protocol, dm.Subscription}}, assignment: dm.Assignment}
		g.members[m.id] = m
		if m.instanceID != nil {
			g.static[*m.instanceID] = m.id
		}
	}
	// A group with members comes back Stable: its members continue
	// with their generation and assignments, or their sessions expire.
	if len(g.members) > 0 {
		g.state = stateStable
	}
	s.groups[d.group] = g
	return nil
}

// Loaded implements coord.StateMachine: members loaded from the log get a
// session timer, and the offsets retention pass starts.
func (s *shardState) Loaded(sh *coord.Shard) {
	s.sh = sh
	for _, g := range s.groups {
		if g.kind != kindClassic {
			s.loadedModern(g)
			continue
		}
		for _, m := range g.members {
			s.heartbeat(g, m)
		}
	}
	var expire func()
	expire = func() {
		s.expireOffsets()
		sh.AfterFunc(s.p.cfg.RetentionCheck, expire)
	}
	sh.AfterFunc(s.p.cfg.RetentionCheck, expire)
}

// Unloaded implements coord.StateMachine: whoever waits gets
// NOT_COORDINATOR and finds the new coordinator.
func (s *shardState) Unloaded() {
	for _, g := range s.groups {
		if g.m != nil {
			for _, mm := range g.m.members {
				stopTimers(mm)
			}
		}
		for _, m := range g.members {
			s.answerJoin(m, joinResult{err: kerr.NotCoordinator})
			s.answerSync(m, syncResult{err: kerr.NotCoordinator})
			if m.stopBeat != nil {
				m.stopBeat()
			}
		}
		if g.stopJoin != nil {
			g.stopJoin()
		}
	}
	s.groups = nil
}

func (s *shardState) write(recs ...coord.Record) error {
	return s.sh.Write(s.sh.Context(), recs...)
}

// commit writes offsets and then applies them.
func (s *shardState) commit(name string, offsets map[tp]offset) error {
	recs := make([]coord.Record, 0, len(offsets))
	for t, o := range offsets {
		recs = append(recs, coord.Record{Key: offsetKey(name, t), Value: offsetValue(o)})
	}
	if err := s.write(recs...); err != nil {
		return err
	}
	g := s.groups[name]
	if g == nil {
		g = newGroup(name, s.nowMs())
		s.groups[name] = g
	}
	for t, o := range offsets {
		g.offsets[t] = o
	}
	return nil
}

// storeGroup persists the group's metadata (generation, members,
// assignments).
func (s *shardState) storeGroup(g *group) error {
	return s.write(coord.Record{Key: groupKey(g.name), Value: groupValue(g)})
}

func (s *shardState) setState(g *group, st groupState) {
	g.state, g.stateMs = st, s.nowMs()
}

func (s *shardState) answerJoin(m *member, r joinResult) {
	if m.join != nil {
		m.join <- r
		m.join = nil
	}
}

func (s *shardState) answerSync(m *member, r syncResult) {
	if m.sync != nil {
		m.sync <- r
		m.sync = nil
	}
}

// heartbeat (re)starts a member's session timer. A member waiting in
// JoinGroup or SyncGroup does not expire: the rebalance timeout governs it.
func (s *shardState) heartbeat(g *group, m *member) {
	if m.stopBeat != nil {
		m.stopBeat()
	}
	m.stopBeat = s.sh.AfterFunc(time.Duration(m.sessionTimeoutMs)*time.Millisecond, func() {
		if s.groups[g.name] != g || g.members[m.id] != m {
			return
		}
		if m.join != nil || m.sync != nil {
			s.heartbeat(g, m)
			return
		}
		s.p.log.Info("member session expired", "group", g.name, "member", m.id)
		s.removeMember(g, m)
	})
}

func newMemberID(clientID string) string {
	var b [16]byte
	rand.Read(b[:])
	u := hex.EncodeToString(b[:])
	return fmt.Sprintf("%s-%s-%s-%s-%s-%s", clientID, u[:8], u[8:12], u[12:16], u[16:20], u[20:])
}

// addMember adds a member (new, or one that answered MEMBER_ID_REQUIRED)
// and starts or joins a rebalance.
func (s *shardState) addMember(g *group, m *member) {
	if g.state == stateEmpty {
		g.protocolType = m.protocolType
	}
	if stop, ok := g.pending[m.id]; ok {
		stop()
		delete(g.pending, m.id)
	}
	m.isNew = true
	g.members[m.id] = m
	if m.instanceID != nil {
		g.static[*m.instanceID] = m.id
	}
	if g.delayed {
		g.newMemberAdd = true
	}
	s.heartbeat(g, m)
	s.prepareRebalance(g, "member "+m.id+" joined")
}

// removeMember drops a member that left or expired.
func (s *shardState) removeMember(g *group, m *member) {
	s.answerJoin(m, joinResult{err: kerr.UnknownMemberID})
	s.answerSync(m, syncResult{err: kerr.UnknownMemberID})
	if m.stopBeat != nil {
		m.stopBeat()
	}
	delete(g.members, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	switch g.state {
	case stateStable, stateCompletingRebalance:
		s.prepareRebalance(g, "member "+m.id+" left")
	case statePreparingRebalance:
		s.tryCompleteJoin(g)
	}
}

// prepareRebalance moves the group to PreparingRebalance and arms the
// timer that completes the join: the initial delay for an empty group
// (so that a starting fleet joins one generation), else the largest
// rebalance timeout among the members.
func (s *shardState) prepareRebalance(g *group, reason string) {
	if g.state == statePreparingRebalance {
		s.tryCompleteJoin(g)
		return
	}
	if g.state == stateCompletingRebalance {
		for _, m := range g.members {
			m.assignment = nil
			s.answerSync(m, syncResult{err: kerr.RebalanceInProgress})
		}
	}
	wasEmpty := g.state == stateEmpty
	s.setState(g, statePreparingRebalance)
	s.p.log.Debug("preparing rebalance", "group", g.name, "generation", g.generation, "reason", reason)
	var timeout time.Duration
	for _, m := range g.members {
		timeout = max(timeout, time.Duration(m.rebalanceTimeoutMs)*time.Millisecond)
	}
	if wasEmpty && s.p.cfg.InitialDelay > 0 {
		delay := min(s.p.cfg.InitialDelay, timeout)
		remaining := timeout - delay
		g.newMemberAdd, g.delayed = false, true
		var wait func(d time.Duration)
		wait = func(d time.Duration) {
			g.stopJoin = s.sh.AfterFunc(d, func() {
				if g.state != statePreparingRebalance {
					return
				}
				if g.newMemberAdd && remaining > 0 {
					g.newMemberAdd = false
					next := min(s.p.cfg.InitialDelay, remaining)
					remaining -= next
					wait(next)
					return
				}
				g.stopJoin, g.delayed = nil, false
				s.completeJoin(g)
			})
		}
		wait(delay)
		return
	}
	g.stopJoin = s.sh.AfterFunc(timeout, func() {
		if g.state == statePreparingRebalance {
			g.stopJoin = nil
			s.completeJoin(g)
		}
	})
	s.tryCompleteJoin(g)
}

// tryCompleteJoin completes the join early once every known member has
// rejoined and no MEMBER_ID_REQUIRED member is still expected; during the
// initial delay only the timer completes it.
func (s *shardState) tryCompleteJoin(g *group) {
	if g.state != statePreparingRebalance || len(g.pending) > 0 {
		return
	}
	if g.delayed && len(g.members) > 0 {
		return // the initial delay decides
	}
	for _, m := range g.members {
		if m.join == nil {
			return
		}
	}
	if g.stopJoin != nil {
		g.stopJoin()
		g.stopJoin, g.delayed = nil, false
	}
	s.completeJoin(g)
}

// completeJoin ends PreparingRebalance: members that did not rejoin are
// removed (static members keep their slot), the generation advances, and
// every waiting member gets its JoinGroup answer.
func (s *shardState) completeJoin(g *group) {
	for _, m := range g.sortedMembers() {
		if m.join == nil && m.instanceID == nil {
			if m.stopBeat != nil {
				m.stopBeat()
			}
			delete(g.members, m.id)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.protocol, g.leader = "", ""
		s.setState(g, stateEmpty)
		if err := s.storeGroup(g); err != nil {
			s.p.log.Warn("storing empty group", "group", g.name, "err", err)
		}
		return
	}
	g.protocol = s.selectProtocol(g)
	if _, ok := g.members[g.leader]; !ok {
		g.leader = ""
		for _, m := range g.sortedMembers() {
			if m.join != nil {
				g.leader = m.id
				break
			}
		}
		if g.leader == "" {
			g.leader = g.sortedMembers()[0].id
		}
	}
	s.setState(g, stateCompletingRebalance)
	var all []kmsg.JoinGroupResponseMember
	for _, m := range g.sortedMembers() {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID, jm.InstanceID, jm.ProtocolMetadata = m.id, m.instanceID, m.metadata(g.protocol)
		all = append(all, jm)
	}
	for _, m := range g.members {
		r := joinResult{generation: g.generation, protocol: g.protocol, leader: g.leader, memberID: m.id}
		if m.id == g.leader {
			r.members = all
		}
		m.isNew = false
		s.answerJoin(m, r)
		s.heartbeat(g, m)
	}
}

// selectProtocol picks the protocol every member supports with the most
// votes, each member voting for its first supported choice (Kafka's rule).
func (s *shardState) selectProtocol(g *group) string {
	candidates := s.commonProtocols(g, nil)
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if slices.Contains(candidates, p.name) {
				votes[p.name]++
				break
			}
		}
	}
	best := ""
	for _, c := range candidates {
		if best == "" || votes[c] > votes[best] {
			best = c
		}
	}
	return best
}

// commonProtocols lists, in the order of some member's preference, the
// protocol names every member (and extra, if given) supports.
func (s *shardState) commonProtocols(g *group, extra []protocol) []string {
	var out []string
	var first []protocol
	for _, m := range g.sortedMembers() {
		first = m.protocols
		break
	}
	if first == nil {
		first = extra
	}
	for _, p := range first {
		ok := extra == nil || slices.ContainsFunc(extra, func(e protocol) bool { return e.name == p.name })
		for _, m := range g.members {
			ok = ok && slices.ContainsFunc(m.protocols, func(e protocol) bool { return e.name == p.name })
		}
		if ok {
			out = append(out, p.name)
		}
	}
	return out
}

// expireOffsets drops offsets past offsets.retention.minutes: for an empty
// group with a protocol, all its offsets once it has been empty that long;
// for a simple group (offsets only), each offset older than that. Groups
// left with nothing are deleted.
func (s *shardState) expireOffsets() {
	now := s.nowMs()
	ret := s.p.cfg.Retention.Milliseconds()
	for name, g := range s.groups {
		if g.kind == kindClassic && g.state != stateEmpty || !g.isEmpty() || g.kind == kindShare {
			continue
		}
		var recs []coord.Record
		var expired []tp
		for t, o := range g.offsets {
			since := o.commitMs
			if g.protocolType != "" || g.kind != kindClassic {
				since = max(g.stateMs, o.commitMs)
			}
			if now-since >= ret {
				expired = append(expired, t)
				recs = append(recs, coord.Record{Key: offsetKey(name, t)})
			}
		}
		dead := len(expired) == len(g.offsets)
		if dead && g.kind == kindClassic {
			recs = append(recs, coord.Record{Key: groupKey(name)})
		} else if dead {
			recs = append(recs, modernTombstones(g)...)
		}
		if len(recs) == 0 {
			continue
		}
		if err := s.write(recs...); err != nil {
			s.p.log.Warn("expiring offsets", "group", name, "err", err)
			continue
		}
		for _, t := range expired {
			delete(g.offsets, t)
		}
		if dead {
			s.setState(g, stateDead)
			delete(s.groups, name)
		}
	}
}
