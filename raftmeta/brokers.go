package raftmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Brokers of a cluster, as Kafka's KRaft controller keeps them: a broker
// registers (a new broker epoch, fenced), heartbeats every
// broker.heartbeat.interval.ms, and is unfenced once it has caught up
// with the metadata log. The controller fences a broker whose session
// expires (broker.session.timeout.ms without a heartbeat) or whose
// session connection closes (its process died: Tandem does not wait for
// the timeout then); fencing moves its leaderships to other in-sync
// replicas and takes it out of every ISR. A heartbeat that asks to shut
// down starts a controlled shutdown: leaderships move first, and the
// answer says when the broker may stop.

// ControllerMetrics count the controller's decisions about brokers and
// leaders on this node.
type ControllerMetrics struct {
	FencedBrokers      atomic.Int64 // brokers fenced by this node as controller
	UncleanElections   atomic.Int64 // leaders elected from outside the ISR
	LeaderElections    atomic.Int64 // leader changes decided here
	PreferredElections atomic.Int64 // leaderships moved back to the preferred replica
}

// Metrics returns the controller's counters.
func (c *Controller) Metrics() *ControllerMetrics { return &c.metrics }

// sessions are the brokers' last heartbeats, kept in memory by the node
// that leads (as Kafka's BrokerHeartbeatManager).
type sessions struct {
	mu     sync.Mutex
	last   map[int32]session
	cancel context.CancelFunc // of the lead goroutine; nil when not leading
}

type session struct {
	epoch int64
	at    time.Time
	// bound: the broker heartbeats on a connection to this controller,
	// whose end fences it (serveRPC). Until then only its listener tells
	// whether its process is still there (fenceGone).
	bound bool
}

// bind records that broker id of epoch heartbeats on a connection to
// this controller (on is false when that connection ended).
func (s *sessions) bind(id int32, epoch int64, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.last[id]; ok && l.epoch == epoch {
		l.bound = on
		s.last[id] = l
	}
}

// unbound returns the unfenced brokers other than self that have no
// session connection to this controller.
func (s *sessions) unbound(img *metadata.Image, self int32) []metadata.Broker {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []metadata.Broker
	for _, id := range sortedBrokers(img) {
		b := img.Brokers[id]
		if l := s.last[id]; id != self && !b.Fenced && b.Host != "" && !(l.bound && l.epoch == b.Epoch) {
			out = append(out, b)
		}
	}
	return out
}

func (s *sessions) touch(id int32, epoch int64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[int32]session{}
	}
	l := s.last[id]
	s.last[id] = session{epoch: epoch, at: now, bound: l.bound && l.epoch == epoch}
}

// reset gives every registered broker a fresh session: a new controller
// does not know when they last heartbeated.
func (s *sessions) reset(img *metadata.Image, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = map[int32]session{}
	for id, b := range img.Brokers {
		s.last[id] = session{epoch: b.Epoch, at: now}
	}
}

// alive reports whether broker id of that epoch heartbeated within timeout.
func (s *sessions) alive(id int32, epoch int64, now time.Time, timeout time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.last[id]
	return ok && l.epoch == epoch && now.Sub(l.at) < timeout
}

// expired returns the unfenced brokers whose session has expired.
func (s *sessions) expired(img *metadata.Image, now time.Time, timeout time.Duration) []metadata.Broker {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []metadata.Broker
	for _, b := range sortedBrokers(img) {
		br := img.Brokers[b]
		if br.Fenced {
			continue
		}
		l, ok := s.last[b]
		if !ok || l.epoch != br.Epoch {
			s.last[b] = session{epoch: br.Epoch, at: now} // registered since the reset
			continue
		}
		if now.Sub(l.at) >= timeout {
			out = append(out, br)
		}
	}
	return out
}

// RegisterRequest is a broker's registration.
type RegisterRequest struct {
	Broker metadata.Broker `json:"broker"`
	// ClusterID is the cluster the broker's data dir belongs to ("" for
	// a new data dir).
	ClusterID string `json:"clusterId,omitempty"`
}

// RegisterResult is the new registration's broker epoch.
type RegisterResult struct {
	ID    int32 `json:"id"`
	Epoch int64 `json:"epoch"`
}

