// Package mirrorproto holds the cluster mirroring messages of KIP-1279: the API
// keys, the error codes, every request and response with its encoding.
// It imports nothing of Tandem's but uuid, so the admin client, the
// command line and the tests speak the mirror APIs without the plugin.
package mirrorproto

import (
	"reflect"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/tandem-kafka/tandem/internal/uuid"
)

// The mirror APIs and error codes. Apache Kafka has not fixed these
// numbers (KIP-1279 is not released); this is the one table of them.
// Keys 94–101 are the KIP's; 102–105 are the operations the KIP names
// without a schema, numbered as the KIP's public prototype does. kmsg
// maps 94 to UnregisterController, a controller-only API a broker never
// serves, so 94 is served with this package's own message types.
const (
	KeyCreateMirror           int16 = 94
	KeyAddTopicsToMirror      int16 = 95
	KeyRemoveTopicsFromMirror int16 = 96
	KeyLastMirroredOffsets    int16 = 97
	KeyListMirrors            int16 = 98
	KeyDescribeMirrors        int16 = 99
	KeyReadMirrorStates       int16 = 100
	KeyWriteMirrorStates      int16 = 101
	KeyPauseMirrorTopics      int16 = 102
	KeyResumeMirrorTopics     int16 = 103
	KeyDeleteMirror           int16 = 104
	KeyBumpLeaderEpochs       int16 = 105
)

// Error codes above kerr's highest (136).
var (
	ErrReadOnlyTopic = &kerr.Error{Message: "READ_ONLY_TOPIC", Code: 137,
		Description: "The topic is a mirror topic and read-only: it can only be changed through the mirror APIs."}
	ErrMirrorNotFound = &kerr.Error{Message: "MIRROR_NOT_FOUND", Code: 138,
		Description: "The cluster mirror does not exist."}
	ErrMirrorAlreadyExists = &kerr.Error{Message: "MIRROR_ALREADY_EXISTS", Code: 139,
		Description: "A cluster mirror with this name already exists."}
	ErrTopicAlreadyMirrored = &kerr.Error{Message: "TOPIC_ALREADY_MIRRORED", Code: 140,
		Description: "The topic is already mirrored by another mirror."}
	ErrTopicNotMirrored = &kerr.Error{Message: "TOPIC_NOT_MIRRORED", Code: 141,
		Description: "The topic is not in the mirror."}
	ErrMirrorLeaderEpochExceeded = &kerr.Error{Message: "MIRROR_LEADER_EPOCH_EXCEEDED", Code: 142, Retriable: true,
		Description: "A mirrored batch carries a leader epoch above the destination's: the destination epoch must be bumped first."}
	ErrMirrorSourceUnavailable = &kerr.Error{Message: "MIRROR_SOURCE_UNAVAILABLE", Code: 143, Retriable: true,
		Description: "The mirror's source cluster cannot be reached or refused the mirror's credentials."}
	ErrMirrorAuthorizationFailed = &kerr.Error{Message: "MIRROR_AUTHORIZATION_FAILED", Code: 144,
		Description: "The principal is not authorized for the operation on the cluster mirror (ACL resource type MIRROR)."}
)

// Errors are the mirror error codes above (ErrorForCode knows them).
var Errors = []*kerr.Error{ErrReadOnlyTopic, ErrMirrorNotFound, ErrMirrorAlreadyExists, ErrTopicAlreadyMirrored,
	ErrTopicNotMirrored, ErrMirrorLeaderEpochExceeded, ErrMirrorSourceUnavailable, ErrMirrorAuthorizationFailed}

// ErrorForCode is kerr.ErrorForCode that also knows the mirror codes.
func ErrorForCode(code int16) error {
	for _, e := range Errors {
		if e.Code == code {
			return e
		}
	}
	return kerr.ErrorForCode(code)
}

// --- 94 CreateMirror ---

type CreateMirrorRequest struct {
	version
	MirrorName *string
	Configs    []MirrorConfig
}

type MirrorConfig struct {
	Name  string
	Value *string
}

func (r *CreateMirrorRequest) Key() int16               { return KeyCreateMirror }
func (r *CreateMirrorRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *CreateMirrorRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *CreateMirrorRequest) ResponseKind() kmsg.Response {
	return &CreateMirrorResponse{ErrResponse{version: r.version}}
}

// ErrResponse is the response of the APIs that answer only an error:
// CreateMirror (94), PauseMirrorTopics (102), ResumeMirrorTopics (103)
// and DeleteMirror (104).
type ErrResponse struct {
	version
	key            int16 // for MirrorTopicsResponse
	ThrottleTimeMs int32
	ErrorCode      int16
	ErrorMessage   *string
}

