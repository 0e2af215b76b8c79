// Package raftmeta is Tandem's controller: the metadata quorum, a
// replicated log of metadata records on hashicorp/raft (its transport on
// the controller port, the log store in Pebble), leadership, the
// controller's decisions (what to write: topics, leaders and ISRs, epochs,
// configs, producer-id blocks, ACLs, SCRAM credentials, quotas, mirrors)
// with their forwarding to the active controller, and broker
// registration, sessions and fencing. The records, the immutable image
// brokers serve from, and the deterministic apply of records to an image
// are package raftmeta/metadata.
package raftmeta

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Config configures a Controller.
type Config struct {
	NodeID int32
	Dir    string     // for snapshots (Dir/raft-snapshots)
	DB     *pebble.DB // log + stable store live here under prefix {0x01,'m'}; not closed by Close
	// Voters is controller.quorum.voters. Empty runs the quorum of a
	// standalone broker: one voter on an in-memory transport, no port.
	// Otherwise this node is a voter if it is listed, and a broker that
	// observes the metadata log (a raft non-voter) if not.
	Voters []Voter
	// ListenAddr is where the controller port binds: by default a
	// voter's own entry; a node that is not a voter must give one (port
	// 0 picks a free port), and registers the address it got.
	ListenAddr string
	// ClusterID is the cluster this node's data dir belongs to, "" for a
	// new one: a peer of another cluster is refused.
	ClusterID string
	// Dial opens the connections to other nodes (nil: net.Dialer).
	// Tests cut the network between nodes here.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ServerTLS and ClientTLS, when set, make the controller port speak
	// TLS: ServerTLS on accepted connections, ClientTLS (its ServerName
	// set to each peer's host) on dialed ones.
	ServerTLS, ClientTLS *tls.Config
	// ElectionTimeout and FetchTimeout are Kafka's
	// controller.quorum.election.timeout.ms and
	// controller.quorum.fetch.timeout.ms: how long a follower waits for
	// the leader before it starts an election (0: 1s and 2s).
	ElectionTimeout, FetchTimeout time.Duration
	// SessionTimeout and HeartbeatInterval are broker.session.timeout.ms
	// and broker.heartbeat.interval.ms (0: 9s and 2s).
	SessionTimeout, HeartbeatInterval time.Duration
	// LeaderImbalanceInterval is how often the controller moves
	// leadership back to preferred replicas (auto.leader.rebalance.enable
	// with leader.imbalance.check.interval.seconds); 0 turns it off.
	LeaderImbalanceInterval time.Duration
	// UncleanLeaderElection is the static unclean.leader.election.enable;
	// topic configs and dynamic broker configs override it.
	UncleanLeaderElection bool
	// Limits bound the partitions a decision may create; zero fields take
	// the defaults.
	Limits PartitionLimits
	Logger *slog.Logger
	// beforeRaft, set by tests, runs once the controller port is open and
	// before raft starts: the window in which a peer may already ask.
	beforeRaft func()
}

// Controller owns this node's raft instance and the metadata image, and
// makes the controller's decisions when this node leads. On a cluster's
// other nodes its decision methods are forwarded to the node that leads.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	raft     *raft.Raft
	trans    io.Closer
	stream   *streamLayer // nil for a standalone broker
	raftAddr raft.ServerAddress

	// state is the published image and the channel closed when a newer
	// one replaces it.
	state    atomic.Pointer[published]
	pubMu    sync.Mutex // serializes publishing
	leaderID int32      // guarded by pubMu; -1 when unknown

	deciding chan struct{} // a one-slot semaphore: one decision at a time

	peers    peers     // reachability of other nodes' controller ports
	rpcs     rpcClient // connections to the leader for forwarded calls
	rpcConns sync.Map  // net.Conn -> struct{}: accepted RPC connections
	sessions sessions  // brokers' heartbeats, while this node leads
	// caughtUp: this cluster node leads and its image holds every entry
	// committed before its term (lead's barrier). Until then a decision
	// would be made on a stale image: a restarted node's image is empty
	// until raft commits in the new term.
	caughtUp atomic.Bool
	metrics  ControllerMetrics

	observer *raft.Observer
	// raftStarted is closed once raft is set: the controller port is
	// raft's transport and opens first, and what it serves waits for it.
	raftStarted chan struct{}
	stop        chan struct{}
	wg          sync.WaitGroup
	closed      atomic.Bool
}

