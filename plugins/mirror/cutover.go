package mirror

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/cut"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// A consistent failover (issue 30) stops a set of topics at one cut (the
// rule is package cut's, plugins/mirror/cut). Each partition's STOPPING
// runs its first step as any failover does (the fetcher lets go; StopAt
// persisted), then waits: the leader of the set's first topic's
// partition 0 (the decider) reads what every partition of the set holds
// below its StopAt, from this broker's log or its leader's over Fetch,
// computes the cut, and persists each partition's part of it, its own
// partition last. That last write decides the cut: a partition is
// truncated to its cut only once the decider's partition has one, so a
// decider killed half way leaves nothing truncated, and whoever leads
// that partition next computes the same cut from the same logs. Then
// each partition moves what lies beyond its cut into the divergence
// quarantine, and the stop goes on from the cut as from StopAt.

// cutSetOf names a consistent failover's set of topics.
func cutSetOf(topics []string) string {
	return strings.Join(slices.Sorted(slices.Values(topics)), ",")
}

// cutDecider is the partition whose leader decides the cut of set.
func cutDecider(set string) topicPartition {
	first, _, _ := strings.Cut(set, ",")
	return topicPartition{Topic: first, Partition: 0}
}

// applyCut is STOPPING's consistent-cut step, between removing the
// fetcher and bumping the epoch. It reports whether the stop may go on:
// not while the set's cut is undecided. Once decided, it truncates the
// partition to its cut (quarantining the rest) and persists the cut as
// where the mirrored data ends (StopAt), so that a resumed stop does not
// truncate again what the stop writes after it.
func (r *mirrorRun) applyCut(pt *ledPartition, ep *engine.Partition, st mirrorstate.PartitionState) (mirrorstate.PartitionState, bool, error) {
	c := st.Cut
	if c.Set == "" || c.At >= 0 && st.StopAt <= c.At {
		return st, true, nil
	}
	decider := cutDecider(c.Set)
	if c.At < 0 || pt.topicPartition != decider {
		decided := c.At >= 0
		if decided { // only the decider's own cut says all are written
			if t := r.p.Image().Topics[decider.Topic]; t != nil {
				ds, err := r.p.store.Read(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: decider.Topic, Partition: 0}, t.ID)
				decided = err == nil && ds.Cut.Set == c.Set && ds.Cut.At >= 0
			}
		}
		if !decided {
			if pt.topicPartition == decider {
				return st, false, r.decideCut(c.Set)
			}
			return st, false, nil
		}
	}
	cause := fmt.Sprintf("consistent failover cut at %s", time.UnixMilli(c.Time).UTC().Format(time.RFC3339Nano))
	if err := r.truncate(pt, ep, c.At, cause); err != nil {
		return st, false, r.fail(pt, err)
	}
	r.p.stopHook(pt.Topic, pt.Partition, StepCutApplied)
	k := mirrorstate.PartitionKey{Mirror: r.name, Topic: pt.Topic, Partition: pt.Partition}
	st, err := r.p.store.Write(r.ctx, k, pt.id, func(s *mirrorstate.PartitionState) error {
		s.StopAt = c.At
		return nil
	})
	return st, err == nil, err
}

// cutReason says where a partition stands in a consistent failover, for
// --describe and the console: waiting for the cut, or where it was cut
// and what that gave up.
func cutReason(st mirrorstate.PartitionState) string {
	c := st.Cut
	switch {
	case c.Set == "" || st.State != mirrorstate.Stopping && st.State != mirrorstate.Stopped:
		return ""
	case c.At < 0:
		return fmt.Sprintf("failing over at one consistent cut with topics %s: waiting until every partition's fetcher let go and the cut is decided", c.Set)
	}
	return fmt.Sprintf("consistent cut at %s: %d record(s), %d ms of record time, beyond it moved to the divergence quarantine",
		time.UnixMilli(c.Time).UTC().Format(time.RFC3339Nano), c.Records, c.Ms)
}

// cutMember is one partition of a consistent failover's set.
type cutMember struct {
	topicPartition
	id    uuid.UUID
	state mirrorstate.PartitionState
}

