package groups

import (
	"maps"
	"slices"
	"strings"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Server-side assignors (KIP-848): the broker computes every member's
// target assignment. Both assignors are deterministic (members by id,
// topics by name, partitions in order), and rack-aware where racks are
// known: a partition goes to a member in the rack of one of its replicas
// when the balance allows it.

// assignorName maps a configured or requested assignor name (Kafka's
// short name or class name) to the short name; ok is false for an
// assignor Tandem does not serve.
func assignorName(name string) (string, bool) {
	switch name {
	case "uniform", "org.apache.kafka.coordinator.group.assignor.UniformAssignor":
		return "uniform", true
	case "range", "org.apache.kafka.coordinator.group.assignor.RangeAssignor":
		return "range", true
	}
	return "", false
}

// assignInput is what an assignor sees of a group.
type assignInput struct {
	members []assignMember // by id
	topics  map[uuid.UUID]*assignTopic
}

type assignMember struct {
	id     string
	rack   string // "" when unknown
	topics []uuid.UUID
	prev   assignment // the member's current target, for stickiness
}

type assignTopic struct {
	id         uuid.UUID
	name       string
	partitions int32
	racks      [][]string // per partition, the racks of its replicas; nil when unknown
}

// newAssignTopic describes a topic of the image for the assignors.
func newAssignTopic(img *metadata.Image, t *metadata.Topic) *assignTopic {
	at := &assignTopic{id: t.ID, name: t.Name, partitions: int32(len(t.Partitions))}
	known := false
	racks := make([][]string, len(t.Partitions))
	for i, p := range t.Partitions {
		for _, r := range p.Replicas {
			if b, ok := img.Brokers[r]; ok && b.Rack != "" && !slices.Contains(racks[i], b.Rack) {
				racks[i] = append(racks[i], b.Rack)
				known = true
			}
		}
	}
	if known {
		at.racks = racks
	}
	return at
}

func (t *assignTopic) inRack(p int32, rack string) bool {
	return rack != "" && t.racks != nil && slices.Contains(t.racks[p], rack)
}

// sortedTopics lists the input's topics by name.
func (in *assignInput) sortedTopics() []*assignTopic {
	ts := make([]*assignTopic, 0, len(in.topics))
	for _, t := range in.topics {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *assignTopic) int { return strings.Compare(a.name, b.name) })
	return ts
}

func emptyResult(in *assignInput) map[string]assignment {
	out := make(map[string]assignment, len(in.members))
	for _, m := range in.members {
		out[m.id] = assignment{}
	}
	return out
}

// assignUniform spreads every subscribed partition evenly over the
// members subscribed to its topic: each member gets ⌊P/M⌋ or ⌈P/M⌉
// partitions when subscriptions are alike. Members keep the partitions
// they had where that keeps the balance (fewer revocations), and new
// placements prefer a member in a replica's rack.
func assignUniform(in *assignInput) map[string]assignment {
	out := emptyResult(in)
	var subscribed []*assignMember
	for i := range in.members {
		if len(in.members[i].topics) > 0 {
			subscribed = append(subscribed, &in.members[i])
		}
	}
	if len(subscribed) == 0 {
		return out
	}
	eligible := map[uuid.UUID][]*assignMember{}
	total := 0
	for _, t := range in.sortedTopics() {
		for _, m := range subscribed {
			if slices.Contains(m.topics, t.id) {
				eligible[t.id] = append(eligible[t.id], m)
			}
		}
		if len(eligible[t.id]) > 0 {
			total += int(t.partitions)
		}
	}
	minQ := total / len(subscribed)
	extra := total % len(subscribed) // members that may hold minQ+1
	counts := map[string]int{}
	taken := map[tpid]bool{}
	give := func(m *assignMember, t uuid.UUID, p int32) {
		out[m.id].add(t, p)
		counts[m.id]++
		taken[tpid{t, p}] = true
		if counts[m.id] == minQ+1 {
			extra--
		}
	}
	valid := func(m *assignMember, t uuid.UUID, p int32) bool {
		at := in.topics[t]
		return at != nil && p < at.partitions && slices.Contains(m.topics, t) && !taken[tpid{t, p}]
	}
	// Stickiness: first up to the minimum quota, then one more while
	// members above the minimum are still allowed.
	for pass := 0; pass < 2; pass++ {
		for _, m := range subscribed {
			for _, t := range m.prev.topicIDs() {
				for _, p := range m.prev[t] {
					if !valid(m, t, p) {
						continue
					}
					if counts[m.id] < minQ || pass == 1 && counts[m.id] == minQ && extra > 0 {
						give(m, t, p)
					}
				}
			}
		}
	}
	for _, t := range in.sortedTopics() {
		for p := int32(0); p < t.partitions; p++ {
			if taken[tpid{t.id, p}] || len(eligible[t.id]) == 0 {
				continue
			}
			var best *assignMember
			better := func(m *assignMember) bool {
				if best == nil {
					return true
				}
				room := func(x *assignMember) bool { return counts[x.id] < minQ || counts[x.id] == minQ && extra > 0 }
				if r, rb := room(m), room(best); r != rb {
					return r
				}
				if r, rb := t.inRack(p, m.rack), t.inRack(p, best.rack); r != rb {
					return r
				}
				return counts[m.id] < counts[best.id]
			}
			for _, m := range eligible[t.id] {
				if better(m) {
					best = m
				}
			}
			give(best, t.id, p)
		}
	}
	return out
}

