// Package cutover is the consistent failover's stage (issue 30): it
// decides a set of topics' one cut and persists it, truncates each
// partition to its part of it when its STOPPING reaches that step, and
// afterwards lowers the groups' committed offsets past the cut to it.
// The rule of the cut itself is package cut's (plugins/mirror/cut); here
// is what acts on it: reading what each partition holds (from this
// broker's log or its leader's over Fetch), the writes to the state
// store, and the groups' offsets over ListGroups, OffsetFetch and
// OffsetCommit.
//
// A consistent failover stops a set of topics at one cut. Each
// partition's STOPPING runs its first step as any failover does (the
// fetcher lets go; StopAt persisted), then waits: the leader of the
// set's first topic's partition 0 (the decider) reads what every
// partition of the set holds below its StopAt, from this broker's log or
// its leader's over Fetch, computes the cut, and persists each
// partition's part of it, its own partition last. That last write
// decides the cut: a partition is truncated to its cut only once the
// decider's partition has one, so a decider killed half way leaves
// nothing truncated, and whoever leads that partition next computes the
// same cut from the same logs. Then each partition moves what lies
// beyond its cut into the divergence quarantine, and the stop goes on
// from the cut as from StopAt.
//
// The stage reaches the mirror plugin (plugins/mirror, cutovertarget.go)
// only through Target, so that it does not import it. The interface is
// small because all else the stage needs is the state store's
// (plugins/mirror/statestore: the partitions' states, and Send for the
// requests to other brokers, which the stage is given as it is); what is
// left is the plugin's own: the image it acts on, its local logs, its
// test hook between the stop's steps and the run's loops to wake. The
// truncation is the stop's (it holds the partition and its log), so Apply
// is given it as a func rather than the Target naming a partition.
package cutover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/cut"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/statestore"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

type topicPartition = mirrorstate.TopicPartition

// The steps of a partition's STOPPING that are the stage's, as
// Target.Reached is told them (the plugin's StopStep names them so).
const (
	StepDeciding = "cut-deciding" // a consistent cut written for all but the decider's partition
	StepApplied  = "cut-applied"  // the partition truncated to its consistent cut
)

// Target is one mirror's run on this broker as the stage sees it. Its
// methods are called from the goroutine that runs the stage's call.
type Target interface {
	// Image is the metadata as this broker applied it: the set's topics,
	// their partitions' leaders, the brokers whose groups are clamped.
	Image() *metadata.Image
	// Led is this broker's log of a partition whose leader is leader,
	// when that leader is this broker and it hosts the partition; else
	// nil (the stage then reads the partition from leader over Fetch).
	Led(leader int32, id uuid.UUID, partition int32) plugin.Log
	// Reached is told that the STOPPING of tp reached a durable step of
	// the stage's (StepDeciding, StepApplied).
	Reached(tp topicPartition, step string)
	// Decided is told that a set's cut is decided and persisted: the
	// partitions that wait for it may go on.
	Decided()
}

// Stage is one mirror's consistent failovers on this broker.
type Stage struct {
	Mirror string
	Store  *statestore.Store
	Log    *slog.Logger
	Target Target
}

// SetOf names a consistent failover's set of topics.
func SetOf(topics []string) string {
	return strings.Join(slices.Sorted(slices.Values(topics)), ",")
}

// Decider is the partition whose leader decides the cut of set.
func Decider(set string) topicPartition {
	first, _, _ := strings.Cut(set, ",")
	return topicPartition{Topic: first, Partition: 0}
}

