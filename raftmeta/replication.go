package raftmeta

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Replication decisions: who leads a partition and who is in its ISR, as
// Kafka's KRaft controller decides them. A leader is elected from the
// ISR, first in assignment order among live brokers (unfenced and not
// shutting down); only when no ISR member is live, and unclean leader
// election is enabled for the topic, is a live replica outside the ISR
// elected, which may lose acknowledged records and is counted and logged.
// The last ISR member never leaves the ISR, so that a partition whose
// replicas all went away comes back with the last replica that had
// everything. Every leader change bumps the leader epoch.

// liveIn is img's view of which brokers may lead or join an ISR.
func liveIn(img *metadata.Image) func(int32) bool {
	return func(id int32) bool {
		b, ok := img.Brokers[id]
		return ok && b.Live()
	}
}

// uncleanAllowed resolves unclean.leader.election.enable for t: the
// topic's config, the dynamic cluster default, then the static one.
func (c *Controller) uncleanAllowed(img *metadata.Image, t *metadata.Topic) bool {
	const key = "unclean.leader.election.enable"
	if v, ok := t.Configs[key]; ok {
		return strings.EqualFold(strings.TrimSpace(v), "true")
	}
	if v, ok := img.BrokerConfigs[key]; ok {
		return strings.EqualFold(strings.TrimSpace(v), "true")
	}
	return c.cfg.UncleanLeaderElection
}

// chooseLeader returns the leader a partition with this ISR should have:
// the first replica in assignment order that is in the ISR and live; with
// unclean, failing that, the first live replica, which becomes the whole
// ISR. -1 when none can lead.
func chooseLeader(replicas, isr []int32, live func(int32) bool, unclean bool) (leader int32, newISR []int32, wasUnclean bool) {
	for _, r := range replicas {
		if slices.Contains(isr, r) && live(r) {
			return r, isr, false
		}
	}
	if unclean {
		for _, r := range replicas {
			if live(r) {
				return r, []int32{r}, true
			}
		}
	}
	return -1, isr, false
}

// change builds the record that takes partition p to leader and isr, nil
// if nothing changes; a new leader gets the next leader epoch.
func (c *Controller) change(t *metadata.Topic, i int, p metadata.Partition, leader int32, isr []int32, why string) *metadata.Record {
	pc := &metadata.PartitionChangeRecord{TopicID: t.ID, Partition: int32(i)}
	changed := false
	if leader != p.Leader {
		epoch := p.LeaderEpoch + 1
		pc.Leader, pc.LeaderEpoch = &leader, &epoch
		changed = true
		c.metrics.LeaderElections.Add(1)
		c.log.Info("partition leader changed", "topic", t.Name, "partition", i, "from", p.Leader, "to", leader, "epoch", epoch, "isr", isr, "reason", why)
	}
	if !slices.Equal(isr, p.ISR) {
		pc.ISR = slices.Clone(isr)
		changed = true
	}
	if !changed {
		return nil
	}
	return &metadata.Record{Type: metadata.RecordPartitionChange, PartitionChange: pc}
}

// reportUnclean counts and logs an unclean election: the records the old
// ISR had beyond the new leader's log end are lost.
func (c *Controller) reportUnclean(t *metadata.Topic, i int, p metadata.Partition, leader int32) {
	c.metrics.UncleanElections.Add(1)
	c.log.Error("unclean leader election: a replica outside the ISR leads; acknowledged records it lacks are lost",
		"topic", t.Name, "partition", i, "leader", leader, "old_isr", p.ISR, "epoch", p.LeaderEpoch+1)
}