type published struct {
	img     *metadata.Image
	changed chan struct{}
}

// Open starts raft on cfg.DB. A standalone broker (no Voters) bootstraps
// a single-voter quorum on first start and writes a new cluster ID; on
// restart it restores the latest snapshot and replays the log; Open
// returns once this node leads and the image reflects every committed
// entry, ctx bounding the wait. A cluster node (Voters set) binds its
// controller port and starts raft, a voter bootstrapping the voters'
// quorum on first start; it returns at once: Register waits for the
// quorum.
func Open(ctx context.Context, cfg Config) (*Controller, error) {
	if cfg.DB == nil || cfg.Dir == "" {
		return nil, errors.New("raftmeta: Config.DB and Config.Dir are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Controller{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "raftmeta"),
		leaderID:    -1,
		deciding:    make(chan struct{}, 1),
		raftStarted: make(chan struct{}),
		stop:        make(chan struct{}),
	}
	c.rpcs.c = c
	empty := &metadata.Image{ControllerID: -1}
	empty.EnsureMaps()
	c.state.Store(&published{img: empty, changed: make(chan struct{})})

	rlog := newRaftLogger(cfg.Logger)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(strconv.Itoa(int(cfg.NodeID)))
	rc.Logger = rlog

	trans, boot, err := c.openTransport(rc, rlog)
	if err != nil {
		return nil, err
	}
	if err := c.startRaft(rc, rlog, trans, boot); err != nil {
		return nil, err
	}
	if err := c.checkStoredVoters(); err != nil {
		c.Close()
		return nil, err
	}
	c.observeLeader()

	if c.stream != nil {
		return c, nil
	}
	if err := c.awaitLeadership(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openTransport opens raft's transport (c.trans) and returns it with the
// configuration to bootstrap a new quorum with: a standalone node's
// in-memory transport and itself alone, or a cluster node's controller
// port and the voters (none for a node that is not one).
func (c *Controller) openTransport(rc *raft.Config, rlog *raftLogger) (raft.Transport, raft.Configuration, error) {
	var boot raft.Configuration
	if len(c.cfg.Voters) == 0 {
		// A lone voter needs no network, and short timeouts make it lead
		// (and so open) quickly.
		rc.HeartbeatTimeout = 50 * time.Millisecond
		rc.ElectionTimeout = 50 * time.Millisecond
		rc.LeaderLeaseTimeout = 50 * time.Millisecond
		_, t := raft.NewInmemTransport(raft.ServerAddress(standaloneAddr(c.cfg.NodeID)))
		c.trans = t
		boot.Servers = []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: t.LocalAddr()}}
		return t, boot, nil
	}
	t, err := c.openClusterTransport(rc, rlog)
	if err != nil {
		return nil, boot, err
	}
	c.trans = t
	if c.isVoter(c.cfg.NodeID) {
		for _, v := range c.cfg.Voters {
			boot.Servers = append(boot.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(strconv.Itoa(int(v.ID))), Address: raft.ServerAddress(v.Addr)})
		}
	}
	return t, boot, nil
}