type CreateMirrorResponse struct{ ErrResponse }

func (r *CreateMirrorResponse) Key() int16 { return KeyCreateMirror }
func (r *CreateMirrorResponse) RequestKind() kmsg.Request {
	return &CreateMirrorRequest{version: r.version}
}
func (r *ErrResponse) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *ErrResponse) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *ErrResponse) SetErr(code int16, msg string) {
	r.ErrorCode, r.ErrorMessage = code, NonEmpty(msg)
}

// NonEmpty is s as an optional string: nil when empty.
func NonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// --- 95 AddTopicsToMirror ---

// AddTopicsToMirrorRequest adds topics to mirrors. Tagged field 0,
// ValidateOnly, checks the request against both clusters and reports
// what truncation would remove here without adding anything.
type AddTopicsToMirrorRequest struct {
	version
	Topics       []AddTopic
	ValidateOnly bool // tag 0
}

// AddTopic names a source topic. Tagged field 0, DestinationName, is
// the topic's name here when it is not what the mirror's
// mirror.topic.prefix makes of TopicName (a failback of a prefixed
// topic: the old primary's orders copies the new primary's a.orders).
type AddTopic struct {
	TopicID         uuid.UUID
	TopicName       string
	MirrorName      *string
	DestinationName string // tag 0
}

func (r *AddTopicsToMirrorRequest) Key() int16               { return KeyAddTopicsToMirror }
func (r *AddTopicsToMirrorRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *AddTopicsToMirrorRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *AddTopicsToMirrorRequest) ResponseKind() kmsg.Response {
	return &AddTopicsToMirrorResponse{TopicResponse{version: r.version}}
}

// TopicResponse is the response of AddTopicsToMirror and
// RemoveTopicsFromMirror: one error for the whole request, which is
// applied all or nothing. Tagged field 0, Truncations, says what adding
// topics removes (or, validate-only, would remove) from their logs here.
type TopicResponse struct {
	version
	ThrottleTimeMs int32
	TopicID        uuid.UUID
	ErrorCode      int16
	ErrorMessage   *string
	Truncations    []Truncation        // tag 0
	Failover       []FailoverPartition // tag 1
}

// FailoverPartition is where a failover (RemoveTopicsFromMirror) left a
// partition: the source end offset last learned, when, and the lag then,
// in records and in milliseconds of record time (-1: unknown) — what a
// failover with the source gone gave up. DestinationOffset is the end of
// the mirrored data. A refused safe failover reports the partitions as
// they were. Tagged fields: 0 SourceStale (SourceOffset was not the
// source's end when the failover began, as PartitionDetail's: the lag
// is a lower bound), 1 AlreadyStopped (the partition had failed over
// before this request: DestinationOffset is where that stop left it, and
// the lag it gave up then is not known any more).
type FailoverPartition struct {
	Topic             string
	Partition         int32
	SourceOffset      int64
	SourceOffsetTime  int64 // Unix milliseconds, 0 unknown
	DestinationOffset int64
	Lag               int64
	LagMs             int64
	SourceStale       bool // tag 0
	AlreadyStopped    bool // tag 1
	// A consistent failover's cut (tags 2-4): its source time T (Unix ms,
	// 0 none), and the records and ms of record time the partition gave
	// up beyond it, into the divergence quarantine.
	CutTime    int64
	CutRecords int64
	CutMs      int64
}

// Truncation is what adding a topic to a mirror cuts from one partition
// of it that exists here with records (a failback): [TruncateTo, LogEnd),
// where the source's last mirror epoch and the source's own log for that
// epoch leave no room for them. LastMirrorEpoch -1 means the source never
// mirrored the topic (the KIP's scenario A): everything goes.
type Truncation struct {
	Topic           string
	Partition       int32
	LogEnd          int64
	TruncateTo      int64
	LastMirrorEpoch int32
}

// Records is how many offsets the truncation removes.
func (t Truncation) Records() int64 { return t.LogEnd - t.TruncateTo }

func (r *TopicResponse) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *TopicResponse) ReadFrom(b []byte) error  { return decode(b, r) }

type AddTopicsToMirrorResponse struct{ TopicResponse }

func (r *AddTopicsToMirrorResponse) Key() int16 { return KeyAddTopicsToMirror }
func (r *AddTopicsToMirrorResponse) RequestKind() kmsg.Request {
	return &AddTopicsToMirrorRequest{version: r.version}
}

