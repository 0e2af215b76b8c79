package raftmeta

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Controller decisions validate against the current image, choose IDs,
// propose records and wait until they are applied. They run one at a time
// (the deciding semaphore), so each sees the effects of the previous one;
// the FSM re-checks every record anyway, in case a decision gave up
// waiting while its batch was still in flight.

// lock takes the decision semaphore and checks that this node leads.
//
// A node that has just been elected applies the log before it decides
// anything (its image may still be empty); that takes milliseconds, so
// a decision waits for it, up to catchUpWait, rather than failing: a
// caller would only retry.
func (c *Controller) lock(ctx context.Context) (*metadata.Image, error) {
	deadline := time.Now().Add(catchUpWait)
	for {
		select {
		case c.deciding <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !c.IsLeader() {
			<-c.deciding
			return nil, fmt.Errorf("raftmeta: node %d is not the controller: %w", c.cfg.NodeID, kerr.NotController)
		}
		if c.stream == nil || c.caughtUp.Load() {
			return c.Image(), nil
		}
		<-c.deciding
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("raftmeta: node %d leads but has not applied the metadata log yet: %w", c.cfg.NodeID, kerr.NotController)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// catchUpWait bounds how long a decision waits for a new controller to
// apply the log.
const catchUpWait = 5 * time.Second

func (c *Controller) unlock() { <-c.deciding }

// RegisterBroker adds or updates a broker registration.
func (c *Controller) RegisterBroker(ctx context.Context, b metadata.Broker) error {
	if b.ID < 0 {
		return fmt.Errorf("register broker %d: negative ID: %w", b.ID, kerr.InvalidRequest)
	}
	return c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		if old, ok := img.Brokers[b.ID]; ok {
			old.Epoch = b.Epoch
			if old == b {
				return nil, nil
			}
		}
		return []metadata.Record{{Type: metadata.RecordRegisterBroker, Broker: &b}}, nil
	})
}

// ValidTopicName returns a kerr.InvalidTopicException error unless name
// follows Kafka's rules: 1..249 characters of [a-zA-Z0-9._-], not "." or
// "..". The context before the kerr text is Kafka's own message, which the
// broker's admin APIs send as the ErrorMessage.
func ValidTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("Topic name is illegal, it can't be empty: %w", kerr.InvalidTopicException)
	case name == "." || name == "..":
		return fmt.Errorf("Topic name cannot be \".\" or \"..\": %w", kerr.InvalidTopicException)
	case len(name) > 249:
		return fmt.Errorf("Topic name is illegal, it can't be longer than 249 characters, topic name: %s: %w", name, kerr.InvalidTopicException)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("Topic name %s is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-': %w", name, kerr.InvalidTopicException)
		}
	}
	return nil
}

// collision returns an existing topic whose name equals name once '.' and
// '_' are treated alike (Kafka rejects those: their metric names clash).
func collision(img *metadata.Image, name string) string {
	if !strings.ContainsAny(name, "._") {
		return ""
	}
	norm := func(s string) string { return strings.ReplaceAll(s, ".", "_") }
	n := norm(name)
	for other := range img.Topics {
		if other != name && norm(other) == n {
			return other
		}
	}
	return ""
}

// sortedBrokers returns the registered broker IDs in order.
func sortedBrokers(img *metadata.Image) []int32 {
	return slices.Sorted(maps.Keys(img.Brokers))
}

// placeable returns the brokers new replicas may go to: the live ones
// (unfenced, not shutting down), by ID.
func placeable(img *metadata.Image) []metadata.Broker {
	var out []metadata.Broker
	for _, id := range sortedBrokers(img) {
		if b := img.Brokers[id]; b.Live() {
			out = append(out, b)
		}
	}
	return out
}

