package admit

import (
	"errors"
	"strings"
	"testing"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// TestAddedTopics: AddTopicsToMirror's names here, and the refusal of
// two mirrors writing one topic, naming both.
func TestAddedTopics(t *testing.T) {
	img := &metadata.Image{}
	img.Mirrors = map[string]*metadata.Mirror{
		"from-a": {Name: "from-a", Configs: map[string]string{"mirror.topic.prefix": "a."},
			Topics: map[string]metadata.MirrorTopic{"a.orders": {ID: uuid.Random(), Source: "orders"}}},
		"from-c": {Name: "from-c", Configs: map[string]string{"mirror.topic.prefix": "c."}},
		"plain":  {Name: "plain", Topics: map[string]metadata.MirrorTopic{"pay": {ID: uuid.Random()}}},
		"other":  {Name: "other"},
	}
	m := func(s string) *string { return &s }
	got, err := AddedTopics(img, []mirrorproto.AddTopic{{TopicName: "orders", MirrorName: m("from-c")}, {TopicName: "x", MirrorName: m("other")},
		{TopicName: "a.orders", MirrorName: m("other"), DestinationName: "back"}})
	if err != nil {
		t.Fatal(err)
	}
	if c, o := got["from-c"], got["other"]; len(c) != 1 || c[0] != (AddedTopic{"orders", "c.orders"}) ||
		len(o) != 2 || o[0] != (AddedTopic{"x", "x"}) || o[1] != (AddedTopic{"a.orders", "back"}) {
		t.Fatalf("added %v", got)
	}
	for _, tc := range []struct {
		topics []mirrorproto.AddTopic
		want   []string // in the message
	}{
		// other's a.orders is from-a's copy of orders.
		{[]mirrorproto.AddTopic{{TopicName: "a.orders", MirrorName: m("other")}}, []string{"other", "from-a", "orders", "a.orders"}},
		// Without prefixes, the message of old.
		{[]mirrorproto.AddTopic{{TopicName: "pay", MirrorName: m("other")}}, []string{"topic pay is already mirrored by mirror plain"}},
		// Two mirrors of one request onto one name.
		{[]mirrorproto.AddTopic{{TopicName: "c.x", MirrorName: m("other")}, {TopicName: "x", MirrorName: m("from-c")}}, []string{"from-c", "other", "c.x"}},
	} {
		_, err := AddedTopics(img, tc.topics)
		if !errors.Is(err, mirrorproto.ErrTopicAlreadyMirrored) {
			t.Errorf("%+v: %v, want TOPIC_ALREADY_MIRRORED", tc.topics, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q does not name %q", tc.topics, err, w)
			}
		}
	}
	if _, err := AddedTopics(img, []mirrorproto.AddTopic{{TopicName: "x", MirrorName: m("nosuch")}}); !errors.Is(err, mirrorproto.ErrMirrorNotFound) {
		t.Errorf("a missing mirror: %v", err)
	}
}