// --- 96 RemoveTopicsFromMirror ---

// RemoveTopicsFromMirrorRequest stops mirroring topics: they fail over.
// Tagged fields: 0 Mode (FailoverNow, the KIP's; FailoverSafe;
// FailoverForce), 1 TimeoutMs, how long the broker may wait (0: its
// mirror.request.timeout.ms), 2 Consistent (Tandem's: the topics fail
// over at one consistent cut, see plugins/mirror/cut).
type RemoveTopicsFromMirrorRequest struct {
	version
	MirrorName string
	Topics     []RemoveTopic
	Mode       int8  // tag 0
	TimeoutMs  int32 // tag 1
	Consistent bool  // tag 2
}

// Failover modes of RemoveTopicsFromMirror.
const (
	// FailoverNow stops the topics at once (the KIP's remove).
	FailoverNow int8 = 0
	// FailoverSafe waits until every partition has lag 0 against a
	// source end offset learned after the request came, then stops
	// them; it refuses when the source is unreachable or the time is up.
	FailoverSafe int8 = 1
	// FailoverForce waits like FailoverSafe while the source answers,
	// and stops the topics anyway when it does not or the time is up.
	FailoverForce int8 = 2
)

// Timeout implements kmsg.TimeoutRequest, so that clients wait for the
// broker as long as it may take.
func (r *RemoveTopicsFromMirrorRequest) Timeout() int32 {
	if r.TimeoutMs > 0 {
		return r.TimeoutMs + 30000 // the wait, then the stop itself
	}
	return 30000
}

// RemoveTopic names a topic; TopicName may be a regular expression
// (anchored) matching several topics of the mirror, e.g. ".*".
type RemoveTopic struct {
	TopicID   uuid.UUID
	TopicName string
}

func (r *RemoveTopicsFromMirrorRequest) Key() int16               { return KeyRemoveTopicsFromMirror }
func (r *RemoveTopicsFromMirrorRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *RemoveTopicsFromMirrorRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *RemoveTopicsFromMirrorRequest) ResponseKind() kmsg.Response {
	return &RemoveTopicsFromMirrorResponse{TopicResponse{version: r.version}}
}

type RemoveTopicsFromMirrorResponse struct{ TopicResponse }

func (r *RemoveTopicsFromMirrorResponse) Key() int16 { return KeyRemoveTopicsFromMirror }
func (r *RemoveTopicsFromMirrorResponse) RequestKind() kmsg.Request {
	return &RemoveTopicsFromMirrorRequest{version: r.version}
}

// --- 97 LastMirroredOffsets ---

// PartitionsTopic names partitions of a topic.
type PartitionsTopic struct {
	Name       string
	Partitions []int32
	// TopicID (tag 0, written when set) names the topic of a mirror
	// partition whose state one broker reads from the coordinator on
	// another: the coordinator then needs neither the mirror nor the
	// topic in its own image, which may lag the asker's.
	TopicID uuid.UUID
}

type LastMirroredOffsetsRequest struct {
	version
	MirrorName string
	Topics     []PartitionsTopic
}

func (r *LastMirroredOffsetsRequest) Key() int16               { return KeyLastMirroredOffsets }
func (r *LastMirroredOffsetsRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *LastMirroredOffsetsRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *LastMirroredOffsetsRequest) ResponseKind() kmsg.Response {
	return &LastMirroredOffsetsResponse{version: r.version}
}

type LastMirroredOffsetsResponse struct {
	version
	ThrottleTimeMs int32
	ErrorCode      int16
	Topics         []OffsetsTopic
}

type OffsetsTopic struct {
	Name       string
	Partitions []OffsetsPartition
}

// OffsetsPartition is one partition's last mirrored offset. The last
// mirror epoch (LME) rides in tagged field 0: a destination asks its new
// source for it on failback (-1: the partition was never mirrored there).
type OffsetsPartition struct {
	PartitionIndex     int32
	LastMirroredOffset int64
	ErrorCode          int16
	LastMirrorEpoch    int32 // tag 0
}

func (r *LastMirroredOffsetsResponse) Key() int16               { return KeyLastMirroredOffsets }
func (r *LastMirroredOffsetsResponse) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *LastMirroredOffsetsResponse) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *LastMirroredOffsetsResponse) RequestKind() kmsg.Request {
	return &LastMirroredOffsetsRequest{version: r.version}
}

// --- 98 ListMirrors ---

type ListMirrorsRequest struct{ version }