// assign returns replica lists for partitions first..first+n-1 over
// brokers, starting at broker start: leaders spread over the brokers,
// and each partition's replicas are the brokers that follow its leader,
// skipping those on a rack the partition already has until every rack
// has one (Kafka's rack-aware assignment). Without racks the replicas are
// consecutive brokers.
func assign(brokers []metadata.Broker, start, first, n int, rf int) [][]int32 {
	arr := rackAlternating(brokers)
	out := make([][]int32, n)
	for i := range n {
		li := (start + first + i) % len(arr)
		reps := make([]int32, 0, rf)
		racks := map[string]bool{}
		for len(reps) < rf {
			for k := range len(arr) {
				b := arr[(li+k)%len(arr)]
				if len(reps) == rf || slices.Contains(reps, b.ID) || b.Rack != "" && racks[b.Rack] {
					continue
				}
				reps = append(reps, b.ID)
				racks[b.Rack] = true
			}
			racks = map[string]bool{} // every rack has a replica: start over
		}
		out[i] = reps
	}
	return out
}

// rackAlternating orders brokers so that consecutive ones are on
// different racks where possible: the first broker of each rack, then
// the second of each, and so on. Brokers without a rack keep ID order.
func rackAlternating(brokers []metadata.Broker) []metadata.Broker {
	byRack := map[string][]metadata.Broker{}
	var racks []string
	for _, b := range brokers {
		if b.Rack == "" {
			return brokers
		}
		if _, ok := byRack[b.Rack]; !ok {
			racks = append(racks, b.Rack)
		}
		byRack[b.Rack] = append(byRack[b.Rack], b)
	}
	slices.Sort(racks)
	out := make([]metadata.Broker, 0, len(brokers))
	for i := 0; len(out) < len(brokers); i++ {
		for _, r := range racks {
			if i < len(byRack[r]) {
				out = append(out, byRack[r][i])
			}
		}
	}
	return out
}

// partitionRecords builds the records of new partitions: leader = first
// replica, leader epoch 0, ISR = replicas.
func partitionRecords(id metadata.UUID, first int, assignments [][]int32) []metadata.Record {
	recs := make([]metadata.Record, len(assignments))
	for i, reps := range assignments {
		recs[i] = metadata.Record{Type: metadata.RecordPartition, Partition: &metadata.PartitionRecord{
			TopicID: id, Partition: int32(first + i),
			Replicas: reps, ISR: slices.Clone(reps), Leader: reps[0],
		}}
	}
	return recs
}

// checkAssignment validates explicit replica lists against the brokers.
func checkAssignment(img *metadata.Image, assignments [][]int32) error {
	for p, reps := range assignments {
		// Bounded before the duplicate check, which is quadratic.
		if len(reps) > len(img.Brokers) {
			return fmt.Errorf("partition %d has %d replicas but only %d brokers are registered: %w", p, len(reps), len(img.Brokers), kerr.InvalidReplicaAssignment)
		}
		if len(reps) == 0 || len(reps) != len(assignments[0]) {
			return fmt.Errorf("partition %d has %d replicas, all partitions need the same non-zero count: %w", p, len(reps), kerr.InvalidReplicaAssignment)
		}
		for i, b := range reps {
			if _, ok := img.Brokers[b]; !ok {
				return fmt.Errorf("partition %d: broker %d is not registered: %w", p, b, kerr.InvalidReplicaAssignment)
			}
			if slices.Contains(reps[:i], b) {
				return fmt.Errorf("partition %d lists broker %d twice: %w", p, b, kerr.InvalidReplicaAssignment)
			}
		}
	}
	return nil
}

// CreateTopics creates topics, returning one error per spec (nil for
// success). Valid specs are written in one atomic batch; with
// validateOnly nothing is written.
func (c *Controller) CreateTopics(ctx context.Context, specs []metadata.TopicSpec, validateOnly bool) []error {
	errs, err := createTopics.do(c, ctx, createTopicsArgs{specs, validateOnly})
	return errsOf(errs, err, len(specs))
}

var createTopics = decision[createTopicsArgs, errList]{"CreateTopics", (*Controller).createTopics}

func (c *Controller) createTopics(ctx context.Context, a createTopicsArgs) (errList, error) {
	specs := a.Specs
	errs := make([]error, len(specs))
	var ok []int
	err := c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		return c.createTopicRecords(img, specs, a.ValidateOnly, errs, &ok)
	})
	if err != nil && len(ok) == 0 {
		return nil, err // refused as a whole: not the controller, or closing
	}
	for _, i := range ok {
		if err != nil {
			errs[i] = fmt.Errorf("create topic %q: %w", specs[i].Name, err)
		}
	}
	return errs, nil
}

