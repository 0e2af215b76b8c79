package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/wake"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/fetchwire"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/replication"
)

// fetchSessionSlots is max.incremental.fetch.session.cache.slots.
const fetchSessionSlots = 1000

// fetchKey names a partition in a fetch: by topic name before Fetch v13,
// by topic ID from v13 on.
type fetchKey struct {
	topic     string
	id        [16]byte
	partition int32
}

// fetchPart is one partition of one fetch: what was asked, and the answer.
type fetchPart struct {
	key   fetchKey
	req   kmsg.FetchRequestTopicPartition
	topic *metadata.Topic // nil: unknown topic
	// denied: the client may not READ the topic (or, claiming to be a
	// replica, lacks CLUSTER_ACTION).
	denied bool
	out    kmsg.FetchResponseTopicPartition
	// recs are the engine's record batches for out, written to the socket
	// from their files (see fetchwire.Response); whoever drops them closes them.
	recs   *engine.Records
	nbytes int
	// ep is the engine's partition as last looked up (fetchedPartition).
	ep *engine.Partition
	// replicaSeen: this request's fetch offset was recorded as the
	// follower's log end (once per request, not per long-poll read).
	replicaSeen bool
	// sent is the state last sent to a session's client, for deciding
	// whether an incremental response must include the partition.
	sentHWM, sentLSO, sentLogStart int64
	sentOnce                       bool
}

// fetcher serves Fetch: what a fetch takes of the broker.
type fetcher struct {
	nodeID   int32
	sessions *fetchSessions
	applied  *appliedState
	m        *brokerMetrics
	engine   *engine.Engine       // set by the broker's Start
	repl     *replication.Manager // set by the broker's Start
}

func (f *fetcher) handleFetch(ctx context.Context, rc *RequestContext, req *kmsg.FetchRequest) (kmsg.Response, error) {
	resp := &fetchwire.Response{FetchResponse: req.ResponseKind().(*kmsg.FetchResponse)}
	img := f.applied.get()
	requested := fetchRequested(req)

	// KIP-227 fetch sessions: decide which partitions this fetch covers.
	sess, parts, incremental, code := f.sessions.forFetch(req, requested)
	if code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	if sess != nil {
		defer sess.mu.Unlock()
		resp.SessionID = sess.id
	}
	authorizeFetch(img, rc, req, parts)

	iso := engine.ReadUncommitted
	if req.IsolationLevel == 1 {
		iso = engine.ReadCommitted
	}
	replica := replicaFetch{id: req.ReplicaID, epoch: -1}
	if req.Version >= 15 {
		replica = replicaFetch{id: req.ReplicaState.ID, epoch: req.ReplicaState.Epoch}
	}
	for _, fp := range parts {
		fp.replicaSeen = false
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = int(^uint32(0) >> 1)
	}
	if !f.longPoll(ctx, req, parts, maxBytes, iso, replica) {
		return nil, nil // the client is gone or the broker is closing: no one to answer
	}
	got := fetchAnswer(resp, parts, incremental)
	if sess != nil {
		sess.rotate(got)
	}
	return resp, nil
}

// fetchRequested is the partitions a Fetch names, in its order, keyed by
// topic ID from v13 and by name before.
func fetchRequested(req *kmsg.FetchRequest) []*fetchPart {
	var requested []*fetchPart
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			k := fetchKey{partition: rp.Partition}
			if req.Version >= 13 {
				k.id = rt.TopicID
			} else {
				k.topic = rt.Topic
			}
			requested = append(requested, &fetchPart{key: k, req: rp})
		}
	}
	return requested
}

// forFetch is the KIP-227 step of a fetch: the session it uses (locked,
// nil for a sessionless fetch), the partitions it covers (requested, or
// the session's for an incremental fetch) and whether it is incremental;
// or the error code for the request. A full fetch with a session ID closes
// that session.
func (f *fetchSessions) forFetch(req *kmsg.FetchRequest, requested []*fetchPart) (sess *fetchSession, parts []*fetchPart, incremental bool, code int16) {
	if req.Version < 7 {
		return nil, requested, false, 0
	}
	switch {
	case req.SessionEpoch == -1: // sessionless full fetch; closes a session
		if req.SessionID != 0 {
			f.remove(req.SessionID)
		}
	case req.SessionEpoch == 0: // new session
		if req.SessionID != 0 {
			f.remove(req.SessionID)
		}
		sess = f.create(requested)
	default:
		sess, code = f.get(req.SessionID, req.SessionEpoch)
		if code != 0 {
			return nil, nil, false, code
		}
		sess.update(requested, req.ForgottenTopics, req.Version >= 13)
		return sess, sess.parts, true, 0
	}
	return sess, requested, false, 0
}

