package share

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Share sessions (KIP-932): a member's ShareFetch requests to a broker
// form a session that remembers the partitions it fetches, so that each
// request lists only what changed. Epoch 0 opens a session (replacing the
// member's previous one, whose acquired records are released), each
// ShareFetch or ShareAcknowledge must carry the next epoch, and -1 closes
// it, releasing what the member still holds.

type sessionKey struct{ group, member string }

type tpKey struct {
	id uuid.UUID
	p  int32
}

type session struct {
	epoch int32
	parts map[tpKey]bool
}

// maxFetchBytes bounds the records of one ShareFetch response, which is
// assembled in memory: Kafka's fetch.max.bytes default.
const maxFetchBytes = 55 << 20

// nextEpoch follows Kafka: after MaxInt32 comes 1.
func nextEpoch(e int32) int32 {
	if e == math.MaxInt32 {
		return 1
	}
	return e + 1
}

// openSession handles a request's session epoch: it returns the session
// (nil for a final request), or a top-level error. ack says whether the
// request is a ShareAcknowledge, which cannot open a session.
func (p *Plugin) openSession(group, member string, epoch int32, ack bool) (*session, []tpKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := sessionKey{group, member}
	cur := p.sessions[k]
	switch {
	case epoch == 0 && ack:
		return nil, nil, fmt.Errorf("ShareAcknowledge cannot open a share session: %w", kerr.InvalidShareSessionEpoch)
	case epoch == 0:
		var released []tpKey
		if cur != nil {
			released = sortedKeys(cur.parts)
		} else if len(p.sessions) >= p.cfg.MaxSessions {
			return nil, nil, fmt.Errorf("%d share sessions: %w", len(p.sessions), kerr.ShareSessionLimitReached)
		}
		s := &session{epoch: 1, parts: map[tpKey]bool{}}
		p.sessions[k] = s
		return s, released, nil
	case cur == nil:
		return nil, nil, fmt.Errorf("no share session for member %s of group %s: %w", member, group, kerr.ShareSessionNotFound)
	case epoch == -1:
		delete(p.sessions, k)
		return nil, sortedKeys(cur.parts), nil
	case epoch != cur.epoch:
		return nil, nil, fmt.Errorf("share session epoch %d, expected %d: %w", epoch, cur.epoch, kerr.InvalidShareSessionEpoch)
	}
	cur.epoch = nextEpoch(cur.epoch)
	return cur, nil, nil
}

// release releases what member acquired in partitions (its session
// ended).
func (p *Plugin) release(ctx context.Context, group, member string, parts []tpKey) {
	for _, tp := range parts {
		k := stateKey{group, tp.id, tp.p}
		p.mu.Lock()
		sp := p.parts[k]
		p.mu.Unlock()
		if sp == nil {
			continue // not loaded: nothing is acquired
		}
		err := p.withPartition(ctx, k, sp.topic, func(sp *sharePartition) error { return sp.releaseMember(ctx, member) })
		if err != nil {
			p.log.Warn("releasing a member's records", "group", group, "member", member, "partition", tp.p, "err", err)
		}
	}
}

// releaseLater is release in the background.
func (p *Plugin) releaseLater(group, member string, parts []tpKey) {
	p.mu.Lock()
	if p.stopped || len(parts) == 0 {
		p.mu.Unlock()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Contain(func() { p.release(ctx, group, member, parts) })
	}()
}

// ShareMemberLeft implements plugin.ShareMemberListener: the member's
// session ends and its records are released.
func (p *Plugin) ShareMemberLeft(group, member string) {
	p.mu.Lock()
	s := p.sessions[sessionKey{group, member}]
	delete(p.sessions, sessionKey{group, member})
	var parts []tpKey
	for k := range p.parts {
		if k.group == group {
			parts = append(parts, tpKey{k.topic, k.partition})
		}
	}
	p.mu.Unlock()
	if s != nil || len(parts) > 0 {
		p.releaseLater(group, member, parts)
	}
}