// createTopicRecords checks each spec against img, setting its error in
// errs or adding its index to ok, and returns the records of the
// accepted ones (none with validateOnly).
func (c *Controller) createTopicRecords(img *metadata.Image, specs []metadata.TopicSpec, validateOnly bool, errs []error, okp *[]int) ([]metadata.Record, error) {
	brokers := placeable(img)
	budget := newPartitionBudget(img, c.cfg.Limits)
	names := map[string]int{}
	for _, s := range specs {
		names[s.Name]++
	}
	ids := map[metadata.UUID]bool{}
	pending := map[string]string{} // accepted names, '.' as '_'
	var recs []metadata.Record
	var ok []int
	defer func() { *okp = ok }()
	for i, s := range specs {
		errs[i] = func() error {
			if err := ValidTopicName(s.Name); err != nil {
				return err
			}
			if names[s.Name] > 1 {
				return fmt.Errorf("topic %q appears more than once in the request: %w", s.Name, kerr.InvalidRequest)
			}
			if img.Topics[s.Name] != nil {
				return fmt.Errorf("topic %q already exists: %w", s.Name, kerr.TopicAlreadyExists)
			}
			other := collision(img, s.Name)
			if prev, ok := pending[strings.ReplaceAll(s.Name, ".", "_")]; ok {
				other = prev
			}
			if other != "" {
				return fmt.Errorf("topic %q collides with existing topic %q ('.' and '_' are interchangeable in metric names): %w", s.Name, other, kerr.InvalidTopicException)
			}
			id := s.ID
			if id.IsZero() {
				for id = uuid.Random(); img.TopicsByID[id] != nil || ids[id]; id = uuid.Random() {
				}
			} else if img.TopicsByID[id] != nil || ids[id] {
				return fmt.Errorf("topic %q: topic ID %s is already in use: %w", s.Name, id.Base64(), kerr.InvalidRequest)
			}
			assignments := s.Assignments
			if len(assignments) > 0 {
				if s.Partitions > 0 && int(s.Partitions) != len(assignments) || s.ReplicationFactor > 0 && int(s.ReplicationFactor) != len(assignments[0]) {
					return fmt.Errorf("topic %q: partitions or replication factor contradict the replica assignment: %w", s.Name, kerr.InvalidRequest)
				}
				if err := budget.check(s.Name, int64(len(assignments)), len(assignments[0]), len(brokers)); err != nil {
					return err
				}
				if err := checkAssignment(img, assignments); err != nil {
					return fmt.Errorf("topic %q: %w", s.Name, err)
				}
			} else {
				if s.Partitions <= 0 {
					return fmt.Errorf("topic %q: %d partitions, must be positive: %w", s.Name, s.Partitions, kerr.InvalidPartitions)
				}
				if s.ReplicationFactor <= 0 || int(s.ReplicationFactor) > len(brokers) {
					return fmt.Errorf("topic %q: replication factor %d, must be 1..%d (live brokers): %w", s.Name, s.ReplicationFactor, len(brokers), kerr.InvalidReplicationFactor)
				}
				if err := budget.check(s.Name, int64(s.Partitions), int(s.ReplicationFactor), len(brokers)); err != nil {
					return err
				}
				assignments = assign(brokers, len(img.Topics)+len(ok), 0, int(s.Partitions), int(s.ReplicationFactor))
			}
			if err := budget.add(s.Name, assignments); err != nil {
				return err
			}
			ids[id] = true
			pending[strings.ReplaceAll(s.Name, ".", "_")] = s.Name
			recs = append(recs, metadata.Record{Type: metadata.RecordTopic, Topic: &metadata.TopicRecord{Name: s.Name, ID: id, Configs: s.Configs, Internal: s.Internal}})
			recs = append(recs, partitionRecords(id, 0, assignments)...)
			ok = append(ok, i)
			return nil
		}()
	}
	if validateOnly {
		ok = nil
		return nil, nil
	}
	return recs, nil
}

