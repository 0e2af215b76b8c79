package metasync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Share-group offsets in the metadata sync (KIP-1279 syncs them like
// consumer-group offsets). A share group's progress in a partition is its
// share-partition start offset (SPSO): every record below it is done. The
// sync reads the start offsets of the source's share groups that
// mirror.groups.include (and not mirror.groups.exclude) selects with
// DescribeShareGroupOffsets, and sets them on the destination through the
// share-groups plugin's plugin.ShareGroupOffsets, as AlterShareGroupOffsets
// does. Only the start offset crosses: records above it that the source's
// consumers already acknowledged are delivered again after a failover
// (share groups promise at least once). A broker built without the share
// plugin syncs everything else.

// syncShareGroups copies the start offsets of the source's share groups
// for the mirror's active topics. Groups with members on the destination
// are skipped; each offset is clamped as consumer-group offsets are.
func (s *mirrorSync) syncShareGroups(ctx context.Context, cl *kgo.Client, f filters, paused map[topicPartition]bool) error {
	host := s.p.Host()
	sgo, ok := plugin.Find[plugin.ShareGroupOffsets](host.Plugins())
	if !ok {
		return nil
	}
	mirrored := s.mirroredTopics()
	if len(mirrored) == 0 {
		return nil
	}
	adm := kadm.NewClient(cl)
	listed, err := adm.ListGroupsByType(ctx, []string{"share"})
	if err != nil {
		return fmt.Errorf("list source share groups: %w", err)
	}
	groups := shareGroupsToSync(listed, f)
	if len(groups) == 0 {
		return nil
	}
	described, err := adm.DescribeShareGroupOffsets(ctx, groups...)
	if err != nil {
		return fmt.Errorf("describe source share group offsets: %w", err)
	}
	eng := host
	bounds := func(topic string, partition int32) (logStart, logEnd int64, ok bool) {
		t := mirrored[topic]
		if t == nil {
			return 0, 0, false
		}
		ep := eng.Partition(t.ID, partition)
		if ep == nil {
			return 0, 0, false // not hosted here: a later cycle, or another broker's partition
		}
		o := ep.Offsets()
		return o.LogStart, o.LogEnd, true
	}
	var errs []error
	for _, g := range groups {
		d, ok := described[g]
		switch {
		case !ok:
			continue // gone between the listing and the describe
		case d.Err != nil:
			errs = append(errs, fmt.Errorf("share group %s: describe source offsets: %w", g, d.Err))
			continue
		}
		if err := s.syncShareGroup(ctx, sgo, g, renameShareOffsets(d.Offsets, s.namesHere()), bounds, paused); err != nil {
			errs = append(errs, fmt.Errorf("share group %s: %w", g, err))
		}
	}
	return errors.Join(errs...)
}

// mirroredTopics are the mirror's topics that are not stopped, by name,
// as the destination's image has them.
func (s *mirrorSync) mirroredTopics() map[string]*metadata.Topic {
	img := s.p.Host().Metadata().Image()
	m := img.Mirrors[s.name]
	if m == nil {
		return nil
	}
	out := map[string]*metadata.Topic{}
	for name, mt := range m.Topics {
		if t := img.Topics[name]; !mt.Stopped && t != nil && t.ID == mt.ID {
			out[name] = t
		}
	}
	return out
}

// namesHere maps the source names of the mirror's topics to their names
// here (they differ with mirror.topic.prefix).
func (s *mirrorSync) namesHere() map[string]string {
	m := s.p.Host().Metadata().Image().Mirrors[s.name]
	if m == nil {
		return nil
	}
	return m.BySource()
}

// renameShareOffsets names the source's share offsets by the topics here
// (here: source name to name here); topics not mirrored are left out.
func renameShareOffsets(src kadm.ShareOffsets, here map[string]string) kadm.ShareOffsets {
	out := kadm.ShareOffsets{}
	for topic, ps := range src {
		if name, ok := here[topic]; ok {
			out[name] = ps
		}
	}
	return out
}

// shareGroupsToSync are the listed share groups the mirror's group
// filters select, sorted. A source older than ListGroups v5 lists groups
// without a type: none of them is a share group.
func shareGroupsToSync(listed kadm.ListedGroups, f filters) []string {
	var out []string
	for name, g := range listed {
		if g.GroupType == "share" && anyMatch(f.groupsIn, name) && !anyMatch(f.groupsEx, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (s *mirrorSync) syncShareGroup(ctx context.Context, sgo plugin.ShareGroupOffsets, group string, src kadm.ShareOffsets,
	bounds func(string, int32) (int64, int64, bool), paused map[topicPartition]bool) error {
	cur, state, err := sgo.ShareGroupStartOffsets(ctx, group)
	if err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) {
			return fmt.Errorf("the destination has a group of another type with this ID: %w", err)
		}
		return fmt.Errorf("destination start offsets: %w", err)
	}
	if state != "Empty" && state != "Dead" {
		return nil // active here: the destination's share consumers own its progress
	}
	alter := planShareStarts(src, cur, bounds, paused)
	if len(alter) == 0 {
		return nil
	}
	if err := sgo.AlterShareGroupStartOffsets(ctx, group, alter); err != nil {
		if errors.Is(err, kerr.NonEmptyGroup) {
			return nil // a member joined meanwhile: the group is active now
		}
		return fmt.Errorf("alter start offsets: %w", err)
	}
	s.log.Debug("share group start offsets synced", "group", group, "partitions", len(alter))
	return nil
}

// planShareStarts returns the start offsets to set on the destination:
// each source start offset of a hosted, unpaused mirror partition,
// clamped to max(log start, min(source offset, log end)) of the
// destination partition (as consumer-group offsets are, so that a share
// consumer after failover neither skips records the destination has not
// received yet nor waits below its log start), when it differs from the
// destination's. Partitions whose source share state is not initialized
// (-1) or has an error are left alone.
func planShareStarts(src kadm.ShareOffsets, cur map[plugin.TopicPartition]plugin.CommittedOffset,
	bounds func(string, int32) (logStart, logEnd int64, ok bool), paused map[topicPartition]bool) map[plugin.TopicPartition]int64 {
	out := map[plugin.TopicPartition]int64{}
	for _, topic := range slices.Sorted(maps.Keys(src)) {
		for p, o := range src[topic] {
			if o.Err != nil || o.StartOffset < 0 || paused[topicPartition{topic, p}] {
				continue
			}
			logStart, logEnd, ok := bounds(topic, p)
			if !ok {
				continue
			}
			at := max(logStart, min(o.StartOffset, logEnd))
			tp := plugin.TopicPartition{Topic: topic, Partition: p}
			if c, ok := cur[tp]; !ok || c.Offset != at {
				out[tp] = at
			}
		}
	}
	return out
}