// decideCut computes the cut of set once every partition of it has let
// go of its fetcher, and persists it: see the top of this file. The scan
// of each partition starts a window below its StopAt that grows until
// the cut does not reach its start (cut.Short).
func (r *mirrorRun) decideCut(set string) error {
	img := r.p.Image()
	want := map[topicPartition]uuid.UUID{}
	for _, name := range strings.Split(set, ",") {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			want[topicPartition{Topic: name, Partition: int32(i)}] = t.ID
		}
	}
	states := r.p.store.ReadBatch(r.ctx, r.name, want)
	var members []cutMember
	for k, id := range want {
		st, ok := states[k]
		if !ok {
			var err error
			if st, err = r.p.store.Read(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: k.Topic, Partition: k.Partition}, id); err != nil {
				return err
			}
		}
		if st.Cut.Set != set {
			continue // not stopping with this set: it failed over before
		}
		if st.StopAt < 0 {
			return nil // still mirroring: a later round
		}
		members = append(members, cutMember{k, id, st})
	}
	slices.SortFunc(members, func(a, b cutMember) int {
		return strings.Compare(fmt.Sprint(a.topicPartition), fmt.Sprint(b.topicPartition))
	})
	parts := make([]cut.Part, len(members))
	var t int64
	var cuts []int64
	for span := int64(4096); ; span *= 4 {
		all := true
		for i, m := range members {
			p, err := r.held(m, m.state.StopAt-span, m.state.StopAt)
			if errors.Is(err, errCutNotYet) {
				return nil // a later round
			}
			if err != nil {
				return fmt.Errorf("consistent cut of %s: %w", set, err)
			}
			p.Complete = m.state.CompleteAt
			parts[i] = p
			all = all && p.FromLogStart
		}
		t, cuts = cut.Consistent(parts)
		if all || !cut.Short(parts, cuts) {
			break
		}
	}
	// The decider's partition last: its cut decides the set's.
	decider := cutDecider(set)
	order := make([]int, 0, len(members))
	for i, m := range members {
		if m.topicPartition != decider {
			order = append(order, i)
		}
	}
	for i, m := range members {
		if m.topicPartition == decider {
			order = append(order, i)
		}
	}
	for n, i := range order {
		m := members[i]
		if n == len(order)-1 {
			r.p.stopHook(decider.Topic, decider.Partition, StepCutDeciding)
		}
		records, ms := cut.Loss(parts[i], cuts[i], t)
		if _, err := r.p.store.Write(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: m.Topic, Partition: m.Partition}, m.id, func(s *mirrorstate.PartitionState) error {
			if s.Cut.Set != set {
				return fmt.Errorf("%s-%d left the consistent failover of %s", m.Topic, m.Partition, set)
			}
			s.Cut.At, s.Cut.Time, s.Cut.Records, s.Cut.Ms = cuts[i], t, records, ms
			return nil
		}); err != nil {
			return err
		}
	}
	r.log.Info("consistent failover cut decided", "topics", set, "time", time.UnixMilli(t).UTC(), "partitions", len(members))
	r.poke()
	return nil
}

// errCutNotYet is a partition whose high watermark is below its StopAt:
// what it holds up there is not all readable yet.
var errCutNotYet = errors.New("the log's end is not replicated yet")

// held reads what the cut needs of member m's batches from offset from
// (or its log start, if later) to end: from this broker's log when it
// leads the partition, else from its leader with Fetch.
func (r *mirrorRun) held(m cutMember, from, end int64) (cut.Part, error) {
	host := r.p.Host()
	t := r.p.Image().Topics[m.Topic]
	if t == nil || int(m.Partition) >= len(t.Partitions) {
		return cut.Part{}, fmt.Errorf("%s-%d: %w", m.Topic, m.Partition, kerr.UnknownTopicOrPartition)
	}
	leader := t.Partitions[m.Partition].Leader
	if leader == host.NodeID() {
		if ep := host.Partition(m.id, m.Partition); ep != nil {
			if ep.Offsets().HighWatermark < end {
				return cut.Part{}, errCutNotYet
			}
			return cut.Held(ep, from, end)
		}
	}
	if leader < 0 {
		return cut.Part{}, fmt.Errorf("%s-%d has no leader: %w", m.Topic, m.Partition, kerr.LeaderNotAvailable)
	}
	p := cut.Part{End: end, FromLogStart: true}
	if end <= 0 {
		return p, nil
	}
	// The last batch first: the answer says where the log starts and
	// how far it is readable.
	_, fp, err := r.fetchBatches(leader, m, end-1)
	if errors.Is(err, kerr.OffsetOutOfRange) {
		return p, nil // nothing held below end
	}
	if err != nil {
		return cut.Part{}, err
	}
	if fp.HighWatermark < end {
		return cut.Part{}, errCutNotYet
	}
	from = max(from, fp.LogStartOffset)
	p.FromLogStart = from <= fp.LogStartOffset
	err = p.Read(from, func(off int64) ([]cut.Batch, error) {
		bs, _, err := r.fetchBatches(leader, m, off)
		return bs, err
	})
	if err != nil {
		return cut.Part{}, err
	}
	return p, nil
}

// fetchBatches fetches m's batches from offset (read uncommitted, about
// cut.FetchBytes bytes) from its leader and reads their headers.
func (r *mirrorRun) fetchBatches(leader int32, m cutMember, offset int64) ([]cut.Batch, kmsg.FetchResponseTopicPartition, error) {
	var none kmsg.FetchResponseTopicPartition
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes = -1, cut.FetchBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = m.Topic, m.id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = m.Partition, offset, cut.FetchBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := r.p.store.Send(r.ctx, leader, req)
	if err != nil {
		return nil, none, err
	}
	fr := resp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(fr.ErrorCode); err != nil {
		return nil, none, fmt.Errorf("fetching %s-%d from broker %d: %w", m.Topic, m.Partition, leader, err)
	}
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		return nil, none, fmt.Errorf("fetching %s-%d from broker %d: an answer for other partitions", m.Topic, m.Partition, leader)
	}
	fp := fr.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
		return nil, fp, fmt.Errorf("fetching %s-%d at %d from broker %d: %w", m.Topic, m.Partition, offset, leader, err)
	}
	var out []cut.Batch
	for _, b := range engine.WholeBatches(fp.RecordBatches) {
		cb, err := cut.BatchOf(b)
		if err != nil {
			return nil, none, fmt.Errorf("fetching %s-%d at %d from broker %d: %w", m.Topic, m.Partition, offset, leader, err)
		}
		out = append(out, cb)
	}
	return out, fp, nil
}