// moveAwayRecords takes broker id out of every ISR it is in (except as
// the last member) and moves its leaderships; live must say id is not.
func (c *Controller) moveAwayRecords(img *metadata.Image, id int32, live func(int32) bool) []metadata.Record {
	var recs []metadata.Record
	for _, t := range metadata.SortedTopics(img) {
		for i, p := range t.Partitions {
			if !slices.Contains(p.Replicas, id) {
				continue
			}
			isr := p.ISR
			if slices.Contains(isr, id) && len(isr) > 1 {
				isr = slices.DeleteFunc(slices.Clone(isr), func(r int32) bool { return r == id })
			}
			leader := p.Leader
			unclean := false
			if leader == id {
				leader, isr, unclean = chooseLeader(p.Replicas, isr, live, c.uncleanAllowed(img, t))
			}
			if r := c.change(t, i, p, leader, isr, fmt.Sprintf("broker %d went away", id)); r != nil {
				if unclean {
					c.reportUnclean(t, i, p, leader)
				}
				recs = append(recs, *r)
			}
		}
	}
	return recs
}

// diskFullRecords move the leaderships of broker id, whose disk is full,
// to another live member of each ISR (never an unclean election). A
// partition with no such member keeps its leader: a full disk still
// serves reads, an offline partition serves nothing. Its follower places
// are left to the leaders, which drop it from the ISR once it lags.
func (c *Controller) diskFullRecords(img *metadata.Image, id int32, live func(int32) bool) []metadata.Record {
	var recs []metadata.Record
	for _, t := range metadata.SortedTopics(img) {
		for i, p := range t.Partitions {
			if p.Leader != id {
				continue
			}
			isr := slices.DeleteFunc(slices.Clone(p.ISR), func(r int32) bool { return r == id })
			leader, _, _ := chooseLeader(p.Replicas, isr, live, false)
			if leader < 0 {
				continue
			}
			if r := c.change(t, i, p, leader, isr, fmt.Sprintf("broker %d's disk is full", id)); r != nil {
				recs = append(recs, *r)
			}
		}
	}
	return recs
}

// electRecords elects a leader for every partition selected by want
// that has no live leader.
func (c *Controller) electRecords(img *metadata.Image, live func(int32) bool, want func(metadata.Partition) bool) []metadata.Record {
	var recs []metadata.Record
	for _, t := range metadata.SortedTopics(img) {
		for i, p := range t.Partitions {
			if (p.Leader >= 0 && live(p.Leader)) || !want(p) {
				continue
			}
			leader, isr, unclean := chooseLeader(p.Replicas, p.ISR, live, c.uncleanAllowed(img, t))
			if leader < 0 {
				continue
			}
			if r := c.change(t, i, p, leader, isr, "election"); r != nil {
				if unclean {
					c.reportUnclean(t, i, p, leader)
				}
				recs = append(recs, *r)
			}
		}
	}
	return recs
}

// AlterPartitionRequest is a partition leader's ISR change (Kafka's
// AlterPartition): it names the leader epoch and partition epoch it
// knows, so that a stale leader's change is refused.
type AlterPartitionRequest struct {
	Broker         int32         `json:"broker"`
	BrokerEpoch    int64         `json:"brokerEpoch"`
	TopicID        metadata.UUID `json:"topicId"`
	Partition      int32         `json:"partition"`
	LeaderEpoch    int32         `json:"leaderEpoch"`
	PartitionEpoch int32         `json:"partitionEpoch"`
	ISR            []int32       `json:"isr"`
}

// AlterPartition applies a leader's ISR change and returns the partition
// as it then is. Errors: NOT_LEADER_OR_FOLLOWER (the sender does not
// lead), FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION (a stale partition
// epoch), INELIGIBLE_REPLICA (a fenced or shutting-down broker added),
// INVALID_REQUEST (an ISR that is not a subset of the replicas with the
// leader in it), STALE_BROKER_EPOCH.
func (c *Controller) AlterPartition(ctx context.Context, req AlterPartitionRequest) (metadata.Partition, error) {
	return alterPartition.do(c, ctx, req)
}

var alterPartition = decision[AlterPartitionRequest, metadata.Partition]{"AlterPartition", (*Controller).alterPartition}