// HeartbeatRequest is a broker's heartbeat.
type HeartbeatRequest struct {
	ID      int32  `json:"id"`
	Epoch   int64  `json:"epoch"`
	Applied uint64 `json:"applied"` // the metadata index the broker has applied
	// WantShutdown starts (or continues) a controlled shutdown.
	WantShutdown bool `json:"wantShutdown,omitempty"`
	// DiskFull says the broker's data directory is full: its
	// leaderships move away until a heartbeat says it is not.
	DiskFull bool `json:"diskFull,omitempty"`
}

// HeartbeatResult is the controller's answer.
type HeartbeatResult struct {
	ID             int32 `json:"id"`
	Epoch          int64 `json:"epoch"`
	Fenced         bool  `json:"fenced"`
	ShouldShutdown bool  `json:"shouldShutdown,omitempty"`
}

func (r HeartbeatResult) session() (int32, int64) { return r.ID, r.Epoch }

func (c *Controller) sessionTimeout() time.Duration {
	return cmpOr(c.cfg.SessionTimeout, 9*time.Second)
}

// A broker's session with the controller: it registers, then
// heartbeats; on a cluster it calls these over RPC (Session.register,
// heartbeatTo), on a single node directly.
var (
	registerBroker  = decision[RegisterRequest, RegisterResult]{"RegisterBroker", (*Controller).register}
	brokerHeartbeat = decision[HeartbeatRequest, HeartbeatResult]{"BrokerHeartbeat", (*Controller).heartbeat}
)

// register is the controller's side of a registration.
func (c *Controller) register(ctx context.Context, req RegisterRequest) (RegisterResult, error) {
	b := req.Broker
	if b.ID < 0 {
		return RegisterResult{}, fmt.Errorf("register broker %d: negative ID: %w", b.ID, kerr.InvalidRequest)
	}
	img, err := c.lock(ctx)
	if err != nil {
		return RegisterResult{}, err
	}
	defer c.unlock()
	if req.ClusterID != "" && req.ClusterID != img.ClusterID {
		return RegisterResult{}, fmt.Errorf("node %d's data dir belongs to cluster %s, but this is cluster %s: %w", b.ID, req.ClusterID, img.ClusterID, kerr.InconsistentClusterID)
	}
	old, exists := img.Brokers[b.ID]
	// A registration whose broker asked for a controlled shutdown is
	// going away: its node restarting now is not a second node with
	// the same ID, and need not wait for the old session to expire.
	if exists && old.Incarnation != b.Incarnation && !old.Fenced && !old.ShuttingDown && c.sessions.alive(b.ID, old.Epoch, time.Now(), c.sessionTimeout()) {
		return RegisterResult{}, fmt.Errorf("node %d is already registered by a running broker (at %s:%d, heartbeating): two nodes have the same node.id: %w",
			b.ID, old.Host, old.Port, kerr.DuplicateBrokerRegistration)
	}
	if !c.isVoter(b.ID) {
		if b.MetadataAddr == "" {
			return RegisterResult{}, fmt.Errorf("register broker %d: a broker that is not a voter needs a metadata address: %w", b.ID, kerr.InvalidRequest)
		}
		// A non-voter receives the metadata log; re-adding updates its
		// address.
		f := c.raft.AddNonvoter(raft.ServerID(fmt.Sprint(b.ID)), raft.ServerAddress(b.MetadataAddr), 0, 0)
		if err := wait(ctx, f); err != nil {
			return RegisterResult{}, fmt.Errorf("register broker %d: adding it to the metadata quorum: %v: %w", b.ID, err, kerr.NotController)
		}
	}
	var recs []metadata.Record
	if exists && !old.Fenced {
		// The old incarnation is gone: its leaderships and ISR places go
		// before the new one registers (fenced).
		recs = c.fenceRecords(img, old)
	}
	b.Fenced, b.ShuttingDown, b.DiskFull, b.Epoch = true, false, false, 0
	recs = append(recs, metadata.Record{Type: metadata.RecordRegisterBroker, Broker: &b})
	if err := c.propose(ctx, recs...); err != nil {
		return RegisterResult{}, fmt.Errorf("register broker %d: %w", b.ID, err)
	}
	epoch := c.Image().Brokers[b.ID].Epoch
	c.sessions.touch(b.ID, epoch, time.Now())
	c.log.Info("broker registered", "broker", b.ID, "epoch", epoch, "host", b.Host, "port", b.Port, "rack", b.Rack)
	return RegisterResult{ID: b.ID, Epoch: epoch}, nil
}

