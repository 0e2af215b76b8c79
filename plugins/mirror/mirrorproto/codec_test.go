package mirrorproto

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func sp(s string) *string { return &s }

// roundTrip encodes m, decodes the bytes into fresh, and compares.
func roundTrip(t *testing.T, m interface {
	AppendTo([]byte) []byte
	ReadFrom([]byte) error
}, fresh interface{ ReadFrom([]byte) error }) {
	t.Helper()
	b := m.AppendTo(nil)
	if err := fresh.ReadFrom(b); err != nil {
		t.Fatalf("%T: decode: %v", m, err)
	}
	if !reflect.DeepEqual(m, fresh) {
		t.Fatalf("%T: round trip differs:\n got %+v\nwant %+v", m, fresh, m)
	}
	// Every proper prefix is an error, never a panic or a silent success.
	for n := range len(b) {
		f := reflect.New(reflect.TypeOf(fresh).Elem()).Interface().(interface{ ReadFrom([]byte) error })
		if err := f.ReadFrom(b[:n]); err == nil {
			t.Fatalf("%T: %d of %d bytes decoded without error", m, n, len(b))
		}
	}
}

// sampleMessages are a request and a response of every mirror API with
// every field set, tagged fields included.
func sampleMessages() ([]kmsg.Request, []kmsg.Response) {
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	reqs := []kmsg.Request{
		&CreateMirrorRequest{MirrorName: sp("m"), Configs: []MirrorConfig{{Name: "bootstrap.servers", Value: sp("h:1")}, {Name: "x"}}},
		&AddTopicsToMirrorRequest{Topics: []AddTopic{{TopicID: id, TopicName: "t", MirrorName: sp("m")}, {TopicName: "u"}}, ValidateOnly: true},
		&RemoveTopicsFromMirrorRequest{MirrorName: "m", Topics: []RemoveTopic{{TopicID: id, TopicName: ".*"}}, Mode: FailoverForce, TimeoutMs: 5000},
		&LastMirroredOffsetsRequest{MirrorName: "m", Topics: []PartitionsTopic{{Name: "t", Partitions: []int32{0, 5}}}},
		&ListMirrorsRequest{},
		&DescribeMirrorsRequest{MirrorNames: []string{"a", "b"}, IncludeAuthorizedOperations: true},
		&ReadMirrorStatesRequest{MirrorName: "m", Topics: []PartitionsTopic{{Name: "t", Partitions: []int32{1}}}, NeedPartitionStates: true},
		&WriteMirrorStatesRequest{MirrorName: "m", TopicsUpdated: []StatesTopic{{Name: "t", Partitions: []StatePartition{
			{PartitionIndex: 2, LastMirroredOffset: 99, State: 7 /* STOPPED */, LastMirrorEpoch: 7, Reason: "why", TopicID: id}}}}, RemovedTopics: []string{"old"}},
		&MirrorTopicsRequest{key: KeyPauseMirrorTopics, MirrorName: "m", Topics: []string{"t"}},
		&MirrorTopicsRequest{key: KeyResumeMirrorTopics, MirrorName: "m", Topics: []string{}}, // nil is sent as empty
		&MirrorTopicsRequest{key: KeyDeleteMirror, MirrorName: "m", Topics: []string{}},
		&BumpLeaderEpochsRequest{Topics: []BumpTopic{{TopicID: id, Partitions: []BumpPartition{{PartitionIndex: 3, MinLeaderEpoch: 41}}}}},
		&ReadMirrorStatesRequest{MirrorName: "m", Topics: []PartitionsTopic{{Name: "t", Partitions: []int32{1}, TopicID: id}}, NeedPartitionStates: true,
			KnownShards: []ShardMark{{Shard: 3, Incarnation: -7, Version: 9}}},
	}
	resps := []kmsg.Response{
		&CreateMirrorResponse{ErrResponse{ThrottleTimeMs: 1, ErrorCode: 139, ErrorMessage: sp("exists")}},
		&AddTopicsToMirrorResponse{TopicResponse{ThrottleTimeMs: 2, TopicID: id, ErrorCode: 140, ErrorMessage: sp("taken"),
			Truncations: []Truncation{{Topic: "t", Partition: 1, LogEnd: 90, TruncateTo: 40, LastMirrorEpoch: -1}}}},
		&RemoveTopicsFromMirrorResponse{TopicResponse{TopicID: id, Failover: []FailoverPartition{
			{Topic: "t", Partition: 0, SourceOffset: 90, SourceOffsetTime: 1700000000000, DestinationOffset: 80, Lag: 10, LagMs: 900},
			{Topic: "t", Partition: 1, SourceOffset: -1, DestinationOffset: 7, Lag: -1, LagMs: -1},
			{Topic: "t", Partition: 2, SourceOffset: 50, SourceOffsetTime: 1700000000000, DestinationOffset: 40, Lag: 10, LagMs: 20, SourceStale: true},
			{Topic: "u", Partition: 0, SourceOffset: -1, DestinationOffset: 30, Lag: -1, LagMs: -1, AlreadyStopped: true}}}},
		&LastMirroredOffsetsResponse{ErrorCode: 0, Topics: []OffsetsTopic{{Name: "t", Partitions: []OffsetsPartition{
			{PartitionIndex: 0, LastMirroredOffset: 10, LastMirrorEpoch: 3}, {PartitionIndex: 1, LastMirroredOffset: -1, ErrorCode: 29, LastMirrorEpoch: -1}}}}},
		&ListMirrorsResponse{Mirrors: []ListedMirror{{MirrorName: "m", SourceBootstrap: "h:1", TopicCount: 2}}},
		&DescribeMirrorsResponse{Mirrors: []DescribedMirror{{ErrorCode: 143, MirrorName: "m", AuthorizedOperations: 12,
			ErrorMessage: sp("unreachable"), State: "FAILED", ACLSync: "unsupported by source", SourceClusterID: "src-cluster", Diverged: []DivergedRange{{Topic: "t", Partition: 1,
				FirstOffset: 40, LastOffset: 89, FirstEpoch: 0, LastEpoch: 2, Records: 48, FirstTimestamp: 1, LastTimestamp: 2, TruncatedAt: 3,
				Cause: "diverging epoch 0", CopyStart: 0, CopyEnd: 50}}, Topics: []DescribedTopic{{TopicName: "t", Partitions: []PartitionDetail{
				{PartitionIndex: 0, SourceOffset: 10, DestinationOffset: 8, Lag: 2, State: "FAILED", Reason: "boom", LagMs: 1500, SourceOffsetTime: 1700000000000},
				{PartitionIndex: 1, SourceOffset: -1, DestinationOffset: -1, State: "PREPARING"},
				{PartitionIndex: 2, SourceOffset: 9, DestinationOffset: 9, State: "MIRRORING", SourceOffsetTime: 1700000000000, SourceStale: true,
					DestinationIssue: "no leader"}}}}}}},
		&ReadMirrorStatesResponse{Topics: []StatesTopic{{Name: "t", Partitions: []StatePartition{
			{PartitionIndex: 0, LastMirroredOffset: 5, State: 2 /* MIRRORING */, ErrorCode: 0, LastMirrorEpoch: -1, TopicID: id}}}}},
		&WriteMirrorStatesResponse{Topics: []ErrTopic{{Name: "t", Partitions: []ErrPartition{{PartitionIndex: 0, ErrorCode: 141}}}}},
		&MirrorTopicsResponse{ErrResponse{key: KeyPauseMirrorTopics, ErrorCode: 138, ErrorMessage: sp("no such mirror")}},
		&BumpLeaderEpochsResponse{Topics: []BumpTopic{{TopicID: id, Partitions: []BumpPartition{{PartitionIndex: 3, LeaderEpoch: 51}}}}},
		&ReadMirrorStatesResponse{Topics: []StatesTopic{}, Shards: []ShardMark{{Shard: 0, Incarnation: 1, Version: 2}, {Shard: 49, Incarnation: 3, Version: 4}}},
	}
	return reqs, resps
}