func (c *Controller) alterPartition(ctx context.Context, req AlterPartitionRequest) (metadata.Partition, error) {
	var p metadata.Partition
	var t *metadata.Topic
	changed := false
	err := c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		t = img.TopicsByID[req.TopicID]
		if t == nil || req.Partition < 0 || int(req.Partition) >= len(t.Partitions) {
			return nil, fmt.Errorf("alter partition %s-%d: %w", req.TopicID, req.Partition, kerr.UnknownTopicOrPartition)
		}
		p = t.Partitions[req.Partition]
		b, ok := img.Brokers[req.Broker]
		switch {
		case !ok || b.Epoch != req.BrokerEpoch:
			return nil, fmt.Errorf("alter partition %s-%d: broker %d epoch %d: %w", t.Name, req.Partition, req.Broker, req.BrokerEpoch, kerr.StaleBrokerEpoch)
		case p.Leader != req.Broker:
			return nil, fmt.Errorf("alter partition %s-%d: broker %d does not lead it (leader %d): %w", t.Name, req.Partition, req.Broker, p.Leader, kerr.NotLeaderForPartition)
		case req.LeaderEpoch != p.LeaderEpoch:
			return nil, fmt.Errorf("alter partition %s-%d: leader epoch %d, current %d: %w", t.Name, req.Partition, req.LeaderEpoch, p.LeaderEpoch, kerr.FencedLeaderEpoch)
		case req.PartitionEpoch != p.PartitionEpoch:
			return nil, fmt.Errorf("alter partition %s-%d: partition epoch %d, current %d: %w", t.Name, req.Partition, req.PartitionEpoch, p.PartitionEpoch, kerr.InvalidUpdateVersion)
		case !slices.Contains(req.ISR, req.Broker):
			return nil, fmt.Errorf("alter partition %s-%d: ISR %v without its leader: %w", t.Name, req.Partition, req.ISR, kerr.InvalidRequest)
		}
		for i, r := range req.ISR {
			if !slices.Contains(p.Replicas, r) || slices.Contains(req.ISR[:i], r) {
				return nil, fmt.Errorf("alter partition %s-%d: ISR %v is not a set of replicas %v: %w", t.Name, req.Partition, req.ISR, p.Replicas, kerr.InvalidRequest)
			}
			if !slices.Contains(p.ISR, r) && !liveIn(img)(r) {
				return nil, fmt.Errorf("alter partition %s-%d: broker %d is fenced or shutting down: %w", t.Name, req.Partition, r, kerr.IneligibleReplica)
			}
		}
		pc := &metadata.PartitionChangeRecord{TopicID: t.ID, Partition: req.Partition, ISR: slices.Clone(req.ISR)}
		if len(p.AddingReplicas) > 0 || len(p.RemovingReplicas) > 0 {
			c.completeReassignment(t, int(req.Partition), p, req.ISR, pc)
		}
		if slices.Equal(req.ISR, p.ISR) && pc.Replicas == nil {
			return nil, nil
		}
		changed = true
		return []metadata.Record{{Type: metadata.RecordPartitionChange, PartitionChange: pc}}, nil
	})
	switch {
	case err != nil && changed:
		return p, fmt.Errorf("alter partition %s-%d: %w", t.Name, req.Partition, err)
	case err != nil || !changed:
		return p, err
	}
	return c.Image().TopicsByID[t.ID].Partitions[req.Partition], nil
}

// completeReassignment finishes p's reassignment in pc once every replica
// of its target is in isr: the removed replicas go, and leadership moves
// if the leader was one of them.
func (c *Controller) completeReassignment(t *metadata.Topic, i int, p metadata.Partition, isr []int32, pc *metadata.PartitionChangeRecord) {
	target := p.Target()
	for _, r := range target {
		if !slices.Contains(isr, r) {
			return
		}
	}
	newISR := slices.DeleteFunc(slices.Clone(isr), func(r int32) bool { return !slices.Contains(target, r) })
	pc.Replicas, pc.ISR = target, newISR
	pc.Reassignment = &metadata.Reassignment{}
	if !slices.Contains(target, p.Leader) {
		leader, _, _ := chooseLeader(target, newISR, func(int32) bool { return true }, false)
		epoch := p.LeaderEpoch + 1
		pc.Leader, pc.LeaderEpoch = &leader, &epoch
	}
	c.log.Info("partition reassignment completed", "topic", t.Name, "partition", i, "replicas", target)
}