// Apply is STOPPING's consistent-cut step of partition tp (topic ID id),
// between removing the fetcher and bumping the epoch. It reports whether
// the stop may go on: not while the set's cut is undecided. Once decided,
// it truncates the partition to its cut (quarantining the rest: truncate
// does, and its error has failed the partition) and persists the cut as
// where the mirrored data ends (StopAt), so that a resumed stop does not
// truncate again what the stop writes after it.
func (s Stage) Apply(ctx context.Context, tp topicPartition, id uuid.UUID, st mirrorstate.PartitionState, truncate func(to int64, cause string) error) (mirrorstate.PartitionState, bool, error) {
	c := st.Cut
	if c.Set == "" || c.At >= 0 && st.StopAt <= c.At {
		return st, true, nil
	}
	decider := Decider(c.Set)
	if c.At < 0 || tp != decider {
		decided := c.At >= 0
		if decided { // only the decider's own cut says all are written
			if t := s.Target.Image().Topics[decider.Topic]; t != nil {
				ds, err := s.Store.Read(ctx, mirrorstate.PartitionKey{Mirror: s.Mirror, Topic: decider.Topic, Partition: 0}, t.ID)
				decided = err == nil && ds.Cut.Set == c.Set && ds.Cut.At >= 0
			}
		}
		if !decided {
			if tp == decider {
				return st, false, s.decide(ctx, c.Set)
			}
			return st, false, nil
		}
	}
	cause := fmt.Sprintf("consistent failover cut at %s", time.UnixMilli(c.Time).UTC().Format(time.RFC3339Nano))
	if err := truncate(c.At, cause); err != nil {
		return st, false, err
	}
	s.Target.Reached(tp, StepApplied)
	k := mirrorstate.PartitionKey{Mirror: s.Mirror, Topic: tp.Topic, Partition: tp.Partition}
	st, err := s.Store.Write(ctx, k, id, func(ps *mirrorstate.PartitionState) error {
		ps.StopAt = c.At
		return nil
	})
	return st, err == nil, err
}

// Reason says where a partition stands in a consistent failover, for
// --describe and the console: waiting for the cut, or where it was cut
// and what that gave up.
func Reason(st mirrorstate.PartitionState) string {
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

// Report is what a partition's consistent cut says in a failover
// report: T, and what it gave up beyond it (zeros without a cut).
func Report(st mirrorstate.PartitionState) (t, records, ms int64) {
	if st.Cut.At < 0 {
		return 0, 0, 0
	}
	return st.Cut.Time, st.Cut.Records, st.Cut.Ms
}

// member is one partition of a consistent failover's set.
type member struct {
	topicPartition
	id    uuid.UUID
	state mirrorstate.PartitionState
}

// decide computes the cut of set once every partition of it has let go
// of its fetcher, and persists it: see the package's comment. The scan
// of each partition starts a window below its StopAt that grows until
// the cut does not reach its start (cut.Short).
func (s Stage) decide(ctx context.Context, set string) error {
	img := s.Target.Image()
	want := map[topicPartition]uuid.UUID{}
	for _, name := range strings.Split(set, ",") {
		t := img.Topics[name]
		for i := 0; t != nil && i < len(t.Partitions); i++ {
			want[topicPartition{Topic: name, Partition: int32(i)}] = t.ID
		}
	}
	states := s.Store.ReadBatch(ctx, s.Mirror, want)
	var members []member
	for k, id := range want {
		st, ok := states[k]
		if !ok {
			var err error
			if st, err = s.Store.Read(ctx, mirrorstate.PartitionKey{Mirror: s.Mirror, Topic: k.Topic, Partition: k.Partition}, id); err != nil {
				return err
			}
		}
		if st.Cut.Set != set {
			continue // not stopping with this set: it failed over before
		}
		if st.StopAt < 0 {
			return nil // still mirroring: a later round
		}
		members = append(members, member{k, id, st})
	}
	slices.SortFunc(members, func(a, b member) int {
		return strings.Compare(fmt.Sprint(a.topicPartition), fmt.Sprint(b.topicPartition))
	})
	parts := make([]cut.Part, len(members))
	var t int64
	var cuts []int64
	for span := int64(4096); ; span *= 4 {
		all := true
		for i, m := range members {
			p, err := s.held(ctx, m, m.state.StopAt-span, m.state.StopAt)
			if errors.Is(err, errNotYet) {
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
	decider := Decider(set)
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
			s.Target.Reached(decider, StepDeciding)
		}
		records, ms := cut.Loss(parts[i], cuts[i], t)
		if _, err := s.Store.Write(ctx, mirrorstate.PartitionKey{Mirror: s.Mirror, Topic: m.Topic, Partition: m.Partition}, m.id, func(ps *mirrorstate.PartitionState) error {
			if ps.Cut.Set != set {
				return fmt.Errorf("%s-%d left the consistent failover of %s", m.Topic, m.Partition, set)
			}
			ps.Cut.At, ps.Cut.Time, ps.Cut.Records, ps.Cut.Ms = cuts[i], t, records, ms
			return nil
		}); err != nil {
			return err
		}
	}
	s.Log.Info("consistent failover cut decided", "topics", set, "time", time.UnixMilli(t).UTC(), "partitions", len(members))
	s.Target.Decided()
	return nil
}