// heartbeat is the controller's side of a heartbeat.
func (c *Controller) heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatResult, error) {
	res := HeartbeatResult{ID: req.ID, Epoch: req.Epoch}
	if !c.IsLeader() {
		return res, fmt.Errorf("node %d is not the controller: %w", c.cfg.NodeID, kerr.NotController)
	}
	b, ok := c.Image().Brokers[req.ID]
	switch {
	case !ok:
		return res, fmt.Errorf("broker %d is not registered: %w", req.ID, kerr.BrokerIDNotRegistered)
	case b.Epoch != req.Epoch:
		return res, fmt.Errorf("broker %d heartbeats with epoch %d, its registration has %d: %w", req.ID, req.Epoch, b.Epoch, kerr.StaleBrokerEpoch)
	}
	c.sessions.touch(req.ID, req.Epoch, time.Now())
	switch {
	case req.WantShutdown && !b.Fenced && !b.ShuttingDown:
		if err := c.changeBroker(ctx, b, brokerShutdown); err != nil {
			return res, err
		}
	case !req.WantShutdown && b.Fenced && req.Applied >= uint64(b.Epoch):
		if err := c.changeBroker(ctx, b, brokerUnfence); err != nil {
			return res, err
		}
	case req.DiskFull != b.DiskFull && !b.Fenced && !b.ShuttingDown:
		t := brokerDiskFreed
		if req.DiskFull {
			t = brokerDiskFull
		}
		if err := c.changeBroker(ctx, b, t); err != nil {
			return res, err
		}
		c.log.Warn("broker's disk: leaderships follow", "broker", req.ID, "full", req.DiskFull)
	}
	img := c.Image()
	b = img.Brokers[req.ID]
	res.Fenced = b.Fenced
	if req.WantShutdown {
		res.ShouldShutdown = b.Fenced || !leadsMovable(img, req.ID)
	}
	return res, nil
}

// leadsMovable reports whether broker id leads a partition that another
// live ISR member could lead. What it still leads once its shutdown has
// been recorded has no such member (the shutdown record moved the rest
// away): waiting would not move it, and when every broker stops at once
// the last ones would wait for brokers that are stopping too, until the
// quorum is gone. Kafka lets such a broker go as well.
func leadsMovable(img *metadata.Image, id int32) bool {
	for _, t := range img.Topics {
		for _, p := range t.Partitions {
			if p.Leader != id {
				continue
			}
			for _, r := range p.ISR {
				if br, ok := img.Brokers[r]; ok && r != id && br.Live() {
					return true
				}
			}
		}
	}
	return false
}

type brokerTransition int

const (
	brokerFence brokerTransition = iota
	brokerUnfence
	brokerShutdown
	brokerDiskFull  // its leaderships move away, as in a shutdown
	brokerDiskFreed // it may lead again
)

// fence fences broker id if its registration still has that epoch.
func (c *Controller) fence(ctx context.Context, id int32, epoch int64, why string) error {
	b, ok := c.Image().Brokers[id]
	if !ok || b.Epoch != epoch || b.Fenced {
		return nil
	}
	if err := c.changeBroker(ctx, b, brokerFence); err != nil {
		return err
	}
	c.metrics.FencedBrokers.Add(1)
	c.log.Warn("broker fenced: its leaderships move to other in-sync replicas", "broker", id, "epoch", epoch, "reason", why)
	return nil
}