func (r *ListMirrorsRequest) Key() int16               { return KeyListMirrors }
func (r *ListMirrorsRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *ListMirrorsRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *ListMirrorsRequest) ResponseKind() kmsg.Response {
	return &ListMirrorsResponse{version: r.version}
}

type ListMirrorsResponse struct {
	version
	ThrottleTimeMs int32
	ErrorCode      int16
	Mirrors        []ListedMirror
}

type ListedMirror struct {
	MirrorName      string
	SourceBootstrap string
	TopicCount      int32
}

func (r *ListMirrorsResponse) Key() int16               { return KeyListMirrors }
func (r *ListMirrorsResponse) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *ListMirrorsResponse) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *ListMirrorsResponse) RequestKind() kmsg.Request {
	return &ListMirrorsRequest{version: r.version}
}

// --- 99 DescribeMirrors ---

type DescribeMirrorsRequest struct {
	version
	MirrorNames                 []string
	IncludeAuthorizedOperations bool
	// Local (tag 0) asks for the answering broker's own view only: the
	// source side of the partitions it leads. A broker describing a
	// mirror asks the leaders of the other partitions so.
	Local bool
}

func (r *DescribeMirrorsRequest) Key() int16               { return KeyDescribeMirrors }
func (r *DescribeMirrorsRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *DescribeMirrorsRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *DescribeMirrorsRequest) ResponseKind() kmsg.Response {
	return &DescribeMirrorsResponse{version: r.version}
}

type DescribeMirrorsResponse struct {
	version
	ThrottleTimeMs int32
	Mirrors        []DescribedMirror
}

// DescribedMirror is one mirror. Tagged fields: 0 ErrorMessage (why the
// mirror fails, e.g. its source is unreachable), 1 State (the mirror's
// own state, mirrorview.MirrorState: MIRRORING, PAUSED, STOPPED or FAILED), 2
// ACLSync (how the ACL sync fares: "" when it works or is not
// configured, "unsupported by source" for a source without DescribeAcls,
// else its last error), 3 Diverged (the divergence manifest), 4
// SourceClusterID (the source's cluster ID as the mirror recorded it, ""
// until learned).
type DescribedMirror struct {
	ErrorCode            int16
	MirrorName           string
	Topics               []DescribedTopic
	AuthorizedOperations int32
	ErrorMessage         *string         // tag 0
	State                string          // tag 1
	ACLSync              string          // tag 2
	Diverged             []DivergedRange // tag 3
	SourceClusterID      string          // tag 4
	TopicPrefix          string          // tag 5: mirror.topic.prefix ("" for none)
}

// DivergedRange is an entry of a mirror's divergence manifest: records a
// truncation removed from a mirror partition (the old primary's writes
// after a split, say), which were first copied byte for byte into
// partition Partition of Topic + ".diverged", at [CopyStart, CopyEnd).
type DivergedRange struct {
	Topic          string
	Partition      int32
	FirstOffset    int64 // the first and last offsets removed
	LastOffset     int64
	FirstEpoch     int32 // the leader epochs of the first and last batches
	LastEpoch      int32
	Records        int64 // data records (transaction markers excluded)
	FirstTimestamp int64 // Unix milliseconds
	LastTimestamp  int64
	TruncatedAt    int64 // Unix milliseconds
	Cause          string
	CopyStart      int64
	CopyEnd        int64
	// SourceTopic is the mirror topic's name on the source when it is
	// not Topic (DescribeMirrors' tag 0 of a manifest entry; "" when
	// the same).
	SourceTopic string
}

// DescribedTopic is a mirror topic by its name here. Tagged field 0,
// SourceTopicName, is its name on the source when that differs ("" when
// it is the same: a mirror without mirror.topic.prefix).
type DescribedTopic struct {
	TopicName       string
	Partitions      []PartitionDetail
	SourceTopicName string // tag 0
}

// PartitionDetail is one mirrored partition. SourceOffset is the source's
// end offset as last learned, -1 when unknown, and Lag is then -1 too:
// unknown is never 0. Tagged fields: 0 Reason (why the partition is
// FAILED, or why it cannot be copied now: the source unreachable, its
// partition leaderless), 1 the lag in milliseconds in record time (0
// when caught up, -1 unknown), 2 SourceOffsetTime, when SourceOffset was
// learned (Unix milliseconds; 0 when unknown), 3 SourceStale (true when
// SourceOffset is known but may not be the source's end now: not learned
// within sourceStaleAfter, or the source cannot be asked; the lag is then
// a lower bound), 4 DestinationIssue (why the destination partition
// does not hold its copy safely: no leader, or an ISR below
// min.insync.replicas; "" when it does).
type PartitionDetail struct {
	PartitionIndex    int32
	SourceOffset      int64
	DestinationOffset int64
	Lag               int64
	State             string
	Reason            string // tag 0
	LagMs             int64  // tag 1
	SourceOffsetTime  int64  // tag 2
	SourceStale       bool   // tag 3
	DestinationIssue  string // tag 4
}