// subscribers lists the members subscribed to topic, in member order.
func (in *assignInput) subscribers(topic uuid.UUID) []*assignMember {
	var ms []*assignMember
	for i := range in.members {
		if slices.Contains(in.members[i].topics, topic) {
			ms = append(ms, &in.members[i])
		}
	}
	return ms
}

// assignRange gives each member subscribed to a topic a contiguous
// range of its partitions (Kafka's range assignor, per topic): with P
// partitions and M members, the first P mod M members get one more.
// Where racks are known, each member first takes, within its share,
// partitions with a replica in its rack.
func assignRange(in *assignInput) map[string]assignment {
	out := emptyResult(in)
	for _, t := range in.sortedTopics() {
		ms := in.subscribers(t.id)
		if len(ms) == 0 || t.partitions == 0 {
			continue
		}
		n := int32(len(ms))
		quota := func(i int) int32 {
			q := t.partitions / n
			if int32(i) < t.partitions%n {
				q++
			}
			return q
		}
		taken := make([]bool, t.partitions)
		got := make([]int32, len(ms))
		if t.racks != nil {
			for i, m := range ms {
				for p := int32(0); p < t.partitions && got[i] < quota(i); p++ {
					if !taken[p] && t.inRack(p, m.rack) {
						taken[p] = true
						got[i]++
						out[m.id].add(t.id, p)
					}
				}
			}
		}
		p := int32(0)
		for i, m := range ms {
			for ; got[i] < quota(i); p++ {
				if !taken[p] {
					taken[p] = true
					got[i]++
					out[m.id].add(t.id, p)
				}
			}
		}
	}
	return out
}

// assignShare is the share groups' assignor (Kafka's SimpleAssignor):
// every partition of a subscribed topic goes to at least one member
// subscribed to it. With more members than partitions, members share
// partitions, since a share group's members consume a partition
// together.
func assignShare(in *assignInput) map[string]assignment {
	out := emptyResult(in)
	for ti, t := range in.sortedTopics() {
		ms := in.subscribers(t.id)
		if len(ms) == 0 || t.partitions == 0 {
			continue
		}
		n := int32(len(ms))
		if n <= t.partitions {
			for p := int32(0); p < t.partitions; p++ {
				// Rotate by topic so that the members getting an
				// extra partition differ from topic to topic.
				out[ms[(p+int32(ti))%n].id].add(t.id, p)
			}
			continue
		}
		for i, m := range ms {
			out[m.id].add(t.id, (int32(i)+int32(ti))%t.partitions)
		}
	}
	return out
}

// preferredAssignor picks the server assignor of a consumer group: the
// one most members asked for (ties by name), else the configured default.
func preferredAssignor(members []*mmember, def string) string {
	votes := map[string]int{}
	for _, m := range members {
		if m.assignor != nil {
			if name, ok := assignorName(*m.assignor); ok {
				votes[name]++
			}
		}
	}
	best, n := def, 0
	for _, name := range slices.Sorted(maps.Keys(votes)) {
		if votes[name] > n {
			best, n = name, votes[name]
		}
	}
	return best
}