var _ plugin.ShareMemberListener = (*Plugin)(nil)

// target is a partition a request names, resolved against the image.
type target struct {
	tp    tpKey
	topic string // "" for an unknown topic ID
	err   error  // why it cannot be served here
}

// resolve checks a partition: the topic exists, the request may read it,
// and this broker leads it.
func (p *Plugin) resolve(rc *plugin.RequestContext, img *metadata.Image, tp tpKey) target {
	t := img.TopicsByID[tp.id]
	switch {
	case t == nil:
		return target{tp: tp, err: kerr.UnknownTopicID}
	case !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Name):
		return target{tp: tp, topic: t.Name, err: kerr.TopicAuthorizationFailed}
	case tp.p < 0 || int(tp.p) >= len(t.Partitions):
		return target{tp: tp, topic: t.Name, err: kerr.UnknownTopicOrPartition}
	case t.Partitions[tp.p].Leader != p.Host().NodeID():
		return target{tp: tp, topic: t.Name, err: kerr.NotLeaderForPartition}
	}
	return target{tp: tp, topic: t.Name}
}

// leader is what a partition error answers about the current leader.
func leader(img *metadata.Image, tp tpKey) (id, epoch int32) {
	if t := img.TopicsByID[tp.id]; t != nil && tp.p >= 0 && int(tp.p) < len(t.Partitions) {
		return t.Partitions[tp.p].Leader, t.Partitions[tp.p].LeaderEpoch
	}
	return -1, -1
}

// acknowledge applies one partition's acknowledgements.
func (p *Plugin) acknowledge(ctx context.Context, rc *plugin.RequestContext, img *metadata.Image, group, member string, tp tpKey, batches []ackBatch, renew bool) error {
	tg := p.resolve(rc, img, tp)
	if tg.err != nil {
		return tg.err
	}
	return p.withPartition(ctx, stateKey{group, tp.id, tp.p}, tg.topic, func(sp *sharePartition) error {
		return sp.ack(ctx, member, batches, renew)
	})
}

// shareResult is what ShareFetch answers for one partition.
type shareResult struct {
	err, ackErr error
	acked       bool
	records     []byte
	acquired    []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
}

