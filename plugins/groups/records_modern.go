package groups

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
)

// Records of KIP-848 consumer groups and KIP-932 share groups in
// __consumer_offsets, in Apache Kafka's formats (the record type is the
// key's leading int16, Kafka's "apiKey" of the coordinator record):
//
//	3  ConsumerGroupMetadata (group) → epoch, metadata hash (tag 0), creation time (tag 1)
//	5  ConsumerGroupMemberMetadata (group, member) → subscription, client, rack
//	6  ConsumerGroupTargetAssignmentMetadata (group) → assignment epoch
//	7  ConsumerGroupTargetAssignmentMember (group, member) → target partitions
//	8  ConsumerGroupCurrentMemberAssignment (group, member) → epochs, state, partitions
//	16 ConsumerGroupRegularExpression (group, regex) → resolved topics
//	10 ShareGroupMemberMetadata, 11 ShareGroupMetadata,
//	12 ShareGroupTargetAssignmentMetadata, 13 ShareGroupTargetAssignmentMember,
//	14 ShareGroupCurrentMemberAssignment, 15 ShareGroupStatePartitionMetadata
//
// Types 4 and 9 (the partition metadata Kafka stopped writing in 4.1) are
// read and ignored.
const (
	recConsumerMetadata     int16 = 3
	recConsumerPartitions   int16 = 4
	recConsumerMember       int16 = 5
	recConsumerTargetMeta   int16 = 6
	recConsumerTargetMember int16 = 7
	recConsumerCurrent      int16 = 8
	recSharePartitions      int16 = 9
	recShareMember          int16 = 10
	recShareMetadata        int16 = 11
	recShareTargetMeta      int16 = 12
	recShareTargetMember    int16 = 13
	recShareCurrent         int16 = 14
	recShareStatePartitions int16 = 15
	recConsumerRegex        int16 = 16
)

// modernKey is the key of a modern group record: the group, and the
// member id or regular expression of the per-member and regex records.
type modernKey struct {
	typ   int16
	group string
	sub   string
}

// hasSub says whether records of type typ carry a second key field.
func hasSub(typ int16) bool {
	switch typ {
	case recConsumerMember, recConsumerTargetMember, recConsumerCurrent, recConsumerRegex,
		recShareMember, recShareTargetMember, recShareCurrent:
		return true
	}
	return false
}

func (k modernKey) encode() []byte {
	e := coord.Enc{}
	e.I16(k.typ)
	e.KeyStr(k.group)
	if hasSub(k.typ) {
		e.KeyStr(k.sub)
	}
	return e.B
}

func decodeModernKey(b []byte) (modernKey, error) {
	d := coord.NewDec(b)
	k := modernKey{typ: d.I16(), group: d.KeyStr()}
	if hasSub(k.typ) {
		k.sub = d.KeyStr()
	}
	return k, d.Done(fmt.Sprintf("record key of type %d", k.typ))
}

// isModernKey says whether a key of __consumer_offsets is a modern
// group record.
func isModernKey(key []byte) bool {
	if len(key) < 2 {
		return false
	}
	switch int16(binary.BigEndian.Uint16(key)) {
	case recConsumerMetadata, recConsumerPartitions, recConsumerMember, recConsumerTargetMeta,
		recConsumerTargetMember, recConsumerCurrent, recConsumerRegex, recSharePartitions,
		recShareMember, recShareMetadata, recShareTargetMeta, recShareTargetMember,
		recShareCurrent, recShareStatePartitions:
		return true
	}
	return false
}

// assignment maps topic IDs to sorted partitions.
type assignment map[uuid.UUID][]int32

func (a assignment) clone() assignment {
	c := make(assignment, len(a))
	for t, ps := range a {
		c[t] = slices.Clone(ps)
	}
	return c
}

func (a assignment) equal(b assignment) bool {
	return maps.EqualFunc(a, b, slices.Equal[[]int32])
}

func (a assignment) count() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

func (a assignment) has(t uuid.UUID, p int32) bool {
	_, ok := slices.BinarySearch(a[t], p)
	return ok
}

