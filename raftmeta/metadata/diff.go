package metadata

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Delta is what changed between two images.
type Delta struct {
	CreatedTopics []UUID   // in the new image only, by name
	DeletedTopics []*Topic // in the old image only (as they were), by name
	// ChangedTopics are in both and differ: partitions, replicas, ISR,
	// leaders, epochs or configs.
	ChangedTopics        []UUID
	BrokersChanged       bool
	BrokerConfigsChanged bool // cluster-wide or per-broker dynamic configs
	// SecurityChanged: ACLs, SCRAM credentials or client quotas changed.
	SecurityChanged bool
}

// Empty reports whether nothing changed.
func (d Delta) Empty() bool {
	return len(d.CreatedTopics)+len(d.DeletedTopics)+len(d.ChangedTopics) == 0 && !d.BrokersChanged && !d.BrokerConfigsChanged && !d.SecurityChanged
}

// Diff returns what changed from old to new; a nil old is an empty image.
// Topics are matched by ID, so a topic deleted and re-created under the
// same name is both deleted and created.
func Diff(old, new *Image) Delta {
	if old == nil {
		old = &Image{}
	}
	// Unchanged topics are the same *Topic in both images (Apply copies
	// only what it changes), so one pass of pointer comparisons finds the
	// changes, and only they are sorted: a broker applying the creation
	// of one topic among thousands does not sort them all.
	var created, changed, deleted []*Topic
	for id, t := range new.TopicsByID {
		o := old.TopicsByID[id]
		switch {
		case o == nil:
			created = append(created, t)
		case o != t && !reflect.DeepEqual(o, t):
			changed = append(changed, t)
		}
	}
	for id, t := range old.TopicsByID {
		if new.TopicsByID[id] == nil {
			deleted = append(deleted, t)
		}
	}
	d := Delta{CreatedTopics: idsByName(created), ChangedTopics: idsByName(changed), DeletedTopics: byName(deleted)}
	d.BrokersChanged = !maps.Equal(old.Brokers, new.Brokers)
	d.BrokerConfigsChanged = !maps.Equal(old.BrokerConfigs, new.BrokerConfigs) ||
		!maps.EqualFunc(old.NodeConfigs, new.NodeConfigs, maps.Equal)
	d.SecurityChanged = !reflect.DeepEqual(old.securityImage, new.securityImage)
	if o := diffOld(old, new); !reflect.DeepEqual(o, d) {
		panic(fmt.Sprintf("diff differs:\nold %+v\nnew %+v", o, d))
	}
	return d
}

// byName sorts ts by name and returns it.
func byName(ts []*Topic) []*Topic {
	slices.SortFunc(ts, func(a, b *Topic) int { return strings.Compare(a.Name, b.Name) })
	return ts
}

// idsByName is the IDs of ts, by name (nil for none).
func idsByName(ts []*Topic) []UUID {
	if len(ts) == 0 {
		return nil
	}
	ids := make([]UUID, len(ts))
	for i, t := range byName(ts) {
		ids[i] = t.ID
	}
	return ids
}

// SortedTopics returns the image's topics by name.
func SortedTopics(img *Image) []*Topic {
	return byName(slices.Collect(maps.Values(img.TopicsByID)))
}

func diffOld(old, new *Image) Delta {
	if old == nil {
		old = &Image{}
	}
	var d Delta
	for _, t := range SortedTopics(new) {
		o := old.TopicsByID[t.ID]
		switch {
		case o == nil:
			d.CreatedTopics = append(d.CreatedTopics, t.ID)
		case o != t && !reflect.DeepEqual(o, t):
			d.ChangedTopics = append(d.ChangedTopics, t.ID)
		}
	}
	for _, t := range SortedTopics(old) {
		if new.TopicsByID[t.ID] == nil {
			d.DeletedTopics = append(d.DeletedTopics, t)
		}
	}
	d.BrokersChanged = !maps.Equal(old.Brokers, new.Brokers)
	d.BrokerConfigsChanged = !maps.Equal(old.BrokerConfigs, new.BrokerConfigs) ||
		!maps.EqualFunc(old.NodeConfigs, new.NodeConfigs, maps.Equal)
	d.SecurityChanged = !reflect.DeepEqual(old.securityImage, new.securityImage)
	return d
}