func (r *DescribeMirrorsResponse) Key() int16 { return KeyDescribeMirrors }

func (r *DescribeMirrorsResponse) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *DescribeMirrorsResponse) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *DescribeMirrorsResponse) RequestKind() kmsg.Request {
	return &DescribeMirrorsRequest{version: r.version}
}

// --- 100 ReadMirrorStates ---

type ReadMirrorStatesRequest struct {
	version
	MirrorName          string
	Topics              []PartitionsTopic
	NeedPartitionStates bool
	// KnownShards (tag 0, between brokers) are the __mirror_state shards
	// whose states the asker already has: the coordinator leaves out the
	// partitions of those still the same (ReadMirrorStatesResponse.Shards).
	KnownShards []ShardMark
}

// ShardMark is a __mirror_state shard as a coordinator has it: nothing of
// its partitions' states changed while the mark is the same.
type ShardMark struct {
	Shard       int32
	Incarnation int64
	Version     int64
}

func (r *ReadMirrorStatesRequest) Key() int16               { return KeyReadMirrorStates }
func (r *ReadMirrorStatesRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *ReadMirrorStatesRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *ReadMirrorStatesRequest) ResponseKind() kmsg.Response {
	return &ReadMirrorStatesResponse{version: r.version}
}

// StatesTopic carries partition states (ReadMirrorStates response,
// WriteMirrorStates request).
type StatesTopic struct {
	Name       string
	Partitions []StatePartition
}

// StatePartition is a partition's persisted mirror state. Tagged fields:
// 0 the last mirror epoch, 1 the reason of a FAILED state, 2 the topic ID,
// 3 and 4 the failover's persisted first step (the log end offset and
// leader epoch when the fetcher let go; -1 before), so that a broker
// running the failover of a partition whose state another broker
// coordinates resumes it from the same point; 5 its last step done; 6
// the partition's divergence manifest entries (between brokers); 7 the
// metadata index of the topic's stop (with STOPPED).
type StatePartition struct {
	PartitionIndex     int32
	LastMirroredOffset int64
	State              int8
	ErrorCode          int16 // responses only
	LastMirrorEpoch    int32 // tag 0
	Reason             string
	TopicID            uuid.UUID
	StopOffset         int64 // tag 3
	StopEpoch          int32 // tag 4
	StopDone           bool  // tag 5
	StopIndex          int64 // tag 7
	// A consistent failover's cut (tags 8-12): the set of topics, the
	// offset kept up to (-1 undecided), T, what is given up beyond it;
	// and (tag 13) when the partition last held all the source had.
	CutSet     string
	CutAt      int64
	CutTime    int64
	CutRecords int64
	CutMs      int64
	CompleteAt int64
	// Diverged (tag 6) are the partition's divergence manifest entries,
	// between brokers only: a coordinator answers them to a
	// ReadMirrorStates that names the topic ID, and a WriteMirrorStates
	// partition that carries them persists them and nothing else.
	Diverged []DivergedEntry
}

// DivergedEntry is a divergence manifest entry as the coordinator keeps
// it: Done once every removed record was copied.
type DivergedEntry struct {
	DivergedRange
	Done bool
}

type ReadMirrorStatesResponse struct {
	version
	ThrottleTimeMs int32
	ErrorCode      int16
	Topics         []StatesTopic
	// Shards (tag 0) are the marks of the shards of the partitions
	// asked, to a request with KnownShards: a partition left out of
	// Topics is of a shard whose mark is the one the asker knew.
	Shards []ShardMark
}

func (r *ReadMirrorStatesResponse) Key() int16               { return KeyReadMirrorStates }
func (r *ReadMirrorStatesResponse) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *ReadMirrorStatesResponse) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *ReadMirrorStatesResponse) RequestKind() kmsg.Request {
	return &ReadMirrorStatesRequest{version: r.version}
}

// --- 101 WriteMirrorStates ---

type WriteMirrorStatesRequest struct {
	version
	MirrorName    string
	TopicsUpdated []StatesTopic
	RemovedTopics []string
}

