package groups

import (
	"context"
	"slices"
	"strings"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/server/plugin"
)

var _ plugin.GroupDescriber = (*Plugin)(nil)

// DescribeGroups implements plugin.GroupDescriber: the groups of the
// shards this broker coordinates, by name; a shard still loading is left
// out.
func (p *Plugin) DescribeGroups(ctx context.Context) []plugin.GroupView {
	var out []plugin.GroupView
	for _, sh := range p.Runtime().Shards() {
		sh.Do(ctx, func(sh *coord.Shard) error {
			for _, g := range sh.State().(*shardState).groups {
				if g.state == stateDead {
					continue
				}
				v := plugin.GroupView{Name: g.name, State: g.state.String(), ProtocolType: g.protocolType, Protocol: g.protocol,
					Generation: g.generation, Offsets: map[plugin.TopicPartition]plugin.CommittedOffset{}}
				for _, m := range g.members {
					v.Members = append(v.Members, memberView(m.id, m.instanceID, m.clientID, m.clientHost))
				}
				if g.m != nil { // a consumer (KIP-848) or share group
					v.State, v.ProtocolType, v.Generation = g.modernState(), g.kind.String(), g.m.epoch
					for _, m := range g.m.members {
						v.Members = append(v.Members, memberView(m.id, m.instanceID, m.clientID, m.clientHost))
					}
				}
				slices.SortFunc(v.Members, func(a, b plugin.GroupMemberView) int { return strings.Compare(a.MemberID, b.MemberID) })
				for t, o := range g.offsets {
					v.Offsets[plugin.TopicPartition{Topic: t.topic, Partition: t.partition}] = plugin.CommittedOffset{Offset: o.offset, LeaderEpoch: o.epoch, Metadata: o.metadata}
				}
				out = append(out, v)
			}
			return nil
		})
	}
	slices.SortFunc(out, func(a, b plugin.GroupView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func memberView(id string, instanceID *string, clientID, clientHost string) plugin.GroupMemberView {
	mv := plugin.GroupMemberView{MemberID: id, ClientID: clientID, ClientHost: clientHost}
	if instanceID != nil {
		mv.InstanceID = *instanceID
	}
	return mv
}
