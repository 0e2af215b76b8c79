package metasync

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tandem-kafka/tandem/server/plugin"
)

func TestShareGroupsToSync(t *testing.T) {
	listed := kadm.ListedGroups{
		"q-orders":  {Group: "q-orders", GroupType: "share"},
		"q-skip":    {Group: "q-skip", GroupType: "share"},
		"x-other":   {Group: "x-other", GroupType: "share"},
		"q-classic": {Group: "q-classic", GroupType: "classic"},
		"q-old":     {Group: "q-old"}, // a source without group types
		"q-billing": {Group: "q-billing", GroupType: "share"},
	}
	f, err := parseFilters(map[string]string{"mirror.groups.include": "q-.*", "mirror.groups.exclude": "q-skip"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := shareGroupsToSync(listed, f), []string{"q-billing", "q-orders"}; !slices.Equal(got, want) {
		t.Errorf("include q-.* exclude q-skip: %v, want %v", got, want)
	}
	f, _ = parseFilters(map[string]string{}) // the default includes every group
	if got, want := shareGroupsToSync(listed, f), []string{"q-billing", "q-orders", "q-skip", "x-other"}; !slices.Equal(got, want) {
		t.Errorf("default filters: %v, want %v", got, want)
	}
	f, _ = parseFilters(map[string]string{"mirror.groups.include": ""})
	if got := shareGroupsToSync(listed, f); len(got) != 0 {
		t.Errorf("empty include: %v", got)
	}
}

func TestPlanShareStarts(t *testing.T) {
	so := func(topic string, p int32, start int64) kadm.ShareOffset {
		return kadm.ShareOffset{Topic: topic, Partition: p, StartOffset: start}
	}
	src := kadm.ShareOffsets{
		"a": {
			0: so("a", 0, 40),  // within the destination's log: as is
			1: so("a", 1, 900), // beyond the destination's log end: clamped to it
			2: so("a", 2, 3),   // below the destination's log start: raised to it
			3: so("a", 3, -1),  // not initialized on the source
			4: so("a", 4, 10),  // paused
			5: so("a", 5, 20),  // already there
			6: so("a", 6, 20),  // not hosted here
		},
		"b": {0: {Topic: "b", StartOffset: 7, Err: errors.New("NOT_COORDINATOR")}},
		"c": {0: so("c", 0, 5)}, // not a mirror topic
	}
	bounds := func(topic string, p int32) (int64, int64, bool) {
		if topic != "a" || p == 6 {
			return 0, 0, false
		}
		if p == 2 {
			return 10, 100, true
		}
		return 0, 100, true
	}
	cur := map[plugin.TopicPartition]plugin.CommittedOffset{
		{Topic: "a", Partition: 0}: {Offset: 30, LeaderEpoch: -1},
		{Topic: "a", Partition: 5}: {Offset: 20, LeaderEpoch: -1},
	}
	paused := map[topicPartition]bool{{"a", 4}: true}
	got := planShareStarts(src, cur, bounds, paused)
	want := map[plugin.TopicPartition]int64{
		{Topic: "a", Partition: 0}: 40,
		{Topic: "a", Partition: 1}: 100,
		{Topic: "a", Partition: 2}: 10,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	// Once applied, the next cycle has nothing to do.
	for tp, o := range got {
		cur[tp] = plugin.CommittedOffset{Offset: o, LeaderEpoch: -1}
	}
	if got := planShareStarts(src, cur, bounds, paused); len(got) != 0 {
		t.Fatalf("second plan %v, want nothing", got)
	}
}
