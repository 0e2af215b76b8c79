package groups

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/tandem-kafka/tandem/uuid"
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
	e := enc{}
	e.i16(k.typ)
	e.keyStr(k.group)
	if hasSub(k.typ) {
		e.keyStr(k.sub)
	}
	return e.b
}

func decodeModernKey(b []byte) (modernKey, error) {
	d := newDec(b)
	k := modernKey{typ: d.i16(), group: d.keyStr()}
	if hasSub(k.typ) {
		k.sub = d.keyStr()
	}
	return k, d.done(fmt.Sprintf("record key of type %d", k.typ))
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

func (e *enc) assignment(a assignment) {
	ids := a.topicIDs()
	e.arr(len(ids))
	for _, id := range ids {
		e.uuid(id)
		e.int32s(a[id])
		e.noTags()
	}
}

func (d *dec) assignment() assignment {
	n := d.arr()
	a := make(assignment, n)
	for range n {
		id := uuid.UUID(d.uuid())
		ps := d.int32s()
		d.skipTags()
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
	e := enc{}
	e.i16(0)
	e.i32(v.epoch)
	if consumer {
		e.taggedI64(taggedField{0, v.metadataHash, 0}, taggedField{1, v.createdMs, -1})
	} else {
		e.noTags()
	}
	return e.b
}

func decodeGroupMeta(b []byte) (groupMetaValue, error) {
	d := newDec(b)
	d.i16()
	v := groupMetaValue{epoch: d.i32(), createdMs: -1}
	d.tags(func(tag uint32, b []byte) {
		switch tag {
		case 0:
			v.metadataHash = tagI64(b)
		case 1:
			v.createdMs = tagI64(b)
		}
	})
	return v, d.done("group metadata value")
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
	e := enc{}
	e.i16(0)
	if consumer {
		e.nstr(v.instanceID)
	}
	e.nstr(v.rackID)
	e.str(v.clientID)
	e.str(v.clientHost)
	e.strs(v.topics)
	if consumer {
		e.nstr(v.regex)
		e.i32(v.rebalanceTimeoutMs)
		e.nstr(v.assignor)
	}
	e.noTags() // no ClassicMemberMetadata: Tandem's consumer groups have no classic members
	return e.b
}

func decodeMember(b []byte, consumer bool) (memberValue, error) {
	d := newDec(b)
	d.i16()
	var v memberValue
	if consumer {
		v.instanceID = d.nstr()
	}
	v.rackID = d.nstr()
	v.clientID, v.clientHost = d.str(), d.str()
	v.topics = d.strs()
	if consumer {
		v.regex = d.nstr()
		v.rebalanceTimeoutMs = d.i32()
		v.assignor = d.nstr()
	}
	d.skipTags()
	return v, d.done("member metadata value")
}

// epochValue is the target assignment metadata value (assignment epoch).
func epochValue(epoch int32) []byte {
	e := enc{}
	e.i16(0)
	e.i32(epoch)
	e.noTags()
	return e.b
}

func decodeEpochValue(b []byte) (int32, error) {
	d := newDec(b)
	d.i16()
	v := d.i32()
	d.skipTags()
	return v, d.done("assignment epoch value")
}

// targetValue is a member's target assignment.
func targetValue(a assignment) []byte {
	e := enc{}
	e.i16(0)
	e.assignment(a)
	e.noTags()
	return e.b
}

func decodeTarget(b []byte) (assignment, error) {
	d := newDec(b)
	d.i16()
	a := d.assignment()
	d.skipTags()
	return a, d.done("target assignment value")
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
	e := enc{}
	e.i16(0)
	e.i32(v.epoch)
	e.i32(v.prevEpoch)
	e.i8(v.state)
	e.assignment(v.assigned)
	if consumer {
		e.assignment(v.revoking)
	}
	e.noTags()
	return e.b
}

func decodeCurrent(b []byte, consumer bool) (currentValue, error) {
	d := newDec(b)
	d.i16()
	v := currentValue{epoch: d.i32(), prevEpoch: d.i32(), state: d.i8(), assigned: d.assignment()}
	if consumer {
		v.revoking = d.assignment()
	}
	d.skipTags()
	return v, d.done("current assignment value")
}

// regexValue is ConsumerGroupRegularExpressionValue.
type regexValue struct {
	topics      []string
	version     int64 // the metadata image index the regex was resolved at
	timestampMs int64
}

func (v regexValue) encode() []byte {
	e := enc{}
	e.i16(0)
	e.strs(v.topics)
	e.i64(v.version)
	e.i64(v.timestampMs)
	e.noTags()
	return e.b
}

func decodeRegex(b []byte) (regexValue, error) {
	d := newDec(b)
	d.i16()
	v := regexValue{topics: d.strs(), version: d.i64(), timestampMs: d.i64()}
	d.skipTags()
	return v, d.done("regular expression value")
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
	e := enc{}
	e.i16(0)
	ids := sortedIDs(initialized)
	e.arr(len(ids))
	for _, id := range ids {
		e.uuid(id)
		e.str(initialized[id].name)
		e.int32s(initialized[id].partitions)
		e.noTags()
	}
	ids = sortedIDs(deleting)
	e.arr(len(ids))
	for _, id := range ids {
		e.uuid(id)
		e.str(deleting[id].name)
		e.noTags()
	}
	e.noTags()
	return e.b
}

func sortedIDs[V any](m map[uuid.UUID]V) []uuid.UUID {
	ids := slices.Collect(maps.Keys(m))
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return slices.Compare(x[:], y[:]) })
	return ids
}

func decodeStatePartitions(b []byte) (initialized, deleting map[uuid.UUID]initTopic, err error) {
	d := newDec(b)
	d.i16()
	initialized, deleting = map[uuid.UUID]initTopic{}, map[uuid.UUID]initTopic{}
	for range d.arr() {
		id := uuid.UUID(d.uuid())
		t := initTopic{name: d.str(), partitions: d.int32s()}
		d.skipTags()
		slices.Sort(t.partitions)
		initialized[id] = t
	}
	for range d.arr() {
		id := uuid.UUID(d.uuid())
		deleting[id] = initTopic{name: d.str()}
		d.skipTags()
	}
	d.skipTags()
	return initialized, deleting, d.done("share group state partition metadata value")
}