func (p *Plugin) handleShareFetch(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareFetchRequest) *kmsg.ShareFetchResponse {
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	fail := func(err error) *kmsg.ShareFetchResponse {
		resp.ErrorCode, resp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
		return resp
	}
	if req.GroupID == nil || *req.GroupID == "" || req.MemberID == nil || *req.MemberID == "" {
		return fail(fmt.Errorf("GroupId and MemberId must be set: %w", kerr.InvalidRequest))
	}
	group, member := *req.GroupID, *req.MemberID
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, group) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	cfg := p.groupConfig(group)
	resp.AcquisitionLockTimeoutMillis = int32(cfg.RecordLock.Milliseconds())
	acks := map[tpKey][]ackBatch{}
	var order []tpKey // the request's partitions, in order
	for _, t := range req.Topics {
		for _, pt := range t.Partitions {
			tp := tpKey{t.TopicID, pt.Partition}
			if !slices.Contains(order, tp) {
				order = append(order, tp)
			}
			for _, b := range pt.AcknowledgementBatches {
				acks[tp] = append(acks[tp], ackBatch{b.FirstOffset, b.LastOffset, b.AcknowledgeTypes})
			}
		}
	}
	if req.ShareSessionEpoch == 0 && len(acks) > 0 {
		return fail(fmt.Errorf("acknowledgements in a request that opens a share session: %w", kerr.InvalidRequest))
	}
	s, released, err := p.openSession(group, member, req.ShareSessionEpoch, false)
	if err != nil {
		return fail(err)
	}
	if s != nil { // a new session replaced the member's previous one
		p.release(ctx, group, member, released)
	}
	img := p.Image()
	results := map[tpKey]*shareResult{}
	result := func(tp tpKey) *shareResult {
		if results[tp] == nil {
			results[tp] = &shareResult{}
		}
		return results[tp]
	}
	for _, tp := range order {
		if bs := acks[tp]; len(bs) > 0 {
			r := result(tp)
			r.acked, r.ackErr = true, p.acknowledge(ctx, rc, img, group, member, tp, bs, req.IsRenewAck)
		}
	}
	if s != nil && !req.IsRenewAck {
		p.mu.Lock()
		for _, tp := range order {
			s.parts[tp] = true
		}
		for _, f := range req.ForgottenTopicsData {
			for _, part := range f.Partitions {
				delete(s.parts, tpKey{f.TopicID, part})
			}
		}
		fetching := sortedKeys(s.parts)
		p.mu.Unlock()
		p.fetch(ctx, rc, req, group, member, fetching, result)
	}
	if s == nil { // a final request: the session ends
		p.release(ctx, group, member, append(released, order...))
	}
	for _, tp := range sortedKeys(results) {
		r := results[tp]
		rp := kmsg.NewShareFetchResponseTopicPartition()
		rp.Partition, rp.Records, rp.AcquiredRecords = tp.p, r.records, r.acquired
		rp.ErrorCode, rp.ErrorMessage = plugin.ErrorCode(r.err), plugin.ErrorMessage(r.err)
		rp.AcknowledgeErrorCode, rp.AcknowledgeErrorMessage = plugin.ErrorCode(r.ackErr), plugin.ErrorMessage(r.ackErr)
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leader(img, tp)
		if rp.AcquiredRecords == nil {
			rp.AcquiredRecords = []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{}
		}
		if n := len(resp.Topics); n > 0 && resp.Topics[n-1].TopicID == tp.id {
			resp.Topics[n-1].Partitions = append(resp.Topics[n-1].Partitions, rp)
		} else {
			resp.Topics = append(resp.Topics, kmsg.ShareFetchResponseTopic{TopicID: tp.id, Partitions: []kmsg.ShareFetchResponseTopicPartition{rp}})
		}
		if r.err == kerr.NotLeaderForPartition {
			p.addEndpoint(img, resp, tp)
		}
	}
	return resp
}

// fetch acquires records from the session's partitions, waiting up to
// MaxWaitMillis for some while there are none.
func (p *Plugin) fetch(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareFetchRequest, group, member string, parts []tpKey, result func(tpKey) *shareResult) {
	maxRecords := int(req.MaxRecords)
	if req.Version < 1 || maxRecords <= 0 {
		maxRecords = 500 // Kafka's share.max.fetch.records
	}
	// The response is built in memory: at most maxFetchBytes of it,
	// whatever the client asks for (it still gets at least one batch).
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 || maxBytes > maxFetchBytes {
		maxBytes = maxFetchBytes
	}
	wait := time.NewTimer(time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond)
	defer wait.Stop()
	for {
		img := p.Image()
		var wakes []<-chan struct{}
		got := 0
		for _, tp := range parts {
			tg := p.resolve(rc, img, tp)
			if tg.err != nil {
				result(tp).err = tg.err
				continue
			}
			lim := fetchLimits{maxRecords: maxRecords - got, maxBytes: maxBytes, strict: req.ShareAcquireMode == 1}
			if lim.maxRecords <= 0 || lim.maxBytes <= 0 {
				break
			}
			k := stateKey{group, tp.id, tp.p}
			err := p.withPartition(ctx, k, tg.topic, func(sp *sharePartition) error {
				ep, err := sp.enginePartition()
				if err != nil {
					return err
				}
				wakes = append(wakes, ep.Wait(), sp.wake) // before acquiring: no missed wakeup
				raws, acquired, err := sp.acquire(member, lim, time.Now())
				if err != nil || len(acquired) == 0 {
					return err
				}
				r := result(tp)
				for _, raw := range raws {
					r.records = append(r.records, raw...)
					maxBytes -= len(raw)
				}
				r.acquired = append(r.acquired, acquired...)
				for _, a := range acquired {
					got += int(a.LastOffset - a.FirstOffset + 1)
				}
				return nil
			})
			if err != nil {
				result(tp).err = err
			}
		}
		if got > 0 || len(wakes) == 0 {
			return
		}
		if !waitAny(ctx, wait.C, wakes) {
			return
		}
	}
}