// changeBroker writes a broker's state change with the partition changes
// it implies, as one batch.
func (c *Controller) changeBroker(ctx context.Context, b metadata.Broker, t brokerTransition) error {
	return c.decide(ctx, fmt.Sprintf("broker %d", b.ID), func(img *metadata.Image) ([]metadata.Record, error) {
		cur, ok := img.Brokers[b.ID]
		if !ok || cur.Epoch != b.Epoch {
			return nil, nil // re-registered meanwhile
		}
		yes, no := true, false
		bc := &metadata.BrokerChangeRecord{ID: b.ID, Epoch: b.Epoch}
		var recs []metadata.Record
		switch t {
		case brokerFence:
			if cur.Fenced {
				return nil, nil
			}
			recs = c.fenceRecords(img, cur)
			bc.Fenced = &yes
		case brokerShutdown:
			if cur.ShuttingDown {
				return nil, nil
			}
			cur.ShuttingDown = true
			recs = c.moveAwayRecords(img, cur.ID, withBroker(img, cur))
			bc.ShuttingDown = &yes
		case brokerUnfence:
			if !cur.Fenced {
				return nil, nil
			}
			cur.Fenced = false
			recs = c.electRecords(img, withBroker(img, cur), func(p metadata.Partition) bool { return slices.Contains(p.Replicas, b.ID) })
			bc.Fenced = &no
		case brokerDiskFull:
			if cur.DiskFull {
				return nil, nil
			}
			cur.DiskFull = true
			recs = c.diskFullRecords(img, cur.ID, withBroker(img, cur))
			bc.DiskFull = &yes
		case brokerDiskFreed:
			if !cur.DiskFull {
				return nil, nil
			}
			cur.DiskFull = false
			recs = c.electRecords(img, withBroker(img, cur), func(p metadata.Partition) bool { return slices.Contains(p.Replicas, b.ID) })
			bc.DiskFull = &no
		}
		return append([]metadata.Record{{Type: metadata.RecordBrokerChange, BrokerChange: bc}}, recs...), nil
	})
}

// fenceRecords are the partition changes of fencing broker b: it leaves
// every ISR (but the last member stays, so that it can lead again when it
// comes back) and its leaderships move.
func (c *Controller) fenceRecords(img *metadata.Image, b metadata.Broker) []metadata.Record {
	b.Fenced = true
	return c.moveAwayRecords(img, b.ID, withBroker(img, b))
}

// withBroker is img's live() with broker b's state replaced.
func withBroker(img *metadata.Image, b metadata.Broker) func(int32) bool {
	return func(id int32) bool {
		if id == b.ID {
			return b.Live()
		}
		br, ok := img.Brokers[id]
		return ok && br.Live()
	}
}

// Session is a broker's session with the controller: registration, then
// heartbeats until it is closed.
type Session struct {
	c      *Controller
	req    RegisterRequest
	mu     sync.Mutex
	epoch  int64
	fenced bool
	// confirmed is when the last heartbeat (or registration) that the
	// controller answered was sent: the controller heard from this
	// broker after that, so it fences it no earlier than a session
	// timeout later (Current).
	confirmed time.Time
	shutdown  bool          // a controlled shutdown was asked for
	diskFull  func() bool   // ReportDiskFull; nil: never full
	stopping  chan struct{} // closed when ShouldShutdown came
	changed   chan struct{} // closed and replaced on every answer
	cancel    context.CancelFunc
	done      chan struct{}
}

// ReportDiskFull makes the heartbeats say whether full reports the data
// directory full: the controller then moves this broker's leaderships
// away and back (Broker.DiskFull).
func (s *Session) ReportDiskFull(full func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.diskFull = full
}

// Register registers this node's broker with the controller, waiting for
// the quorum as long as ctx allows and saying which voters it waits for,
// then heartbeats in the background until the session is closed. A
// configuration conflict (another cluster, another voter list) is
// returned at once; a node ID in use by a running broker once that
// broker has heartbeated for longer than the session timeout since.
func (c *Controller) Register(ctx context.Context, b metadata.Broker) (*Session, error) {
	s := &Session{c: c, req: RegisterRequest{Broker: b, ClusterID: c.cfg.ClusterID},
		stopping: make(chan struct{}), changed: make(chan struct{}), done: make(chan struct{})}
	if c.stream != nil && !c.isVoter(b.ID) {
		s.req.Broker.MetadataAddr = string(c.raftAddr)
	}
	if err := s.register(ctx, true); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(hctx)
	return s, nil
}