// add inserts a partition, keeping the list sorted.
func (a assignment) add(t uuid.UUID, p int32) {
	ps := a[t]
	if i, ok := slices.BinarySearch(ps, p); !ok {
		a[t] = slices.Insert(ps, i, p)
	}
}

func (a assignment) topicIDs() []uuid.UUID { return sortedIDs(a) }

func encAssignment(e *coord.Enc, a assignment) {
	ids := a.topicIDs()
	e.Arr(len(ids))
	for _, id := range ids {
		e.Uuid(id)
		e.Int32s(a[id])
		e.NoTags()
	}
}

func decAssignment(d *coord.Dec) assignment {
	n := d.Arr()
	a := make(assignment, n)
	for range n {
		id := uuid.UUID(d.Uuid())
		ps := d.Int32s()
		d.SkipTags()
		slices.Sort(ps)
		a[id] = slices.Compact(ps)
	}
	return a
}

// groupMetaValue is ConsumerGroupMetadataValue and ShareGroupMetadataValue.
type groupMetaValue struct {
	epoch        int32
	metadataHash int64 // tag 0 (consumer groups)
	createdMs    int64 // tag 1 (consumer groups), -1: unknown
}

func (v groupMetaValue) encode(consumer bool) []byte {
	e := coord.Enc{}
	e.I16(0)
	e.I32(v.epoch)
	if consumer {
		e.TaggedI64(coord.TaggedI64{Tag: 0, V: v.metadataHash, Def: 0}, coord.TaggedI64{Tag: 1, V: v.createdMs, Def: -1})
	} else {
		e.NoTags()
	}
	return e.B
}

func decodeGroupMeta(b []byte) (groupMetaValue, error) {
	d := coord.NewDec(b)
	d.I16()
	v := groupMetaValue{epoch: d.I32(), createdMs: -1}
	d.Tags(func(tag uint32, b []byte) {
		switch tag {
		case 0:
			v.metadataHash = coord.TagI64(b)
		case 1:
			v.createdMs = coord.TagI64(b)
		}
	})
	return v, d.Done("group metadata value")
}

// memberValue is ConsumerGroupMemberMetadataValue (and, with only rack,
// client and topics, ShareGroupMemberMetadataValue).
type memberValue struct {
	instanceID, rackID   *string
	clientID, clientHost string
	topics               []string
	regex                *string
	rebalanceTimeoutMs   int32
	assignor             *string
}

func (v memberValue) encode(consumer bool) []byte {
	e := coord.Enc{}
	e.I16(0)
	if consumer {
		e.Nstr(v.instanceID)
	}
	e.Nstr(v.rackID)
	e.Str(v.clientID)
	e.Str(v.clientHost)
	e.Strs(v.topics)
	if consumer {
		e.Nstr(v.regex)
		e.I32(v.rebalanceTimeoutMs)
		e.Nstr(v.assignor)
	}
	e.NoTags() // no ClassicMemberMetadata: Tandem's consumer groups have no classic members
	return e.B
}

func decodeMember(b []byte, consumer bool) (memberValue, error) {
	d := coord.NewDec(b)
	d.I16()
	var v memberValue
	if consumer {
		v.instanceID = d.Nstr()
	}
	v.rackID = d.Nstr()
	v.clientID, v.clientHost = d.Str(), d.Str()
	v.topics = d.Strs()
	if consumer {
		v.regex = d.Nstr()
		v.rebalanceTimeoutMs = d.I32()
		v.assignor = d.Nstr()
	}
	d.SkipTags()
	return v, d.Done("member metadata value")
}

// epochValue is the target assignment metadata value (assignment epoch).
func epochValue(epoch int32) []byte {
	e := coord.Enc{}
	e.I16(0)
	e.I32(epoch)
	e.NoTags()
	return e.B
}

func decodeEpochValue(b []byte) (int32, error) {
	d := coord.NewDec(b)
	d.I16()
	v := d.I32()
	d.SkipTags()
	return v, d.Done("assignment epoch value")
}