// DeleteTopics deletes topics by ID, returning one error per ID.
func (c *Controller) DeleteTopics(ctx context.Context, ids []metadata.UUID) []error {
	errs, err := deleteTopics.do(c, ctx, ids)
	return errsOf(errs, err, len(ids))
}

var deleteTopics = decision[[]metadata.UUID, errList]{"DeleteTopics", (*Controller).deleteTopics}

func (c *Controller) deleteTopics(ctx context.Context, ids []metadata.UUID) (errList, error) {
	errs := make([]error, len(ids))
	var ok []int
	err := c.decide(ctx, "", func(img *metadata.Image) ([]metadata.Record, error) {
		var recs []metadata.Record
		seen := map[metadata.UUID]bool{}
		for i, id := range ids {
			if img.TopicsByID[id] == nil {
				errs[i] = fmt.Errorf("topic ID %s: %w", id.Base64(), kerr.UnknownTopicID)
				continue
			}
			ok = append(ok, i)
			if !seen[id] {
				seen[id] = true
				recs = append(recs, metadata.Record{Type: metadata.RecordRemoveTopic, RemoveTopic: &id})
			}
		}
		return recs, nil
	})
	if err != nil && len(ok) == 0 {
		return nil, err
	}
	for _, i := range ok {
		if err != nil {
			errs[i] = fmt.Errorf("delete topic %s: %w", ids[i].Base64(), err)
		}
	}
	return errs, nil
}

// CreatePartitions grows topic name to total partitions, with the
// replication factor of its first partition.
func (c *Controller) CreatePartitions(ctx context.Context, name string, total int32, validateOnly bool) error {
	_, err := createPartitions.do(c, ctx, createPartitionsArgs{name, total, validateOnly})
	return err
}

var createPartitions = decision[createPartitionsArgs, none]{"CreatePartitions", func(c *Controller, ctx context.Context, a createPartitionsArgs) (none, error) {
	return none{}, c.decide(ctx, fmt.Sprintf("create partitions of %q", a.Topic), func(img *metadata.Image) ([]metadata.Record, error) {
		return createPartitionRecords(img, c.cfg.Limits, a.Topic, a.Total, a.ValidateOnly)
	})
}}

// createPartitionRecords are the records that grow topic name to total
// partitions (none with validateOnly).
func createPartitionRecords(img *metadata.Image, limits PartitionLimits, name string, total int32, validateOnly bool) ([]metadata.Record, error) {
	t := img.Topics[name]
	if t == nil {
		return nil, fmt.Errorf("create partitions: topic %q: %w", name, kerr.UnknownTopicOrPartition)
	}
	if t.Internal {
		// Coordinators find their partition by hashing a key over the
		// partition count: more partitions would move every key.
		return nil, fmt.Errorf("create partitions: %q is an internal topic, whose partition count decides which coordinator owns which key: %w", name, kerr.PolicyViolation)
	}
	have := len(t.Partitions)
	if int(total) <= have {
		return nil, fmt.Errorf("create partitions: topic %q has %d partitions, cannot go to %d: %w", name, have, total, kerr.InvalidPartitions)
	}
	brokers := placeable(img)
	rf := len(t.Partitions[0].Target())
	if rf > len(brokers) {
		return nil, fmt.Errorf("create partitions: topic %q has replication factor %d but %d brokers are live: %w", name, rf, len(brokers), kerr.InvalidReplicationFactor)
	}
	budget := newPartitionBudget(img, limits)
	if err := budget.check(name, int64(total)-int64(have), rf, len(brokers)); err != nil {
		return nil, fmt.Errorf("create partitions: %w", err)
	}
	// Continue the rotation where the topic's first partition started.
	start := max(slices.IndexFunc(brokers, func(b metadata.Broker) bool { return b.ID == t.Partitions[0].Replicas[0] }), 0)
	assignments := assign(brokers, start, have, int(total)-have, rf)
	if err := budget.add(name, assignments); err != nil {
		return nil, fmt.Errorf("create partitions: %w", err)
	}
	if validateOnly {
		return nil, nil
	}
	return partitionRecords(t.ID, have, assignments), nil
}