func (r *WriteMirrorStatesRequest) Key() int16               { return KeyWriteMirrorStates }
func (r *WriteMirrorStatesRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *WriteMirrorStatesRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *WriteMirrorStatesRequest) ResponseKind() kmsg.Response {
	return &WriteMirrorStatesResponse{version: r.version}
}

type WriteMirrorStatesResponse struct {
	version
	ThrottleTimeMs int32
	ErrorCode      int16
	Topics         []ErrTopic
}

type ErrTopic struct {
	Name       string
	Partitions []ErrPartition
}

type ErrPartition struct {
	PartitionIndex int32
	ErrorCode      int16
}

func (r *WriteMirrorStatesResponse) Key() int16               { return KeyWriteMirrorStates }
func (r *WriteMirrorStatesResponse) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *WriteMirrorStatesResponse) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *WriteMirrorStatesResponse) RequestKind() kmsg.Request {
	return &WriteMirrorStatesRequest{version: r.version}
}

// --- 102 PauseMirrorTopics, 103 ResumeMirrorTopics, 104 DeleteMirror ---

// MirrorTopicsRequest is the request of pause (102), resume (103) and
// delete (104): a mirror and, for pause and resume, optional topics (none
// means every topic of the mirror).
type MirrorTopicsRequest struct {
	version
	key        int16
	MirrorName string
	Topics     []string
}

func NewPauseMirrorTopicsRequest() *MirrorTopicsRequest {
	return &MirrorTopicsRequest{key: KeyPauseMirrorTopics}
}
func NewResumeMirrorTopicsRequest() *MirrorTopicsRequest {
	return &MirrorTopicsRequest{key: KeyResumeMirrorTopics}
}
func NewDeleteMirrorRequest() *MirrorTopicsRequest { return &MirrorTopicsRequest{key: KeyDeleteMirror} }

func (r *MirrorTopicsRequest) Key() int16               { return r.key }
func (r *MirrorTopicsRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *MirrorTopicsRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *MirrorTopicsRequest) ResponseKind() kmsg.Response {
	return &MirrorTopicsResponse{ErrResponse: ErrResponse{version: r.version, key: r.key}}
}

type MirrorTopicsResponse struct{ ErrResponse }

func (r *MirrorTopicsResponse) Key() int16 { return r.key }
func (r *MirrorTopicsResponse) RequestKind() kmsg.Request {
	return &MirrorTopicsRequest{version: r.version, key: r.key}
}

// --- 105 BumpLeaderEpochs ---

type BumpLeaderEpochsRequest struct {
	version
	Topics []BumpTopic
}

type BumpTopic struct {
	TopicID    uuid.UUID
	Partitions []BumpPartition
}

type BumpPartition struct {
	PartitionIndex int32
	MinLeaderEpoch int32 // request: the epoch becomes max(min+1, current)
	ErrorCode      int16 // response
	LeaderEpoch    int32 // response: the epoch now
}

func (r *BumpLeaderEpochsRequest) Key() int16               { return KeyBumpLeaderEpochs }
func (r *BumpLeaderEpochsRequest) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *BumpLeaderEpochsRequest) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *BumpLeaderEpochsRequest) ResponseKind() kmsg.Response {
	return &BumpLeaderEpochsResponse{version: r.version}
}

type BumpLeaderEpochsResponse struct {
	version
	ThrottleTimeMs int32
	Topics         []BumpTopic
}

func (r *BumpLeaderEpochsResponse) Key() int16               { return KeyBumpLeaderEpochs }
func (r *BumpLeaderEpochsResponse) AppendTo(b []byte) []byte { return encode(b, r) }
func (r *BumpLeaderEpochsResponse) ReadFrom(b []byte) error  { return decode(b, r) }
func (r *BumpLeaderEpochsResponse) RequestKind() kmsg.Request {
	return &BumpLeaderEpochsRequest{version: r.version}
}

// NewRequest returns an empty request for a mirror API key, nil for others.
func NewRequest(key int16) kmsg.Request {
	switch key {
	case KeyCreateMirror:
		return new(CreateMirrorRequest)
	case KeyAddTopicsToMirror:
		return new(AddTopicsToMirrorRequest)
	case KeyRemoveTopicsFromMirror:
		return new(RemoveTopicsFromMirrorRequest)
	case KeyLastMirroredOffsets:
		return new(LastMirroredOffsetsRequest)
	case KeyListMirrors:
		return new(ListMirrorsRequest)
	case KeyDescribeMirrors:
		return new(DescribeMirrorsRequest)
	case KeyReadMirrorStates:
		return new(ReadMirrorStatesRequest)
	case KeyWriteMirrorStates:
		return new(WriteMirrorStatesRequest)
	case KeyPauseMirrorTopics, KeyResumeMirrorTopics, KeyDeleteMirror:
		return &MirrorTopicsRequest{key: key}
	case KeyBumpLeaderEpochs:
		return new(BumpLeaderEpochsRequest)
	}
	return nil
}