func TestMessagesRoundTrip(t *testing.T) {
	reqs, resps := sampleMessages()
	keys := map[int16]bool{}
	for _, r := range reqs {
		keys[r.Key()] = true
		fresh := NewRequest(r.Key())
		if fresh == nil {
			t.Fatalf("NewRequest(%d) = nil", r.Key())
		}
		roundTrip(t, r, fresh)
		if r.ResponseKind().Key() != r.Key() {
			t.Fatalf("%T: response kind has key %d", r, r.ResponseKind().Key())
		}
	}
	for _, r := range resps {
		fresh := r.RequestKind().ResponseKind()
		roundTrip(t, r, fresh)
		if fresh.Key() != r.Key() {
			t.Fatalf("%T: key %d after a round trip, want %d", r, fresh.Key(), r.Key())
		}
	}
	for k := KeyCreateMirror; k <= KeyBumpLeaderEpochs; k++ {
		if !keys[k] {
			t.Errorf("key %d has no round-trip case", k)
		}
	}
	if NewRequest(KeyBumpLeaderEpochs+1) != nil || NewRequest(0) != nil {
		t.Fatal("NewRequest answers a key that is not a mirror API")
	}
}

// A compact array claiming more elements than there are bytes left is an
// error, not an allocation of that size.
func TestDecodeHostileArrayLength(t *testing.T) {
	b := binary.AppendUvarint(nil, 1+1<<30) // compact: n+1
	if err := new(ListMirrorsResponse).ReadFrom(append([]byte{0, 0, 0, 0, 0, 0}, b...)); err == nil {
		t.Fatal("a 2^30-element array in a few bytes decoded")
	}
}