// AlterConfigs applies all changes atomically in one batch. Values are
// stored as given: validating them is the server's job.
func (c *Controller) AlterConfigs(ctx context.Context, changes []metadata.ConfigChange) error {
	_, err := alterConfigs.do(c, ctx, changes)
	return err
}

var alterConfigs = decision[[]metadata.ConfigChange, none]{"AlterConfigs", func(c *Controller, ctx context.Context, changes []metadata.ConfigChange) (none, error) {
	return none{}, c.decide(ctx, "alter configs", func(img *metadata.Image) ([]metadata.Record, error) { return configRecords(img, changes) })
}}

// configRecords are the records of the changes, or why they are refused.
func configRecords(img *metadata.Image, changes []metadata.ConfigChange) ([]metadata.Record, error) {
	recs := make([]metadata.Record, 0, len(changes))
	for _, ch := range changes {
		switch ch.Resource {
		case metadata.ConfigResourceTopic:
			if img.Topics[ch.Name] == nil {
				return nil, fmt.Errorf("alter configs: topic %q: %w", ch.Name, kerr.UnknownTopicOrPartition)
			}
		case metadata.ConfigResourceBroker:
			if ch.Name != "" {
				if id, err := strconv.ParseInt(ch.Name, 10, 32); err != nil || id < 0 {
					return nil, fmt.Errorf("alter configs: broker resource name %q is not a broker ID: %w", ch.Name, kerr.InvalidRequest)
				}
			}
		case metadata.ConfigResourceGroup:
			if ch.Name == "" {
				return nil, fmt.Errorf("alter configs: empty group name: %w", kerr.InvalidRequest)
			}
		default:
			return nil, fmt.Errorf("alter configs: resource type %d: %w", ch.Resource, kerr.InvalidRequest)
		}
		if ch.Key == "" {
			return nil, fmt.Errorf("alter configs: empty config name: %w", kerr.InvalidConfig)
		}
		recs = append(recs, metadata.Record{Type: metadata.RecordConfig, Config: &metadata.ConfigRecord{
			ResourceType: ch.Resource, ResourceName: ch.Name, Key: ch.Key, Value: ch.Value,
		}})
	}
	return recs, nil
}

// AllocateProducerIDs hands out count consecutive producer ids, never
// handed out before (also across restarts), and returns the first.
func (c *Controller) AllocateProducerIDs(ctx context.Context, count int64) (int64, error) {
	return allocateProducerIDs.do(c, ctx, count)
}

var allocateProducerIDs = decision[int64, int64]{"AllocateProducerIds", func(c *Controller, ctx context.Context, count int64) (int64, error) {
	if count <= 0 {
		return 0, fmt.Errorf("allocate producer ids: count %d: %w", count, kerr.InvalidRequest)
	}
	var first int64
	err := c.decide(ctx, "allocate producer ids", func(img *metadata.Image) ([]metadata.Record, error) {
		first = img.NextProducerID
		if first > (1<<63-1)-count {
			return nil, fmt.Errorf("allocate producer ids: exhausted: %w", kerr.UnknownServerError)
		}
		return []metadata.Record{{Type: metadata.RecordProducerIDs, ProducerIDs: &metadata.ProducerIDsRecord{First: first, Next: first + count}}}, nil
	})
	if err != nil {
		return 0, err
	}
	return first, nil
}}

func (c *Controller) partition(img *metadata.Image, id metadata.UUID, partition int32) (*metadata.Partition, error) {
	t := img.TopicsByID[id]
	if t == nil {
		return nil, fmt.Errorf("topic ID %s: %w", id.Base64(), kerr.UnknownTopicID)
	}
	if partition < 0 || int(partition) >= len(t.Partitions) {
		return nil, fmt.Errorf("topic %q partition %d: %w", t.Name, partition, kerr.UnknownTopicOrPartition)
	}
	return &t.Partitions[partition], nil
}