// ClientVersions returns franz-go's stable request versions plus the mirror
// APIs: pass it with kgo.MaxVersions to a client that sends mirror
// requests (franz-go refuses keys it does not know otherwise).
func ClientVersions() *kversion.Versions {
	v := kversion.Stable()
	for k := KeyCreateMirror; k <= KeyBumpLeaderEpochs; k++ {
		v.SetMaxKeyVersion(k, 0)
	}
	return v
}

// The description of every mirror message: its fields in wire order, as
// codec.go codes them (tagged fields at the end of their struct).
var (
	// PartitionsTopic: each partition index is followed by its own
	// (empty) tagged fields, as the first Tandem release wrote them.
	partitionsTopics = structs("Topics", str("Name"),
		field{name: "Partitions", kind: kScalars, elemKind: kInt32, elemTags: true, tag: -1},
		tagged(0, uid("TopicID")))

	// StatePartition, in WriteMirrorStates requests; responses add the
	// error code (statePartitionErr).
	statePartition = []field{i32("PartitionIndex"), i64("LastMirroredOffset"), i8("State"),
		alwaysTagged(0, i32("LastMirrorEpoch"), -1), tagged(1, str("Reason")), alwaysTagged(2, uid("TopicID"), 0),
		alwaysTagged(3, i64("StopOffset"), -1), alwaysTagged(4, i32("StopEpoch"), -1), tagged(5, boolean("StopDone")),
		tagged(6, divergedEntries), tagged(7, i64("StopIndex")),
		tagged(8, str("CutSet")), defaultTagged(9, i64("CutAt"), -1), tagged(10, i64("CutTime")), tagged(11, i64("CutRecords")), tagged(12, i64("CutMs")), tagged(13, i64("CompleteAt"))}
	statePartitionErr = []field{i32("PartitionIndex"), i64("LastMirroredOffset"), i8("State"), i16("ErrorCode"),
		alwaysTagged(0, i32("LastMirrorEpoch"), -1), tagged(1, str("Reason")), alwaysTagged(2, uid("TopicID"), 0),
		alwaysTagged(3, i64("StopOffset"), -1), alwaysTagged(4, i32("StopEpoch"), -1), tagged(5, boolean("StopDone")),
		tagged(6, divergedEntries), tagged(7, i64("StopIndex")),
		tagged(8, str("CutSet")), defaultTagged(9, i64("CutAt"), -1), tagged(10, i64("CutTime")), tagged(11, i64("CutRecords")), tagged(12, i64("CutMs")), tagged(13, i64("CompleteAt"))}

	divergedRange = []field{str("Topic"), i32("Partition"), i64("FirstOffset"), i64("LastOffset"),
		i32("FirstEpoch"), i32("LastEpoch"), i64("Records"), i64("FirstTimestamp"), i64("LastTimestamp"),
		i64("TruncatedAt"), str("Cause"), i64("CopyStart"), i64("CopyEnd")}
	divergedEntries = structs("Diverged", append(slices.Clone(divergedRange), boolean("Done"))...)

	errResponse = []field{i32("ThrottleTimeMs"), i16("ErrorCode"), nstr("ErrorMessage")}

	shardMarks = func(name string) field { return structs(name, i32("Shard"), i64("Incarnation"), i64("Version")) }
)