// Epoch is the broker epoch of the current registration.
func (s *Session) Epoch() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// register retries until registered, the context ends, or a conflict.
func (s *Session) register(ctx context.Context, waiting bool) error {
	c := s.c
	lastLog := time.Time{}
	// When the controller first said the ID is in use, and the raft
	// term it said so in: a controller elected since hands every
	// registered broker a fresh session (sessions.reset), and the
	// previous incarnation's then runs out a session timeout after its
	// election, not after the first refusal.
	var dupSince time.Time
	var dupTerm uint64
	for {
		if c.stream != nil && waiting && time.Since(lastLog) >= 5*time.Second {
			if err := s.logWaiting(ctx); err != nil {
				return err
			}
			lastLog = time.Now()
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var res RegisterResult
		var err error
		sent, term := time.Now(), c.raft.CurrentTerm()
		if c.stream == nil {
			res, err = c.register(rctx, s.req)
		} else {
			res, err = call[RegisterResult](c, rctx, registerBroker.name, s.req)
		}
		cancel()
		if err == nil {
			s.mu.Lock()
			s.epoch, s.fenced, s.confirmed = res.Epoch, true, sent
			s.mu.Unlock()
			return nil
		}
		if errors.Is(err, kerr.DuplicateBrokerRegistration) {
			// This node's previous process may have stopped moments ago
			// without the controller noticing (it was the controller
			// itself): its session runs out within the session timeout
			// of the controller refusing it. A registration still
			// refused after that belongs to another running node.
			if dupSince.IsZero() || term != dupTerm {
				dupSince, dupTerm = time.Now(), term
			}
			if time.Since(dupSince) > c.sessionTimeout()+cmpOr(c.cfg.HeartbeatInterval, 2*time.Second) {
				return fmt.Errorf("node %d cannot join the cluster: %w", s.req.Broker.ID, err)
			}
		} else if isFatal(err) {
			return fmt.Errorf("node %d cannot join the cluster: %w", s.req.Broker.ID, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("node %d: registering with the controller: %w (last error: %v)", s.req.Broker.ID, ctx.Err(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func isFatal(err error) bool {
	for _, ke := range []*kerr.Error{kerr.InconsistentClusterID, kerr.InvalidRequest} {
		if errors.Is(err, ke) {
			return true
		}
	}
	return errors.Is(err, errConflict)
}

// logWaiting says what a node waiting for the quorum waits for, and
// fails on a configuration conflict.
func (s *Session) logWaiting(ctx context.Context) error {
	c := s.c
	if _, leader := c.raft.LeaderWithID(); leader != "" {
		c.log.Info("waiting for the active controller to register this broker", "controller", leader)
		return nil
	}
	up, down, err := c.probeVoters(ctx)
	if err != nil {
		return fmt.Errorf("node %d cannot join the cluster: %w", s.req.Broker.ID, err)
	}
	if c.isVoter(c.cfg.NodeID) {
		c.log.Info("waiting for a majority of controller.quorum.voters", "voters", c.votersString(), "up", up, "waiting_for", down)
	} else {
		c.log.Info("waiting for the controller quorum", "voters", c.votersString(), "reachable", up[1:], "unreachable", down)
	}
	return nil
}

// run heartbeats until ctx ends.
func (s *Session) run(ctx context.Context) {
	defer close(s.done)
	c := s.c
	interval := cmpOr(c.cfg.HeartbeatInterval, 2*time.Second)
	var conn *sessionConn
	defer func() {
		if conn != nil {
			conn.close()
		}
	}()
	retry := time.Duration(0) // after a failed beat: 100ms, doubling up to the interval
	for {
		s.mu.Lock()
		req := HeartbeatRequest{ID: s.req.Broker.ID, Epoch: s.epoch, Applied: c.Image().Index, WantShutdown: s.shutdown}
		full := s.diskFull
		s.mu.Unlock()
		req.DiskFull = full != nil && full()
		controller := c.Image().ControllerID
		sent := time.Now()
		res, err := s.beat(ctx, &conn, req)
		switch {
		case err == nil:
			s.answered(res, sent)
			retry = 0
		case errors.Is(err, kerr.StaleBrokerEpoch) || errors.Is(err, kerr.BrokerIDNotRegistered):
			c.log.Warn("the controller lost this broker's registration; registering again", "err", err)
			if err := s.register(ctx, false); err != nil && ctx.Err() == nil {
				c.log.Error("registering again", "err", err)
			}
			continue
		case ctx.Err() == nil:
			c.log.Debug("heartbeat failed", "err", err)
			retry = min(max(2*retry, 100*time.Millisecond), interval)
		}
		wait := interval
		if req.WantShutdown || (err == nil && res.Fenced) {
			wait = min(interval, 100*time.Millisecond) // catching up or shutting down: ask often
		}
		if retry > 0 {
			wait = min(wait, retry)
		}
		if !s.sleep(ctx, wait, controller) {
			return
		}
	}
}

// sleep waits d, or less if the active controller changes from the one a
// beat went to: the new controller knows a broker's process is there
// only once it heartbeats on a connection to it (until then a kill -9
// waits for the session timeout, or for the controller's probe of the
// listener). It returns false when ctx ends.
func (s *Session) sleep(ctx context.Context, d time.Duration, controller int32) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		img, changed := s.c.Watch()
		if img.ControllerID != controller && img.ControllerID >= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-changed:
		}
	}
}

func (s *Session) answered(res HeartbeatResult, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenced = res.Fenced
	s.confirmed = sent
	if res.ShouldShutdown {
		select {
		case <-s.stopping:
		default:
			close(s.stopping)
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// beat sends one heartbeat: to this node's own controller when it leads,
// else over the session connection to the leader, which the controller
// binds to this registration (its end fences the broker).
func (s *Session) beat(ctx context.Context, conn **sessionConn, req HeartbeatRequest) (HeartbeatResult, error) {
	c := s.c
	if c.stream == nil || c.IsLeader() {
		return c.heartbeat(ctx, req)
	}
	addr, id := c.raft.LeaderWithID()
	if id == "" {
		return HeartbeatResult{}, fmt.Errorf("no active controller: %w", kerr.NotController)
	}
	if *conn != nil && (*conn).addr != string(addr) {
		(*conn).close()
		*conn = nil
	}
	// The dial is bounded too: an old controller that stopped (SIGSTOP,
	// a frozen VM) still accepts connections, and a beat stuck on it for
	// the handshake timeout would outlast the session the new controller
	// gave this broker, which would then fence a live broker.
	rctx, cancel := context.WithTimeout(ctx, cmpOr(c.cfg.HeartbeatInterval, 2*time.Second)*2)
	defer cancel()
	if *conn == nil {
		nc, err := c.dialPeer(rctx, string(addr), connRPC)
		if err != nil {
			return HeartbeatResult{}, err
		}
		*conn = &sessionConn{addr: string(addr), conn: nc}
	}
	raw, _ := json.Marshal(req)
	resp, err := (*conn).call(rctx, rpcRequest{Op: brokerHeartbeat.name, Args: raw})
	if err != nil || resp.NotLeader {
		(*conn).close()
		*conn = nil
		if err == nil {
			err = fmt.Errorf("node %s no longer leads: %w", id, kerr.NotController)
		}
		return HeartbeatResult{}, err
	}
	var res HeartbeatResult
	if len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, &res); err != nil {
			return res, err
		}
	}
	return res, resp.Err.err()
}

// Fenced reports whether the controller last said this broker is fenced.
func (s *Session) Fenced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fenced
}

// Current reports whether a heartbeat (or the registration) this broker
// sent less than broker.session.timeout.ms ago was answered. Past that
// the controller, which fences a broker a session timeout after it last
// heard from it, may have fenced this one and moved its leaderships to
// brokers that cannot reach it: a broker cut off from the controller
// cannot learn it, and what it serves from its own state (a
// coordinator's offsets) may be older than what the new leaders have
// acknowledged since. Measured from the send, never later than the
// controller's own clock starts.
func (s *Session) Current() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.confirmed) < s.c.sessionTimeout()
}

// Shutdown asks the controller for a controlled shutdown and waits until
// it says the broker leads nothing any more, or ctx ends.
func (s *Session) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	s.mu.Unlock()
	// Without an active controller nothing can move: when every broker
	// stops at once, the last ones lose the quorum to the first ones
	// that leave. Waiting for the timeout would not help them.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var leaderless time.Time
	for {
		select {
		case <-s.stopping:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("controlled shutdown: %w", ctx.Err())
		case now := <-tick.C:
			if _, id := s.c.raft.LeaderWithID(); id != "" {
				leaderless = time.Time{}
			} else if leaderless.IsZero() {
				leaderless = now
			} else if now.Sub(leaderless) >= time.Second {
				return fmt.Errorf("controlled shutdown: no active controller for %v (the quorum of controller.quorum.voters is gone): %w",
					now.Sub(leaderless).Round(100*time.Millisecond), kerr.NotController)
			}
		}
	}
}

// Close stops heartbeating and closes the session connection: the
// controller then fences the broker.
func (s *Session) Close() {
	s.cancel()
	<-s.done
}