// BumpLeaderEpoch raises a partition's leader epoch for cluster mirroring
// (KIP-1279 BumpLeaderEpochs). The rule is exactly
//
//	newEpoch = max(minEpoch+1, current)
//
// so the epoch ends strictly above minEpoch and never goes down; if the
// current epoch is already above minEpoch nothing is written. The leader
// does not change.
func (c *Controller) BumpLeaderEpoch(ctx context.Context, id metadata.UUID, partition int32, minEpoch int32) (int32, error) {
	epochs, err := c.BumpLeaderEpochs(ctx, id, map[int32]int32{partition: minEpoch})
	return epochs[partition], err
}

// BumpLeaderEpochs is BumpLeaderEpoch for several partitions of one
// topic (partition to its minEpoch) in one metadata batch: a mirror's
// new topic of thousands of partitions is one commit, not one each. It
// returns each partition's epoch after; one unknown partition fails all.
func (c *Controller) BumpLeaderEpochs(ctx context.Context, id metadata.UUID, minEpochs map[int32]int32) (map[int32]int32, error) {
	return bumpLeaderEpochs.do(c, ctx, bumpsArgs{id, minEpochs})
}

var bumpLeaderEpochs = decision[bumpsArgs, map[int32]int32]{"BumpLeaderEpochs", func(c *Controller, ctx context.Context, a bumpsArgs) (map[int32]int32, error) {
	var epochs map[int32]int32
	err := c.decide(ctx, "bump leader epoch", func(img *metadata.Image) ([]metadata.Record, error) {
		epochs = make(map[int32]int32, len(a.MinEpochs))
		var recs []metadata.Record
		for _, partition := range slices.Sorted(maps.Keys(a.MinEpochs)) {
			minEpoch := a.MinEpochs[partition]
			p, err := c.partition(img, a.TopicID, partition)
			if err != nil {
				return nil, fmt.Errorf("bump leader epoch: %w", err)
			}
			if p.LeaderEpoch > minEpoch {
				epochs[partition] = p.LeaderEpoch
				continue
			}
			epoch := minEpoch + 1
			epochs[partition] = epoch
			recs = append(recs, metadata.Record{Type: metadata.RecordPartitionChange, PartitionChange: &metadata.PartitionChangeRecord{
				TopicID: a.TopicID, Partition: partition, LeaderEpoch: &epoch,
			}})
		}
		return recs, nil
	})
	if err != nil {
		return nil, err
	}
	return epochs, nil
}}

// bumpLeaderEpoch is BumpLeaderEpochs of one partition, as a node of an
// earlier version forwards it.
var bumpLeaderEpoch = decision[bumpArgs, int32]{"BumpLeaderEpoch", func(c *Controller, ctx context.Context, a bumpArgs) (int32, error) {
	epochs, err := bumpLeaderEpochs.run(c, ctx, bumpsArgs{a.TopicID, map[int32]int32{a.Partition: a.MinEpoch}})
	return epochs[a.Partition], err
}}

// ElectLeader makes leader (a replica of the partition, or -1 for
// offline) the partition's leader with the next leader epoch. A leader
// outside the ISR joins it.
func (c *Controller) ElectLeader(ctx context.Context, id metadata.UUID, partition int32, leader int32) error {
	return c.decide(ctx, "elect leader", func(img *metadata.Image) ([]metadata.Record, error) {
		p, err := c.partition(img, id, partition)
		if err != nil {
			return nil, fmt.Errorf("elect leader: %w", err)
		}
		if leader != -1 && !slices.Contains(p.Replicas, leader) {
			return nil, fmt.Errorf("elect leader: broker %d is not a replica of partition %d (%v): %w", leader, partition, p.Replicas, kerr.EligibleLeadersNotAvailable)
		}
		epoch := p.LeaderEpoch + 1
		change := &metadata.PartitionChangeRecord{TopicID: id, Partition: partition, Leader: &leader, LeaderEpoch: &epoch}
		if leader != -1 && !slices.Contains(p.ISR, leader) {
			change.ISR = append(slices.Clone(p.ISR), leader)
		}
		return []metadata.Record{{Type: metadata.RecordPartitionChange, PartitionChange: change}}, nil
	})
}
