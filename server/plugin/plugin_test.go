package plugin

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

func TestReadProps(t *testing.T) {
	r := ReadProps(map[string]string{"a": "7", "neg": "-1", "big": "4294967296", "word": "x"})
	if got := r.Int("a", 1, 1, 10); got != 7 {
		t.Errorf("a = %d", got)
	}
	if got := r.Int("unset", 42, 1, 100); got != 42 {
		t.Errorf("unset = %d, want the default", got)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("no bad value yet: %v", err)
	}
	for _, key := range []string{"neg", "big", "word"} {
		if got := r.Int(key, 5, 0, math.MaxInt32); got != 5 {
			t.Errorf("%s = %d, want the default", key, got)
		}
	}
	err := r.Err()
	for _, want := range []string{`neg="-1"`, `big="4294967296"`, `word="x"`, "from 0 to 2147483647"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int16
		msg  string
	}{
		{nil, 0, ""},
		{kerr.NotCoordinator, kerr.NotCoordinator.Code, kerr.NotCoordinator.Error()},
		{fmt.Errorf("group g: %w", kerr.NotCoordinator), kerr.NotCoordinator.Code, "group g"},
		{errors.New("disk on fire"), kerr.UnknownServerError.Code, "disk on fire"},
	} {
		code, msg := ErrorCode(tc.err), ErrorMessage(tc.err)
		if code != tc.code || (msg == nil) != (tc.err == nil) || (msg != nil && *msg != tc.msg) {
			t.Errorf("%v: code %d message %v, want %d %q", tc.err, code, msg, tc.code, tc.msg)
		}
	}
}

type a struct{}

func (a) OwnsProp(string) bool { return true }

type b struct{ a }

func TestFind(t *testing.T) {
	plugins := []any{1, a{}, "x", b{}}
	if got := All[PropsOwner](plugins); len(got) != 2 || got[0] != (a{}) || got[1] != (b{}) {
		t.Errorf("All = %v", got)
	}
	if got, ok := Find[PropsOwner](plugins); !ok || got != (a{}) {
		t.Errorf("Find = %v, %v", got, ok)
	}
	if _, ok := Find[Lifecycle](plugins); ok {
		t.Error("Find found a Lifecycle")
	}
}

// TestInternalTopicForCluster: replication factor and min.insync.replicas
// of an internal topic are Kafka's defaults capped at the live brokers.
func TestInternalTopicForCluster(t *testing.T) {
	img := func(live, fenced int) *metadata.Image {
		im := &metadata.Image{Brokers: map[int32]metadata.Broker{}}
		for i := range live + fenced {
			im.Brokers[int32(i)] = metadata.Broker{ID: int32(i), Fenced: i >= live}
		}
		return im
	}
	txn := InternalTopic{Name: "__transaction_state", ReplicationFactor: 3, Configs: map[string]string{"min.insync.replicas": "2"}}
	offsets := InternalTopic{Name: "__consumer_offsets", ReplicationFactor: 3}
	for _, c := range []struct {
		t            InternalTopic
		live, fenced int
		brokerMinISR int
		rf           int16
		minISR       string // "" = not set: the broker's applies
	}{
		{txn, 1, 0, 1, 1, "1"},
		{txn, 2, 0, 1, 2, "2"},
		{txn, 3, 0, 1, 3, "2"},
		{txn, 5, 0, 1, 3, "2"},
		{txn, 2, 3, 1, 2, "2"}, // fenced brokers do not count
		{offsets, 1, 0, 1, 1, ""},
		{offsets, 3, 0, 2, 3, ""},
		{offsets, 1, 0, 2, 1, "1"}, // the broker's 2 cannot be met by 1 replica
		{offsets, 0, 0, 1, 1, ""},
	} {
		got := c.t.ForCluster(img(c.live, c.fenced), c.brokerMinISR)
		if got.ReplicationFactor != c.rf || got.Configs["min.insync.replicas"] != c.minISR {
			t.Errorf("%s with %d live brokers (%d fenced), broker min ISR %d: RF %d, min ISR %q; want %d, %q",
				c.t.Name, c.live, c.fenced, c.brokerMinISR, got.ReplicationFactor, got.Configs["min.insync.replicas"], c.rf, c.minISR)
		}
	}
	if txn.Configs["min.insync.replicas"] != "2" {
		t.Error("ForCluster modified the spec's configs")
	}
}