// startRaft opens raft's snapshot and log stores, bootstraps the quorum
// boot on a first start, and starts raft (c.raft) over trans. On error
// the transport is closed.
func (c *Controller) startRaft(rc *raft.Config, rlog *raftLogger, trans raft.Transport, boot raft.Configuration) error {
	cfg := c.cfg
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.Dir, "raft-snapshots"), 2, rlog)
	if err != nil {
		c.closeTransport()
		return fmt.Errorf("raftmeta: snapshot store: %w", err)
	}
	store := NewStore(cfg.DB)
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		c.closeTransport()
		return fmt.Errorf("raftmeta: inspect raft state: %w", err)
	}
	if !existing && len(boot.Servers) > 0 {
		if err := raft.BootstrapCluster(rc, store, store, snaps, trans, boot); err != nil {
			c.closeTransport()
			return fmt.Errorf("raftmeta: bootstrap: %w", err)
		}
	}
	c.raftAddr = trans.LocalAddr()
	if cfg.beforeRaft != nil {
		cfg.beforeRaft()
	}
	r, err := raft.NewRaft(rc, (*fsm)(c), store, store, snaps, trans)
	if err != nil {
		c.closeTransport()
		return fmt.Errorf("raftmeta: start raft: %w", err)
	}
	c.raft = r
	close(c.raftStarted)
	return nil
}

// observeLeader follows raft's leader changes (watchLeader), starting
// from the leader raft may have learnt before the observer was in place.
func (c *Controller) observeLeader() {
	obs := make(chan raft.Observation, 16)
	c.observer = raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	c.raft.RegisterObserver(c.observer)
	if _, leader := c.raft.LeaderWithID(); leader != "" { // learnt before the observer was in place
		c.setLeader(nodeID(leader))
	}
	c.wg.Add(1)
	go c.watchLeader(obs)
}

// awaitLeadership waits until this node leads, applies every committed
// entry, and writes the cluster ID if the cluster is new.
func (c *Controller) awaitLeadership(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for c.raft.State() != raft.Leader {
		select {
		case <-ctx.Done():
			return fmt.Errorf("raftmeta: waiting for leadership: %w", ctx.Err())
		case <-t.C:
		}
	}
	if err := wait(ctx, c.raft.Barrier(0)); err != nil {
		return fmt.Errorf("raftmeta: catching up: %w", err)
	}
	c.setLeader(c.cfg.NodeID)
	if c.Image().ClusterID == "" {
		id := uuid.Random()
		if err := c.propose(ctx, metadata.Record{Type: metadata.RecordCluster, ClusterID: base64.RawURLEncoding.EncodeToString(id[:])}); err != nil {
			return fmt.Errorf("raftmeta: writing cluster ID: %w", err)
		}
	}
	return nil
}

func (c *Controller) watchLeader(obs chan raft.Observation) {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-obs:
			// Ask raft rather than trusting the observation: a dropped
			// observation (the channel does not block raft) is then
			// covered by the next one.
			_, leader := c.raft.LeaderWithID()
			c.setLeader(nodeID(leader))
			if c.stream != nil {
				c.leadership(nodeID(leader) == c.cfg.NodeID && c.IsLeader())
			}
		}
	}
}

// nodeID is the broker ID a raft server ID names, -1 for none.
func nodeID(id raft.ServerID) int32 {
	n, err := strconv.ParseInt(string(id), 10, 32)
	if err != nil {
		return -1
	}
	return int32(n)
}

// setLeader records the raft leader and republishes the image with it as
// ControllerID.
func (c *Controller) setLeader(id int32) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.leaderID = id
	if cur := c.state.Load().img; cur.ControllerID != id {
		img := *cur // maps and topics are shared: both images are immutable
		c.publishLocked(&img)
	}
}

func (c *Controller) publish(img *metadata.Image) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.publishLocked(img)
}

func (c *Controller) publishLocked(img *metadata.Image) {
	img.ControllerID = c.leaderID
	old := c.state.Swap(&published{img: img, changed: make(chan struct{})})
	close(old.changed)
}

