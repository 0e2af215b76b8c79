package fetch

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
)

// A fetcher keeps a KIP-227 fetch session with its source broker, as
// Kafka's follower fetchers do: the first Fetch names every partition,
// each later one only those whose position moved (they got records) or
// that were added or forgotten, and the source answers only partitions
// with something new. Ten thousand idle partitions then cost a round
// nothing but the round itself, on both sides. The session is also where
// the fetcher keeps its partitions' positions: after an append it moves
// a partition's position itself, and asks the target for all of them
// again only when the target says they changed otherwise (Generation).

// partKey names a partition by topic ID (Fetch v13 on) and by name
// (before v13); the response uses one or the other.
type partKey struct {
	id        uuid.UUID
	partition int32
}

type nameKey struct {
	topic     string
	partition int32
}

// part is one partition of the session.
type part struct {
	Partition // where to fetch from next
	// sent is what the source holds for the partition in the session
	// (valid while inSession).
	sent      Partition
	sentMax   int32
	inSession bool
	dirty     bool // in session.dirty
}

// session is the fetcher's side of a fetch session.
type session struct {
	id int32
	// epoch is the SessionEpoch of the next request: 0 opens a session
	// (a full fetch), -1 fetches without one (a source before Fetch v7,
	// or one that declined), above 0 is incremental.
	epoch     int32
	byID      map[partKey]*part
	byName    map[nameKey]*part
	dirty     []*part
	forgotten []*part
}

func newSession() *session {
	return &session{byID: map[partKey]*part{}, byName: map[nameKey]*part{}}
}

func (s *session) len() int { return len(s.byID) }

// lookup finds the partition of an answer.
func (s *session) lookup(t *kmsg.FetchResponseTopic, p int32) *part {
	if t.TopicID != ([16]byte{}) {
		if pt := s.byID[partKey{uuid.UUID(t.TopicID), p}]; pt != nil {
			return pt
		}
	}
	return s.byName[nameKey{t.Topic, p}]
}

func (s *session) markDirty(pt *part) {
	if !pt.dirty {
		pt.dirty = true
		s.dirty = append(s.dirty, pt)
	}
}

// set replaces the session's partitions with want, keeping what the
// source already holds of those that stay.
func (s *session) set(want []Partition) {
	keep := make(map[partKey]bool, len(want))
	for _, p := range want {
		k := partKey{p.TopicID, p.Partition}
		keep[k] = true
		pt := s.byID[k]
		if pt == nil {
			pt = &part{}
			s.byID[k] = pt
			s.byName[nameKey{p.Topic, p.Partition}] = pt
		}
		pt.Partition = p
		if !pt.inSession || pt.sent != p {
			s.markDirty(pt)
		}
	}
	for k, pt := range s.byID {
		if keep[k] {
			continue
		}
		delete(s.byID, k)
		delete(s.byName, nameKey{pt.Topic, pt.Partition.Partition})
		if pt.inSession {
			s.forgotten = append(s.forgotten, pt)
		}
	}
	// A partition that left and came back is not forgotten.
	n := 0
	for _, pt := range s.forgotten {
		if s.byID[partKey{pt.TopicID, pt.Partition.Partition}] == nil {
			s.forgotten[n] = pt
			n++
		}
	}
	s.forgotten = s.forgotten[:n]
}

// moved records a partition's new position after an append.
func (s *session) moved(pt *part, next int64, epoch int32) {
	pt.FetchOffset, pt.LastFetchedEpoch = next, epoch
	s.markDirty(pt)
}

// reset forgets the source's side: the next request opens a new session
// naming every partition.
func (s *session) reset() {
	s.id, s.epoch = 0, 0
	s.dirty, s.forgotten = s.dirty[:0], nil
	for _, pt := range s.byID {
		pt.inSession, pt.dirty = false, false
		s.markDirty(pt)
	}
}

// request builds the next Fetch at version v: every partition for a full
// fetch, the dirty and forgotten ones for an incremental one. What it
// names counts as sent.
func (s *session) request(v int16, partitionMax int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(v)
	req.ReplicaID = -1
	if v < 7 {
		s.epoch = -1
	}
	req.SessionID, req.SessionEpoch = s.id, s.epoch
	if s.epoch <= 0 {
		req.SessionID = 0
		s.dirty = s.dirty[:0]
		for _, pt := range s.byID {
			pt.dirty = false
			s.dirty = append(s.dirty, pt)
		}
		s.forgotten = nil
	}
	topics := map[partKey]int{} // topic (partition 0) → index in req.Topics
	for _, pt := range s.dirty {
		k := partKey{pt.TopicID, 0}
		i, ok := topics[k]
		if !ok || v < 13 && req.Topics[i].Topic != pt.Topic {
			i = len(req.Topics)
			topics[k] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = pt.Topic, pt.TopicID
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch = pt.Partition.Partition, pt.LeaderEpoch
		rp.FetchOffset, rp.LastFetchedEpoch = pt.FetchOffset, pt.LastFetchedEpoch
		rp.PartitionMaxBytes = partitionMax
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		pt.sent, pt.sentMax, pt.inSession, pt.dirty = pt.Partition, partitionMax, true, false
	}
	s.dirty = s.dirty[:0]
	for _, pt := range s.forgotten {
		ft := kmsg.NewFetchRequestForgottenTopic()
		ft.Topic, ft.TopicID, ft.Partitions = pt.Topic, pt.TopicID, []int32{pt.Partition.Partition}
		req.ForgottenTopics = append(req.ForgottenTopics, ft)
	}
	s.forgotten = nil
	return req
}

// answered moves the session on after an answer to a request sent at
// epoch sentEpoch; it reports whether the answer's partitions may be
// used (false: the session was lost, and the next request is full).
func (s *session) answered(sentEpoch int32, resp *kmsg.FetchResponse) bool {
	switch resp.ErrorCode {
	case 0:
	case kerr.FetchSessionIDNotFound.Code, kerr.InvalidFetchSessionEpoch.Code, kerr.FetchSessionTopicIDError.Code:
		s.reset()
		return false
	default:
		s.reset()
		return true // the caller reports the error
	}
	switch {
	case sentEpoch < 0:
	case sentEpoch == 0 && resp.SessionID != 0:
		s.id, s.epoch = resp.SessionID, 1
	case sentEpoch == 0: // the source keeps no session for us: full fetches
	default:
		s.epoch++
		if s.epoch <= 0 {
			s.epoch = 1 // epochs wrap to 1: 0 and -1 mean something else
		}
	}
	return true
}