// waitAny waits until one of chans closes (true), or timeout or ctx ends.
func waitAny(ctx context.Context, timeout <-chan time.Time, chans []<-chan struct{}) bool {
	done := make(chan struct{})
	defer close(done)
	woke := make(chan struct{}, 1)
	for _, c := range chans {
		go func() {
			select {
			case <-c:
				select {
				case woke <- struct{}{}:
				default:
				}
			case <-done:
			}
		}()
	}
	select {
	case <-woke:
		return true
	case <-timeout:
	case <-ctx.Done():
	}
	return false
}

// sortedKeys lists the partitions of m by topic ID and partition.
func sortedKeys[V any](m map[tpKey]V) []tpKey {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b tpKey) int {
		if c := slices.Compare(a.id[:], b.id[:]); c != 0 {
			return c
		}
		return int(a.p - b.p)
	})
	return keys
}

// addEndpoint adds the leader of tp to a NOT_LEADER_OR_FOLLOWER answer.
func (p *Plugin) addEndpoint(img *metadata.Image, resp *kmsg.ShareFetchResponse, tp tpKey) {
	id, _ := leader(img, tp)
	b, ok := img.Brokers[id]
	if !ok || slices.ContainsFunc(resp.NodeEndpoints, func(e kmsg.ShareFetchResponseNodeEndpoint) bool { return e.NodeID == id }) {
		return
	}
	e := kmsg.ShareFetchResponseNodeEndpoint{NodeID: id, Host: b.Host, Port: b.Port}
	if b.Rack != "" {
		e.Rack = &b.Rack
	}
	resp.NodeEndpoints = append(resp.NodeEndpoints, e)
}

func (p *Plugin) handleShareAcknowledge(ctx context.Context, rc *plugin.RequestContext, req *kmsg.ShareAcknowledgeRequest) *kmsg.ShareAcknowledgeResponse {
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	fail := func(err error) *kmsg.ShareAcknowledgeResponse {
		resp.ErrorCode, resp.ErrorMessage = plugin.ErrorCode(err), plugin.ErrorMessage(err)
		return resp
	}
	if req.GroupID == nil || *req.GroupID == "" || req.MemberID == nil || *req.MemberID == "" {
		return fail(fmt.Errorf("GroupId and MemberId must be set: %w", kerr.InvalidRequest))
	}
	group, member := *req.GroupID, *req.MemberID
	if !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, group) {
		return fail(kerr.GroupAuthorizationFailed)
	}
	resp.AcquisitionLockTimeoutMillis = int32(p.groupConfig(group).RecordLock.Milliseconds())
	s, released, err := p.openSession(group, member, req.ShareSessionEpoch, true)
	if err != nil {
		return fail(err)
	}
	img := p.Image()
	for _, t := range req.Topics {
		rt := kmsg.ShareAcknowledgeResponseTopic{TopicID: t.TopicID}
		for _, pt := range t.Partitions {
			tp := tpKey{t.TopicID, pt.Partition}
			var bs []ackBatch
			for _, b := range pt.AcknowledgementBatches {
				bs = append(bs, ackBatch{b.FirstOffset, b.LastOffset, b.AcknowledgeTypes})
			}
			err := p.acknowledge(ctx, rc, img, group, member, tp, bs, req.IsRenewAck)
			rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.ErrorMessage = pt.Partition, plugin.ErrorCode(err), plugin.ErrorMessage(err)
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leader(img, tp)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if s == nil { // final: the session ended; what the member still holds is released
		p.release(ctx, group, member, released)
	}
	return resp
}