var schemas = map[reflect.Type][]field{
	typeOf[CreateMirrorRequest](): {
		nstr("MirrorName"),
		structs("Configs", str("Name"), nstr("Value")),
	},
	typeOf[ErrResponse](): errResponse,
	typeOf[AddTopicsToMirrorRequest](): {
		structs("Topics", uid("TopicID"), str("TopicName"), nstr("MirrorName"), tagged(0, str("DestinationName"))),
		tagged(0, boolean("ValidateOnly")),
	},
	typeOf[TopicResponse](): {
		i32("ThrottleTimeMs"), uid("TopicID"), i16("ErrorCode"), nstr("ErrorMessage"),
		tagged(0, structs("Truncations", str("Topic"), i32("Partition"), i64("LogEnd"), i64("TruncateTo"), i32("LastMirrorEpoch"))),
		tagged(1, structs("Failover", str("Topic"), i32("Partition"), i64("SourceOffset"), i64("SourceOffsetTime"),
			i64("DestinationOffset"), i64("Lag"), i64("LagMs"), tagged(0, boolean("SourceStale")), tagged(1, boolean("AlreadyStopped")),
			tagged(2, i64("CutTime")), tagged(3, i64("CutRecords")), tagged(4, i64("CutMs")))),
	},
	typeOf[RemoveTopicsFromMirrorRequest](): {
		str("MirrorName"),
		structs("Topics", uid("TopicID"), str("TopicName")),
		tagged(0, i8("Mode")),
		tagged(1, i32("TimeoutMs")),
		tagged(2, boolean("Consistent")),
	},
	typeOf[LastMirroredOffsetsRequest](): {str("MirrorName"), partitionsTopics},
	typeOf[LastMirroredOffsetsResponse](): {
		i32("ThrottleTimeMs"), i16("ErrorCode"),
		structs("Topics", str("Name"), structs("Partitions", i32("PartitionIndex"), i64("LastMirroredOffset"), i16("ErrorCode"),
			alwaysTagged(0, i32("LastMirrorEpoch"), -1))),
	},
	typeOf[ListMirrorsRequest](): {},
	typeOf[ListMirrorsResponse](): {
		i32("ThrottleTimeMs"), i16("ErrorCode"),
		structs("Mirrors", str("MirrorName"), str("SourceBootstrap"), i32("TopicCount")),
	},
	typeOf[DescribeMirrorsRequest](): {strs("MirrorNames"), boolean("IncludeAuthorizedOperations"), tagged(0, boolean("Local"))},
	typeOf[DescribeMirrorsResponse](): {
		i32("ThrottleTimeMs"),
		structs("Mirrors", i16("ErrorCode"), str("MirrorName"),
			structs("Topics", str("TopicName"),
				structs("Partitions", i32("PartitionIndex"), i64("SourceOffset"), i64("DestinationOffset"), i64("Lag"), str("State"),
					tagged(0, str("Reason")), tagged(1, i64("LagMs")), tagged(2, i64("SourceOffsetTime")),
					tagged(3, boolean("SourceStale")), tagged(4, str("DestinationIssue"))),
				tagged(0, str("SourceTopicName"))),
			i32("AuthorizedOperations"),
			tagged(0, nstr("ErrorMessage")), tagged(1, str("State")), tagged(2, str("ACLSync")),
			tagged(3, structs("Diverged", str("Topic"), i32("Partition"), i64("FirstOffset"), i64("LastOffset"),
				i32("FirstEpoch"), i32("LastEpoch"), i64("Records"), i64("FirstTimestamp"), i64("LastTimestamp"),
				i64("TruncatedAt"), str("Cause"), i64("CopyStart"), i64("CopyEnd"), tagged(0, str("SourceTopic")))),
			tagged(4, str("SourceClusterID")), tagged(5, str("TopicPrefix"))),
	},
	typeOf[ReadMirrorStatesRequest](): {str("MirrorName"), partitionsTopics, boolean("NeedPartitionStates"),
		tagged(0, shardMarks("KnownShards"))},
	typeOf[ReadMirrorStatesResponse](): {
		i32("ThrottleTimeMs"), i16("ErrorCode"),
		structs("Topics", str("Name"), structs("Partitions", statePartitionErr...)),
		tagged(0, shardMarks("Shards")),
	},
	typeOf[WriteMirrorStatesRequest](): {
		str("MirrorName"),
		structs("TopicsUpdated", str("Name"), structs("Partitions", statePartition...)),
		strs("RemovedTopics"),
	},
	typeOf[WriteMirrorStatesResponse](): {
		i32("ThrottleTimeMs"), i16("ErrorCode"),
		structs("Topics", str("Name"), structs("Partitions", i32("PartitionIndex"), i16("ErrorCode"))),
	},
	typeOf[MirrorTopicsRequest](): {str("MirrorName"), strs("Topics")},
	typeOf[BumpLeaderEpochsRequest](): {
		structs("Topics", uid("TopicID"), structs("Partitions", i32("PartitionIndex"), i32("MinLeaderEpoch"))),
	},
	typeOf[BumpLeaderEpochsResponse](): {
		i32("ThrottleTimeMs"),
		structs("Topics", uid("TopicID"), structs("Partitions", i32("PartitionIndex"), i16("ErrorCode"), i32("LeaderEpoch"))),
	},
}

// typeOf is the type of a *T, the key of T's schema.
func typeOf[T any]() reflect.Type { return reflect.TypeFor[*T]() }