// ElectionResult is the outcome of an election for one partition; a nil
// Err is success.
type ElectionResult struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Err       error  `json:"-"`
}

func (r ElectionResult) MarshalJSON() ([]byte, error) {
	type wire struct {
		Topic     string     `json:"topic"`
		Partition int32      `json:"partition"`
		Err       *wireError `json:"err,omitempty"`
	}
	return json.Marshal(wire{r.Topic, r.Partition, toWire(r.Err)})
}

func (r *ElectionResult) UnmarshalJSON(b []byte) error {
	var w struct {
		Topic     string     `json:"topic"`
		Partition int32      `json:"partition"`
		Err       *wireError `json:"err"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = ElectionResult{Topic: w.Topic, Partition: w.Partition, Err: w.Err.err()}
	return nil
}

// TopicPartition names a partition by topic name.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

type electArgs struct {
	Unclean bool             `json:"unclean,omitempty"`
	Parts   []TopicPartition `json:"parts"`
}

// ElectLeaders runs Kafka's ElectLeaders: a preferred election moves
// leadership to each partition's first replica if it is live and in the
// ISR (PREFERRED_LEADER_NOT_AVAILABLE otherwise, ELECTION_NOT_NEEDED if it
// leads already); an unclean election gives a partition without a live
// leader one, from outside the ISR if need be (ELECTION_NOT_NEEDED while
// its leader lives, ELIGIBLE_LEADERS_NOT_AVAILABLE if no replica is
// live). nil parts means every partition.
func (c *Controller) ElectLeaders(ctx context.Context, unclean bool, parts []TopicPartition) ([]ElectionResult, error) {
	return electLeaders.do(c, ctx, electArgs{unclean, parts})
}

var electLeaders = decision[electArgs, []ElectionResult]{"ElectLeaders", func(c *Controller, ctx context.Context, a electArgs) ([]ElectionResult, error) {
	var res []ElectionResult
	var ok []int
	err := c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		var recs []metadata.Record
		res, ok, recs = c.electionRecords(img, a.Unclean, a.Parts)
		return recs, nil
	})
	if err != nil && len(ok) == 0 {
		return nil, err
	}
	for _, n := range ok {
		if err != nil {
			res[n].Err = fmt.Errorf("elect leaders: %w", err)
		}
	}
	return res, nil
}}

// electionRecords are the results of the elections of parts (every
// partition if nil) and the records of those that move a leader (ok, by
// index into parts).
func (c *Controller) electionRecords(img *metadata.Image, unclean bool, parts []TopicPartition) (res []ElectionResult, ok []int, recs []metadata.Record) {
	if parts == nil {
		for _, t := range metadata.SortedTopics(img) {
			for i := range t.Partitions {
				parts = append(parts, TopicPartition{t.Name, int32(i)})
			}
		}
	}
	live := liveIn(img)
	res = make([]ElectionResult, len(parts))
	for n, tp := range parts {
		res[n] = ElectionResult{Topic: tp.Topic, Partition: tp.Partition}
		t := img.Topics[tp.Topic]
		if t == nil || tp.Partition < 0 || int(tp.Partition) >= len(t.Partitions) {
			res[n].Err = fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, kerr.UnknownTopicOrPartition)
			continue
		}
		p := t.Partitions[tp.Partition]
		var r *metadata.Record
		if !unclean {
			preferred := p.Replicas[0]
			switch {
			case p.Leader == preferred:
				res[n].Err = fmt.Errorf("%s-%d: preferred replica %d leads already: %w", tp.Topic, tp.Partition, preferred, kerr.ElectionNotNeeded)
				continue
			case !live(preferred) || !slices.Contains(p.ISR, preferred):
				res[n].Err = fmt.Errorf("%s-%d: preferred replica %d is not live and in the ISR %v: %w", tp.Topic, tp.Partition, preferred, p.ISR, kerr.PreferredLeaderNotAvailable)
				continue
			}
			r = c.change(t, int(tp.Partition), p, preferred, p.ISR, "preferred leader election")
			c.metrics.PreferredElections.Add(1)
		} else {
			if p.Leader >= 0 && live(p.Leader) {
				res[n].Err = fmt.Errorf("%s-%d: leader %d is live: %w", tp.Topic, tp.Partition, p.Leader, kerr.ElectionNotNeeded)
				continue
			}
			leader, isr, wasUnclean := chooseLeader(p.Replicas, p.ISR, live, true)
			if leader < 0 {
				res[n].Err = fmt.Errorf("%s-%d: no replica of %v is live: %w", tp.Topic, tp.Partition, p.Replicas, kerr.EligibleLeadersNotAvailable)
				continue
			}
			r = c.change(t, int(tp.Partition), p, leader, isr, "unclean leader election (ElectLeaders)")
			if wasUnclean {
				c.reportUnclean(t, int(tp.Partition), p, leader)
			}
		}
		if r != nil {
			recs = append(recs, *r)
			ok = append(ok, n)
		}
	}
	return res, ok, recs
}

// rebalanceLeaders moves leadership back to preferred replicas when some
// broker leads more than leader.imbalance.per.broker.percentage (10%) of
// the partitions it should lead than it does (auto.leader.rebalance.enable).
func (c *Controller) rebalanceLeaders(ctx context.Context) error {
	img := c.Image()
	live := liveIn(img)
	preferred := map[int32]int{}
	notLeading := map[int32]int{}
	var parts []TopicPartition
	for _, t := range metadata.SortedTopics(img) {
		for i, p := range t.Partitions {
			pr := p.Replicas[0]
			preferred[pr]++
			if p.Leader != pr {
				notLeading[pr]++
				if live(pr) && slices.Contains(p.ISR, pr) {
					parts = append(parts, TopicPartition{t.Name, int32(i)})
				}
			}
		}
	}
	imbalanced := false
	for b, n := range notLeading {
		if n*100 > preferred[b]*10 {
			imbalanced = true
		}
	}
	if !imbalanced || len(parts) == 0 {
		return nil
	}
	res, err := c.ElectLeaders(ctx, false, parts)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// Reassignment of one partition: its new replicas, or nil to cancel the
// reassignment in progress.
type ReassignRequest struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Replicas  []int32 `json:"replicas"`
}

// AlterPartitionReassignments starts (or cancels) reassignments, one
// error per request. A reassignment adds the new replicas at once; they
// replicate from the leader, and when all of them are in the ISR the
// replicas being removed go (leadership moves first if need be).
func (c *Controller) AlterPartitionReassignments(ctx context.Context, reqs []ReassignRequest) []error {
	errs, err := alterPartitionReassignments.do(c, ctx, reqs)
	return errsOf(errs, err, len(reqs))
}

var alterPartitionReassignments = decision[[]ReassignRequest, errList]{"AlterPartitionReassignments", func(c *Controller, ctx context.Context, reqs []ReassignRequest) (errList, error) {
	errs := make([]error, len(reqs))
	var ok []int
	err := c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		var recs []metadata.Record
		for n, rq := range reqs {
			r, err := c.reassignRecord(img, rq)
			if err != nil {
				errs[n] = err
				continue
			}
			if r != nil {
				recs = append(recs, *r)
				ok = append(ok, n)
			}
		}
		return recs, nil
	})
	if err != nil && len(ok) == 0 {
		return nil, err
	}
	for _, n := range ok {
		if err != nil {
			errs[n] = fmt.Errorf("reassign partitions: %w", err)
		}
	}
	return errs, nil
}}

func (c *Controller) reassignRecord(img *metadata.Image, rq ReassignRequest) (*metadata.Record, error) {
	t := img.Topics[rq.Topic]
	if t == nil || rq.Partition < 0 || int(rq.Partition) >= len(t.Partitions) {
		return nil, fmt.Errorf("%s-%d: %w", rq.Topic, rq.Partition, kerr.UnknownTopicOrPartition)
	}
	p := t.Partitions[rq.Partition]
	reassigning := len(p.AddingReplicas) > 0 || len(p.RemovingReplicas) > 0
	pc := &metadata.PartitionChangeRecord{TopicID: t.ID, Partition: rq.Partition}
	if rq.Replicas == nil { // cancel: back to the replicas before it
		if !reassigning {
			return nil, fmt.Errorf("%s-%d: %w", rq.Topic, rq.Partition, kerr.NoReassignmentInProgress)
		}
		orig := slices.DeleteFunc(slices.Clone(p.Replicas), func(r int32) bool { return slices.Contains(p.AddingReplicas, r) })
		return c.reassignTo(p, orig, pc), nil
	}
	if err := checkAssignment(img, [][]int32{rq.Replicas}); err != nil {
		return nil, fmt.Errorf("%s-%d: %w", rq.Topic, rq.Partition, err)
	}
	if reassigning {
		// A new target replaces the one in progress, from the replicas
		// the partition had before it.
		p.Replicas = slices.DeleteFunc(slices.Clone(p.Replicas), func(r int32) bool { return slices.Contains(p.AddingReplicas, r) })
	}
	adding := slices.DeleteFunc(slices.Clone(rq.Replicas), func(r int32) bool { return slices.Contains(p.Replicas, r) })
	removing := slices.DeleteFunc(slices.Clone(p.Replicas), func(r int32) bool { return slices.Contains(rq.Replicas, r) })
	if len(adding) == 0 && len(removing) == 0 && slices.Equal(rq.Replicas, p.Replicas) {
		return c.reassignTo(p, rq.Replicas, pc), nil
	}
	// Kafka's order: the target first, then the replicas leaving.
	all := append(slices.Clone(rq.Replicas), removing...)
	pc.Replicas = all
	pc.Reassignment = &metadata.Reassignment{Adding: adding, Removing: removing}
	next := p
	next.Replicas, next.AddingReplicas, next.RemovingReplicas = all, adding, removing
	c.completeReassignment(t, int(rq.Partition), next, p.ISR, pc)
	c.log.Info("partition reassignment", "topic", t.Name, "partition", rq.Partition, "replicas", rq.Replicas, "adding", adding, "removing", removing)
	return &metadata.Record{Type: metadata.RecordPartitionChange, PartitionChange: pc}, nil
}

// reassignTo sets p's replicas to replicas with no reassignment in
// progress, keeping the ISR members that stay.
func (c *Controller) reassignTo(p metadata.Partition, replicas []int32, pc *metadata.PartitionChangeRecord) *metadata.Record {
	isr := slices.DeleteFunc(slices.Clone(p.ISR), func(r int32) bool { return !slices.Contains(replicas, r) })
	if len(isr) == 0 {
		isr = p.ISR[:1]
	}
	pc.Replicas, pc.ISR, pc.Reassignment = slices.Clone(replicas), isr, &metadata.Reassignment{}
	if !slices.Contains(replicas, p.Leader) {
		leader, _, _ := chooseLeader(replicas, isr, func(int32) bool { return true }, false)
		epoch := p.LeaderEpoch + 1
		pc.Leader, pc.LeaderEpoch = &leader, &epoch
	}
	return &metadata.Record{Type: metadata.RecordPartitionChange, PartitionChange: pc}
}