// clampGroups lowers, after a consistent failover of topic t, every
// group's committed offset past a partition's cut to the cut, so that a
// consumer resumes at the cut (the metadata sync left those partitions
// alone while they stopped). Groups are found and changed as an admin
// client does: ListGroups on every broker, then OffsetFetch and
// OffsetCommit (generation -1) on the broker that listed the group, its
// coordinator. A group with active members keeps its offsets (Kafka
// refuses an admin commit then; its members own them), and a broker
// that does not answer keeps its groups': both are logged, not retried,
// so that a failover never waits on a consumer or a dead broker.
func (r *mirrorRun) clampGroups(t *metadata.Topic) error {
	cuts := map[int32]int64{}
	for i := range t.Partitions {
		st, err := r.p.store.Read(r.ctx, mirrorstate.PartitionKey{Mirror: r.name, Topic: t.Name, Partition: int32(i)}, t.ID)
		if err != nil {
			return err
		}
		if st.Cut.Set != "" && st.Cut.At >= 0 {
			cuts[int32(i)] = st.Cut.At
		}
	}
	if len(cuts) == 0 {
		return nil
	}
	for node := range r.p.Image().Brokers {
		resp, err := r.p.store.Send(r.ctx, node, kmsg.NewPtrListGroupsRequest())
		if err == nil {
			err = kerr.ErrorForCode(resp.(*kmsg.ListGroupsResponse).ErrorCode)
		}
		if err != nil {
			r.log.Warn("consistent failover: groups of a broker not clamped to the cut", "topic", t.Name, "broker", node, "err", err)
			continue
		}
		for _, g := range resp.(*kmsg.ListGroupsResponse).Groups {
			if g.GroupType == "share" {
				continue
			}
			if err := r.clampGroup(node, g.Group, t.Name, cuts); err != nil {
				r.log.Warn("consistent failover: group not clamped to the cut", "topic", t.Name, "group", g.Group, "err", err)
			}
		}
	}
	return nil
}

// clampGroup lowers group's offsets of topic past cuts to them, on its
// coordinator node.
func (r *mirrorRun) clampGroup(node int32, group, topic string, cuts map[int32]int64) error {
	fetch := kmsg.NewPtrOffsetFetchRequest()
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic = topic
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic = topic
	for p := range cuts {
		ft.Partitions = append(ft.Partitions, p)
		gt.Partitions = append(gt.Partitions, p)
	}
	fetch.Group, fetch.Topics = group, []kmsg.OffsetFetchRequestTopic{ft} // before v8
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group, g.Topics = group, []kmsg.OffsetFetchRequestGroupTopic{gt}
	fetch.Groups = []kmsg.OffsetFetchRequestGroup{g} // v8 on
	resp, err := r.p.store.Send(r.ctx, node, fetch)
	if err != nil {
		return err
	}
	fr := resp.(*kmsg.OffsetFetchResponse)
	type committed struct {
		offset   int64
		metadata *string
	}
	have := map[int32]committed{}
	for _, rt := range fr.Topics {
		for _, rp := range rt.Partitions {
			if rt.Topic == topic && rp.ErrorCode == 0 {
				have[rp.Partition] = committed{rp.Offset, rp.Metadata}
			}
		}
	}
	for _, rg := range fr.Groups {
		if err := kerr.ErrorForCode(rg.ErrorCode); err != nil {
			return err
		}
		for _, rt := range rg.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == topic && rp.ErrorCode == 0 {
					have[rp.Partition] = committed{rp.Offset, rp.Metadata}
				}
			}
		}
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = group, -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = topic
	for p, c := range have {
		if cut := cuts[p]; c.offset > cut {
			cp := kmsg.NewOffsetCommitRequestTopicPartition()
			cp.Partition, cp.Offset, cp.LeaderEpoch, cp.Metadata = p, cut, -1, c.metadata
			ct.Partitions = append(ct.Partitions, cp)
		}
	}
	if len(ct.Partitions) == 0 {
		return nil
	}
	commit.Topics = append(commit.Topics, ct)
	resp, err = r.p.store.Send(r.ctx, node, commit)
	if err != nil {
		return err
	}
	for _, rt := range resp.(*kmsg.OffsetCommitResponse).Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("committing %s-%d at the cut: %w", topic, rp.Partition, err)
			}
		}
	}
	r.log.Info("consistent failover: group offsets clamped to the cut", "group", group, "topic", topic, "partitions", len(ct.Partitions))
	return nil
}