// Unknown tagged fields are skipped (a newer peer may send them).
func TestDecodeSkipsUnknownTags(t *testing.T) {
	r := &ListMirrorsRequest{}
	b := r.AppendTo(nil)
	b = b[:len(b)-1]                   // drop the empty tag section
	b = append(b, 1, 9, 2, 0xab, 0xcd) // one tag: id 9, two bytes
	if err := new(ListMirrorsRequest).ReadFrom(b); err != nil {
		t.Fatalf("unknown tag: %v", err)
	}
}

func TestErrorForCode(t *testing.T) {
	for _, e := range Errors {
		if got := ErrorForCode(e.Code); got != e {
			t.Fatalf("ErrorForCode(%d) = %v, want %v", e.Code, got, e)
		}
	}
	if err := ErrorForCode(3); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("ErrorForCode(3) = %v, want kerr's", err)
	}
}

// TestPrefixFieldsRoundTrip: the tagged fields of issue 43 (a mirror's
// topic prefix, a topic's and a manifest entry's source name, an added
// topic's name here) survive a round trip, and messages without them
// are coded as before (the golden file pins that).
func TestPrefixFieldsRoundTrip(t *testing.T) {
	roundTrip(t, &AddTopicsToMirrorRequest{Topics: []AddTopic{{TopicName: "a.orders", MirrorName: sp("m"), DestinationName: "orders"}}}, new(AddTopicsToMirrorRequest))
	roundTrip(t, &DescribeMirrorsResponse{Mirrors: []DescribedMirror{{MirrorName: "m", TopicPrefix: "a.",
		Topics:   []DescribedTopic{{TopicName: "a.orders", SourceTopicName: "orders", Partitions: []PartitionDetail{{State: "MIRRORING"}}}},
		Diverged: []DivergedRange{{Topic: "a.orders", SourceTopic: "orders", Cause: "c"}}}}}, new(DescribeMirrorsResponse))
}