// Close stops raft. It does not close the Pebble DB, which the broker owns.
func (c *Controller) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c.stream != nil && c.IsLeader() {
		// Hand the quorum over rather than leaving the others to notice
		// the silence: elections take seconds, a transfer a round trip.
		f := c.raft.LeadershipTransfer()
		done := make(chan struct{})
		go func() { f.Error(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	var err error
	close(c.stop)
	c.leadership(false)
	if c.raft != nil {
		if c.observer != nil {
			c.raft.DeregisterObserver(c.observer)
		}
		err = c.raft.Shutdown().Error()
	}
	c.wg.Wait()
	if cerr := c.closeTransport(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftmeta: close: %w", err)
	}
	return nil
}

// Image returns the current image; it is never nil and never modified.
func (c *Controller) Image() *metadata.Image { return c.state.Load().img }

// Changed returns a channel that is closed when an image newer than the
// current one is published. To never miss an update, call Changed before
// Image (or use Watch): an image published in between closes the channel
// at once.
func (c *Controller) Changed() <-chan struct{} { return c.state.Load().changed }

// Watch returns the current image and the channel that is closed when it
// is replaced, as one consistent pair.
func (c *Controller) Watch() (*metadata.Image, <-chan struct{}) {
	s := c.state.Load()
	return s.img, s.changed
}

// CatchUp waits until this node's image holds every metadata change the
// active controller had made when it was called, so that a broker
// answering from its image after CatchUp reads what another broker just
// wrote through the controller. On the controller (or a single node) it
// returns as soon as no decision is in flight.
func (c *Controller) CatchUp(ctx context.Context) error {
	_, err := catchUp.do(c, ctx, none{})
	return err
}

// catchUp runs on the controller: the decision lock is taken once no
// decision is in flight and the log is applied, so the image index
// answered (rpc.go) covers every decision that completed.
var catchUp = decision[none, none]{"CatchUp", func(c *Controller, ctx context.Context, _ none) (none, error) {
	if _, err := c.lock(ctx); err != nil {
		return none{}, err
	}
	c.unlock()
	return none{}, nil
}}

// RaftAddr returns the address of this node's controller port (an
// in-memory address for a standalone broker).
func (c *Controller) RaftAddr() string { return string(c.raftAddr) }

// IsLeader reports whether this node currently leads the quorum.
func (c *Controller) IsLeader() bool { return c.raft.State() == raft.Leader }

// Snapshot forces a raft snapshot of the image (and log truncation).
func (c *Controller) Snapshot() error {
	if err := c.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("raftmeta: snapshot: %w", err)
	}
	return nil
}

// wait waits for a raft future or the context.
func wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// propose replicates one record batch and waits until it is applied here,
// so that Image() reflects it when propose returns. The batch's own error
// (a record that no longer fits the image) is returned as is.
func (c *Controller) propose(ctx context.Context, recs ...metadata.Record) error {
	data, err := metadata.EncodeBatch(recs)
	if err != nil {
		return fmt.Errorf("raftmeta: encode records: %w", err)
	}
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	f := c.raft.Apply(data, timeout)
	if err := wait(ctx, f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return fmt.Errorf("raftmeta: %v: %w", err, kerr.NotController)
		}
		return fmt.Errorf("raftmeta: apply: %w", err)
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// fsm is the Controller seen as a raft.FSM. Apply only builds and
// publishes images: it never calls out to user code.
type fsm Controller

func (f *fsm) Apply(l *raft.Log) any {
	c := (*Controller)(f)
	recs, err := metadata.DecodeBatch(l.Data)
	if err != nil {
		c.log.Error("undecodable metadata batch skipped", "index", l.Index, "err", err)
		return fmt.Errorf("raftmeta: decode batch %d: %v: %w", l.Index, err, kerr.CorruptMessage)
	}
	img, err := metadata.Apply(c.Image(), recs, l.Index)
	if err != nil {
		return err
	}
	img.Index = l.Index
	c.publish(img)
	return nil
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return imageSnapshot{(*Controller)(f).Image()}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	img := new(metadata.Image)
	if err := json.NewDecoder(rc).Decode(img); err != nil {
		return fmt.Errorf("raftmeta: decode snapshot: %w", err)
	}
	img.Restored()
	(*Controller)(f).publish(img)
	return nil
}

// imageSnapshot persists an immutable image as JSON, off the FSM goroutine.
type imageSnapshot struct{ img *metadata.Image }

func (s imageSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.img); err != nil {
		sink.Cancel()
		return fmt.Errorf("raftmeta: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (imageSnapshot) Release() {}