// authorizeFetch looks up each partition's topic in img and marks those
// the request may not read. A fetch with a replica id is a follower's:
// clients may not pose as one (CVE-2018-1288), so it needs CLUSTER_ACTION
// on the cluster, and only that, as in Kafka: a broker's principal needs
// no READ on every topic.
func authorizeFetch(img *metadata.Image, rc *RequestContext, req *kmsg.FetchRequest, parts []*fetchPart) {
	v13 := req.Version >= 13
	fromReplica := req.ReplicaID >= 0 || req.Version >= 15 && req.ReplicaState.ID >= 0
	replicaDenied := fromReplica && !rc.Allowed(kmsg.ACLOperationClusterAction, kmsg.ACLResourceTypeCluster, clusterName)
	for _, fp := range parts {
		if v13 {
			fp.topic = img.TopicsByID[fp.key.id]
		} else {
			fp.topic = img.Topics[fp.key.topic]
		}
		name := fp.key.topic
		if fp.topic != nil {
			name = fp.topic.Name
		}
		fp.denied = replicaDenied || !fromReplica && (fp.topic != nil || !v13) && !rc.Allowed(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, name)
	}
}

// longPoll reads parts, and while there is less than MinBytes and time
// left, waits for any of the partitions' high watermarks to move, then
// reads again. It returns false if ctx ended first, having closed what
// was read.
func (f *fetcher) longPoll(ctx context.Context, req *kmsg.FetchRequest, parts []*fetchPart, maxBytes int, iso engine.Isolation, replica replicaFetch) bool {
	var deadline <-chan time.Time
	if req.MaxWaitMillis > 0 {
		t := time.NewTimer(time.Duration(req.MaxWaitMillis) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	for {
		// One waiter for every partition read: woken by the first of
		// them to move, and by the fetch itself once it stops waiting,
		// so that the partitions it watched drop it.
		w := wake.NewWaiter()
		total, done, watched := f.readParts(parts, maxBytes, iso, replica, req.Version, w)
		if done || total >= int(req.MinBytes) || deadline == nil || !watched {
			w.Wake()
			return true
		}
		select {
		case <-w.C():
		case <-deadline:
			deadline = nil // one last read below
		case <-ctx.Done():
			w.Wake()
			for _, fp := range parts {
				fp.recs.Close()
				fp.recs = nil
			}
			return false
		}
		w.Wake()
	}
}

// fetchAnswer builds the response: every partition for a full fetch, only
// those with something new for an incremental one (KIP-227). It returns
// the partitions that have records in it.
func fetchAnswer(resp *fetchwire.Response, parts []*fetchPart, incremental bool) (got []*fetchPart) {
	for _, fp := range parts {
		o := &fp.out
		changed := !incremental || !fp.sentOnce || o.ErrorCode != 0 || fp.nbytes > 0 ||
			o.HighWatermark != fp.sentHWM || o.LastStableOffset != fp.sentLSO || o.LogStartOffset != fp.sentLogStart ||
			o.DivergingEpoch.Epoch != -1
		if !changed {
			continue
		}
		fp.sentHWM, fp.sentLSO, fp.sentLogStart, fp.sentOnce = o.HighWatermark, o.LastStableOffset, o.LogStartOffset, true
		if fp.nbytes > 0 {
			got = append(got, fp)
		}
		n := len(resp.Topics)
		if n == 0 || resp.Topics[n-1].Topic != fp.key.topic || resp.Topics[n-1].TopicID != fp.key.id {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = fp.key.topic, fp.key.id
			resp.Topics = append(resp.Topics, rt)
			resp.Records = append(resp.Records, nil)
			n++
		}
		resp.Topics[n-1].Partitions = append(resp.Topics[n-1].Partitions, *o)
		resp.Records[n-1] = append(resp.Records[n-1], fp.recs)
		fp.recs = nil // the response owns them; the session must not pin them
	}
	return got
}

// replicaFetch is who sends a Fetch: a broker (id >= 0, with its broker
// epoch from Fetch v15) or a consumer (-1).
type replicaFetch struct {
	id    int32
	epoch int64
}

// readParts reads every partition once into its out field. total is the
// bytes read; done is true when the fetch must be answered now (an error or
// a diverging epoch); each partition read wakes w when its high watermark
// moves (a follower's: its log end), and watched says there was one.
func (f *fetcher) readParts(parts []*fetchPart, maxBytes int, iso engine.Isolation, replica replicaFetch, version int16, w *wake.Waiter) (total int, done bool, watched bool) {
	rd := partReader{f: f, iso: iso, replica: replica, version: version, w: w}
	if replica.id >= 0 {
		rd.leaderRate = f.repl.LeaderThrottleRate() // leader.replication.throttled.rate, 0: unlimited
	}
	for _, fp := range parts {
		o := &fp.out
		*o = kmsg.NewFetchResponseTopicPartition()
		o.Partition = fp.key.partition
		o.HighWatermark = -1
		fp.recs.Close() // from an earlier read of this fetch
		fp.recs, fp.nbytes = nil, 0
		n, stop, read := rd.read(fp, maxBytes-total, total == 0)
		if o.ErrorCode != 0 {
			f.m.fetchErrors.Inc()
		}
		total, done, watched = total+n, done || stop, watched || read
	}
	return total, done, watched
}

// partReader reads one partition of a fetch (readParts).
type partReader struct {
	f          *fetcher
	iso        engine.Isolation
	replica    replicaFetch
	version    int16
	w          *wake.Waiter
	leaderRate int64
}

// read reads fp into fp.out and fp.recs with at most left bytes (first:
// nothing was read before it, so a first batch larger than left passes,
// KIP-74). n is the bytes read, done says the fetch must be answered
// now, watched that the partition will wake the fetch's waiter.
func (rd *partReader) read(fp *fetchPart, left int, first bool) (n int, done, watched bool) {
	f, o := rd.f, &fp.out
	fail := func(err *kerr.Error) (int, bool, bool) {
		o.ErrorCode = err.Code
		return 0, true, watched
	}
	if fp.denied {
		return fail(kerr.TopicAuthorizationFailed)
	}
	if fp.topic == nil {
		if rd.version >= 13 {
			return fail(kerr.UnknownTopicID)
		}
		return fail(kerr.UnknownTopicOrPartition)
	}
	ep, part, kerrErr := f.fetchedPartition(fp)
	if kerrErr != nil {
		o.CurrentLeader.LeaderID, o.CurrentLeader.LeaderEpoch = part.Leader, part.LeaderEpoch
		return fail(kerrErr)
	}
	// KIP-320: a fetcher with an older epoch is fenced; a newer one
	// means our metadata is behind.
	if e := fp.req.CurrentLeaderEpoch; e != -1 && e != part.LeaderEpoch {
		o.CurrentLeader.LeaderID, o.CurrentLeader.LeaderEpoch = part.Leader, part.LeaderEpoch
		if e < part.LeaderEpoch {
			return fail(kerr.FencedLeaderEpoch)
		}
		return fail(kerr.UnknownLeaderEpoch)
	}
	var seq int64
	if rd.replica.id >= 0 {
		if err := f.repl.CheckReplica(fp.topic.ID, fp.key.partition, rd.replica.id, rd.replica.epoch, *part); err != nil {
			return fail(err)
		}
		// Stamped before the read, which sees every truncation
		// that happened before the stamp.
		seq = f.repl.StampFetch()
		ep.Watch(rd.w, true) // followers wait for new data, not for the hwm
	} else {
		ep.Watch(rd.w, false) // before reading: no missed wakeup
	}
	watched = true
	offs := ep.Offsets()
	o.HighWatermark, o.LastStableOffset, o.LogStartOffset = offs.HighWatermark, offs.LastStable, offs.LogStart
	if fp.req.LastFetchedEpoch >= 0 && rd.version >= 12 {
		// The fetcher's log may have diverged from ours: tell it
		// where its last epoch ends here so it truncates.
		epoch, end := ep.EndOffsetForEpoch(fp.req.LastFetchedEpoch)
		if epoch < fp.req.LastFetchedEpoch || end < fp.req.FetchOffset {
			o.DivergingEpoch.Epoch, o.DivergingEpoch.EndOffset = epoch, end
			return 0, true, watched
		}
	}
	if rd.replica.id >= 0 && fp.req.FetchOffset <= offs.LogEnd && !fp.replicaSeen {
		// The follower's log matched ours up to its fetch offset:
		// recorded once per request (a fetch answered with a
		// diverging epoch or out of range is not).
		fp.replicaSeen = true
		f.repl.Fetched(fp.topic.ID, fp.key.partition, rd.replica.id, fp.req.FetchOffset, seq)
	}
	limit := min(int(fp.req.PartitionMaxBytes), left)
	if limit <= 0 {
		return 0, false, watched // the response is full; report positions only
	}
	if rd.replica.id < 0 && fp.req.FetchOffset == visibleEnd(offs, rd.iso) {
		// A consumer at the end of what it may read: nothing to read
		// (the common case of a session's idle partitions).
		if rd.iso == engine.ReadCommitted {
			o.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
		}
		return 0, false, watched
	}
	n, stop := rd.records(fp, ep, *part, limit, first)
	return n, stop, watched
}

// visibleEnd is where a consumer at isolation iso stops reading.
func visibleEnd(offs engine.Offsets, iso engine.Isolation) int64 {
	if iso == engine.ReadCommitted {
		return offs.LastStable
	}
	return offs.HighWatermark
}

// records reads fp's records (at most limit bytes, more only for a
// first batch) into fp.recs.
func (rd *partReader) records(fp *fetchPart, ep *engine.Partition, part metadata.Partition, limit int, first bool) (n int, done bool) {
	f, o := rd.f, &fp.out
	throttled := rd.leaderRate > 0 && replication.LeaderThrottled(fp.topic, fp.key.partition, rd.replica.id, part)
	if throttled {
		// Kafka's leader throttle: over the quota, a throttled
		// follower out of the ISR gets positions only.
		if f.repl.LeaderQuota().Wait(rd.leaderRate, time.Now()) > 0 {
			return 0, false
		}
		limit = int(min(int64(limit), rd.leaderRate)) // a second's worth
	}
	readIso := rd.iso
	if rd.replica.id >= 0 {
		readIso = engine.ReadLogEnd // a follower reads up to the log end
	}
	res, recs, err := ep.FetchRecords(fp.req.FetchOffset, limit, readIso)
	if err != nil {
		o.ErrorCode = plugin.ErrorCode(err)
		o.HighWatermark, o.LastStableOffset, o.LogStartOffset = -1, -1, -1
		if rd.replica.id >= 0 && errors.Is(err, kerr.OffsetOutOfRange) {
			// A follower below our log start starts its log over
			// there (server/replication/follower.go): tell it where that is.
			o.LogStartOffset = ep.Offsets().LogStart
		}
		return 0, true
	}
	o.HighWatermark, o.LastStableOffset, o.LogStartOffset = res.HighWatermark, res.LastStableOffset, res.LogStartOffset
	if rd.replica.id >= 0 && replication.MirrorLeaderEpoch(&fp.req.UnknownTags) >= 0 {
		// A follower of a mirror partition: the latest epoch in
		// the log, read after the records so that it bounds them
		// (server/replication/mirror_epoch.go).
		replication.SetMirrorLeaderEpoch(&o.UnknownTags, ep.LastFetchedEpoch())
	}
	n = recs.Len()
	// KIP-74: only the first batch of the response may exceed the
	// limits, so that a large batch never blocks a consumer.
	if !first && n > limit {
		recs.Close()
		return 0, false
	}
	fp.recs, fp.nbytes = recs, n
	if throttled {
		f.repl.LeaderQuota().Record(n, rd.leaderRate, time.Now())
		f.m.throttledLeader.Add(n)
	}
	for _, a := range res.AbortedTxns {
		o.AbortedTransactions = append(o.AbortedTransactions, kmsg.FetchResponseTopicPartitionAbortedTransaction{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	if rd.iso == engine.ReadCommitted && o.AbortedTransactions == nil {
		o.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
	}
	f.m.fetchBytes.Add(n)
	return n, false
}

// fetchedPartition is ledPartition for a fetch's partition, which keeps
// the engine's partition between the rounds of a fetch session (a
// partition deleted meanwhile is looked up again).
func (f *fetcher) fetchedPartition(fp *fetchPart) (*engine.Partition, *metadata.Partition, *kerr.Error) {
	t, p := fp.topic, fp.key.partition
	if p < 0 || int(p) >= len(t.Partitions) {
		return nil, &metadata.Partition{}, kerr.UnknownTopicOrPartition
	}
	part := &t.Partitions[p]
	if part.Leader != f.nodeID {
		return nil, part, kerr.NotLeaderForPartition
	}
	if fp.ep == nil || fp.ep.Deleted() {
		fp.ep = f.engine.Partition(t.ID, p)
	}
	if fp.ep == nil {
		// The image says we lead it but the engine has not created it:
		// only possible for an image not yet applied, so ask for a retry.
		return nil, part, kerr.NotLeaderForPartition
	}
	return fp.ep, part, nil
}

// fetchSession is a KIP-227 incremental fetch session: the partitions a
// client fetches, so that its requests only name what changed.
type fetchSession struct {
	id int32
	mu sync.Mutex // held by the fetch using the session
	// epoch is the SessionEpoch the next request must carry.
	epoch    int32
	parts    []*fetchPart
	byKey    map[fetchKey]*fetchPart // parts by key: a consumer of 10,000 partitions names them all
	lastUsed time.Time
}

// update applies an incremental request: added or changed partitions, and
// forgotten ones.
func (s *fetchSession) update(reqParts []*fetchPart, forgotten []kmsg.FetchRequestForgottenTopic, v13 bool) {
	gone := false
	for _, ft := range forgotten {
		for _, p := range ft.Partitions {
			k := fetchKey{partition: p}
			if v13 {
				k.id = ft.TopicID
			} else {
				k.topic = ft.Topic
			}
			if s.byKey[k] != nil {
				delete(s.byKey, k)
				gone = true
			}
		}
	}
	if gone {
		s.parts = slices.DeleteFunc(s.parts, func(fp *fetchPart) bool { return s.byKey[fp.key] != fp })
	}
	for _, rp := range reqParts {
		if fp := s.byKey[rp.key]; fp != nil {
			fp.req = rp.req
		} else {
			s.byKey[rp.key] = rp
			s.parts = append(s.parts, rp)
		}
	}
}

// rotate moves partitions that returned data to the end, so that with a
// limited response size the others get their turn (as Kafka does).
func (s *fetchSession) rotate(got []*fetchPart) {
	if len(got) == 0 || len(got) == len(s.parts) {
		return
	}
	moved := make(map[*fetchPart]bool, len(got))
	for _, fp := range got {
		moved[fp] = true
	}
	s.parts = slices.DeleteFunc(s.parts, func(fp *fetchPart) bool { return moved[fp] })
	s.parts = append(s.parts, got...)
}

// fetchSessions is the bounded session cache.
type fetchSessions struct {
	mu   sync.Mutex
	max  int
	byID map[int32]*fetchSession
	now  func() time.Time // stamps lastUsed; time.Now but in tests
}

func newFetchSessions(max int) *fetchSessions {
	return &fetchSessions{max: max, byID: make(map[int32]*fetchSession), now: time.Now}
}

// create makes a session over parts and returns it locked, with the epoch
// the next request must use. When the cache is full, the least recently
// used session is evicted (its client gets FETCH_SESSION_ID_NOT_FOUND and
// starts over with a full fetch).
func (f *fetchSessions) create(parts []*fetchPart) *fetchSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.max <= 0 {
		return nil
	}
	if len(f.byID) >= f.max {
		var lru *fetchSession
		for _, s := range f.byID {
			if lru == nil || s.lastUsed.Before(lru.lastUsed) {
				lru = s
			}
		}
		delete(f.byID, lru.id)
	}
	s := &fetchSession{epoch: 1, parts: slices.Clone(parts), byKey: make(map[fetchKey]*fetchPart, len(parts)), lastUsed: f.now()}
	for _, fp := range parts {
		s.byKey[fp.key] = fp
	}
	for s.id == 0 || f.byID[s.id] != nil {
		s.id = rand.Int32()
	}
	f.byID[s.id] = s
	s.mu.Lock()
	return s
}

// get returns the session id locked, checked against the request's epoch,
// and advances its epoch; or the error code for the request.
func (f *fetchSessions) get(id, epoch int32) (*fetchSession, int16) {
	f.mu.Lock()
	s := f.byID[id]
	f.mu.Unlock()
	if s == nil {
		return nil, kerr.FetchSessionIDNotFound.Code
	}
	s.mu.Lock()
	if s.epoch != epoch {
		s.mu.Unlock()
		return nil, kerr.InvalidFetchSessionEpoch.Code
	}
	s.epoch++
	if s.epoch <= 0 {
		s.epoch = 1 // epochs wrap to 1: 0 and -1 have meanings of their own
	}
	f.mu.Lock()
	s.lastUsed = f.now()
	f.mu.Unlock()
	return s, 0
}

func (f *fetchSessions) remove(id int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.byID, id)
}