// targetValue is a member's target assignment.
func targetValue(a assignment) []byte {
	e := coord.Enc{}
	e.I16(0)
	encAssignment(&e, a)
	e.NoTags()
	return e.B
}

func decodeTarget(b []byte) (assignment, error) {
	d := coord.NewDec(b)
	d.I16()
	a := decAssignment(d)
	d.SkipTags()
	return a, d.Done("target assignment value")
}

// currentValue is ConsumerGroupCurrentMemberAssignmentValue (share
// groups have no partitions pending revocation).
type currentValue struct {
	epoch, prevEpoch int32
	state            int8
	assigned         assignment
	revoking         assignment
}

func (v currentValue) encode(consumer bool) []byte {
	e := coord.Enc{}
	e.I16(0)
	e.I32(v.epoch)
	e.I32(v.prevEpoch)
	e.I8(v.state)
	encAssignment(&e, v.assigned)
	if consumer {
		encAssignment(&e, v.revoking)
	}
	e.NoTags()
	return e.B
}

func decodeCurrent(b []byte, consumer bool) (currentValue, error) {
	d := coord.NewDec(b)
	d.I16()
	v := currentValue{epoch: d.I32(), prevEpoch: d.I32(), state: d.I8(), assigned: decAssignment(d)}
	if consumer {
		v.revoking = decAssignment(d)
	}
	d.SkipTags()
	return v, d.Done("current assignment value")
}

// regexValue is ConsumerGroupRegularExpressionValue.
type regexValue struct {
	topics      []string
	version     int64 // the metadata image index the regex was resolved at
	timestampMs int64
}

func (v regexValue) encode() []byte {
	e := coord.Enc{}
	e.I16(0)
	e.Strs(v.topics)
	e.I64(v.version)
	e.I64(v.timestampMs)
	e.NoTags()
	return e.B
}

func decodeRegex(b []byte) (regexValue, error) {
	d := coord.NewDec(b)
	d.I16()
	v := regexValue{topics: d.Strs(), version: d.I64(), timestampMs: d.I64()}
	d.SkipTags()
	return v, d.Done("regular expression value")
}

// initTopic is a topic of ShareGroupStatePartitionMetadataValue.
type initTopic struct {
	name       string
	partitions []int32 // sorted; nil in DeletingTopics
}

// statePartitionsValue is ShareGroupStatePartitionMetadataValue: the
// partitions whose share-group state was initialized, and the topics
// whose state is being deleted.
func statePartitionsValue(initialized, deleting map[uuid.UUID]initTopic) []byte {
	e := coord.Enc{}
	e.I16(0)
	ids := sortedIDs(initialized)
	e.Arr(len(ids))
	for _, id := range ids {
		e.Uuid(id)
		e.Str(initialized[id].name)
		e.Int32s(initialized[id].partitions)
		e.NoTags()
	}
	ids = sortedIDs(deleting)
	e.Arr(len(ids))
	for _, id := range ids {
		e.Uuid(id)
		e.Str(deleting[id].name)
		e.NoTags()
	}
	e.NoTags()
	return e.B
}

func sortedIDs[V any](m map[uuid.UUID]V) []uuid.UUID {
	ids := slices.Collect(maps.Keys(m))
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return slices.Compare(x[:], y[:]) })
	return ids
}

func decodeStatePartitions(b []byte) (initialized, deleting map[uuid.UUID]initTopic, err error) {
	d := coord.NewDec(b)
	d.I16()
	initialized, deleting = map[uuid.UUID]initTopic{}, map[uuid.UUID]initTopic{}
	for range d.Arr() {
		id := uuid.UUID(d.Uuid())
		t := initTopic{name: d.Str(), partitions: d.Int32s()}
		d.SkipTags()
		slices.Sort(t.partitions)
		initialized[id] = t
	}
	for range d.Arr() {
		id := uuid.UUID(d.Uuid())
		deleting[id] = initTopic{name: d.Str()}
		d.SkipTags()
	}
	d.SkipTags()
	return initialized, deleting, d.Done("share group state partition metadata value")
}
