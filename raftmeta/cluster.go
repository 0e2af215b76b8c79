package raftmeta

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Voter is one entry of controller.quorum.voters: a node ID and the
// address of its controller port.
type Voter struct {
	ID   int32
	Addr string
}

// ParseVoters parses controller.quorum.voters, Kafka's
// "1@host:port,2@host:port,..." (IDs unique, at least one entry).
func ParseVoters(s string) ([]Voter, error) {
	var vs []Voter
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		id, addr, ok := strings.Cut(e, "@")
		n, err := strconv.ParseInt(id, 10, 32)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("controller.quorum.voters: %q is not ID@host:port", e)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("controller.quorum.voters: %q: %w", e, err)
		}
		if slices.ContainsFunc(vs, func(v Voter) bool { return v.ID == int32(n) }) {
			return nil, fmt.Errorf("controller.quorum.voters: node %d is listed twice", n)
		}
		vs = append(vs, Voter{ID: int32(n), Addr: addr})
	}
	if len(vs) == 0 {
		return nil, errors.New("controller.quorum.voters is empty")
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	return vs, nil
}

// FormatVoters is the canonical form of a voter list, as every node of a
// cluster must have it.
func FormatVoters(vs []Voter) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%d@%s", v.ID, v.Addr)
	}
	return strings.Join(parts, ",")
}

func (c *Controller) votersString() string { return FormatVoters(c.cfg.Voters) }

func (c *Controller) isVoter(id int32) bool {
	return slices.ContainsFunc(c.cfg.Voters, func(v Voter) bool { return v.ID == id })
}

func (c *Controller) voterAt(addr string) (int32, bool) {
	for _, v := range c.cfg.Voters {
		if v.Addr == addr {
			return v.ID, true
		}
	}
	return -1, false
}

// Clustered reports whether this controller is part of a cluster
// (controller.quorum.voters), not a standalone broker's.
func (c *Controller) Clustered() bool { return c.stream != nil }

// clusterID is the cluster this node belongs to: the image's once known,
// else its data dir's.
func (c *Controller) clusterID() string {
	if id := c.Image().ClusterID; id != "" {
		return id
	}
	return c.cfg.ClusterID
}

func standaloneAddr(id int32) string { return "raftmeta-" + strconv.Itoa(int(id)) }

// openClusterTransport binds the controller port: a voter's own entry
// unless ListenAddr says otherwise, else ListenAddr.
func (c *Controller) openClusterTransport(rc *raft.Config, rlog *raftLogger) (*raft.NetworkTransport, error) {
	cfg := c.cfg
	// Kafka's fetch timeout is the longest a voter waits for its leader
	// before it starts an election. raft waits a random time between its
	// heartbeat timeout and twice that, so the heartbeat timeout is half
	// of it. raft's election timeout, how long a candidate waits, may not
	// be shorter.
	rc.HeartbeatTimeout = cmpOr(cfg.FetchTimeout, 2*time.Second) / 2
	rc.ElectionTimeout = max(cmpOr(cfg.ElectionTimeout, time.Second), rc.HeartbeatTimeout)
	rc.LeaderLeaseTimeout = min(rc.HeartbeatTimeout, 500*time.Millisecond)
	var own string
	for _, v := range cfg.Voters {
		if v.ID == cfg.NodeID {
			own = v.Addr
		}
	}
	bind := cmpOr(cfg.ListenAddr, own)
	if bind == "" {
		return nil, fmt.Errorf("raftmeta: node %d is not in controller.quorum.voters and has no controller address to listen on", cfg.NodeID)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		if own != "" {
			return nil, fmt.Errorf("node %d cannot listen on its controller.quorum.voters entry %s (is another node %d running, or is the address not this host's?): %w", cfg.NodeID, bind, cfg.NodeID, err)
		}
		return nil, fmt.Errorf("raftmeta: controller port on %s: %w", bind, err)
	}
	if cfg.ServerTLS != nil {
		ln = tls.NewListener(ln, cfg.ServerTLS)
	}
	adv := own
	if adv == "" {
		adv = ln.Addr().String()
	}
	if c.stream, err = newStreamLayer(c, ln, adv); err != nil {
		ln.Close()
		return nil, err
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: c.stream, MaxPool: 3, Timeout: 10 * time.Second, Logger: rlog,
	}), nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (c *Controller) closeTransport() error {
	if c.trans == nil {
		return nil
	}
	err := c.trans.Close()
	if c.stream != nil {
		c.stream.Close()
		c.rpcConns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		c.rpcs.close()
		c.stream.wait()
	}
	return err
}

// checkStoredVoters compares the voters raft has stored with the
// configured ones: a data dir keeps the quorum it was made with.
func (c *Controller) checkStoredVoters() error {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("raftmeta: read the stored quorum: %w", err)
	}
	var stored []Voter
	standalone := false
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		if strings.HasPrefix(string(s.Address), "raftmeta-") {
			standalone = true
		}
		stored = append(stored, Voter{ID: nodeID(s.ID), Addr: string(s.Address)})
	}
	sort.Slice(stored, func(i, j int) bool { return stored[i].ID < stored[j].ID })
	switch {
	case len(stored) == 0: // a new node that is not a voter: nothing yet
		return nil
	case standalone && c.stream != nil:
		return fmt.Errorf("the data dir belongs to a standalone broker (started without controller.quorum.voters): it cannot join a cluster")
	case !standalone && c.stream == nil:
		return fmt.Errorf("the data dir belongs to a cluster: start the node with controller.quorum.voters=%s", FormatVoters(stored))
	case c.stream != nil && !slices.Equal(stored, c.cfg.Voters):
		return fmt.Errorf("the data dir's quorum has controller.quorum.voters=%s, but the node was started with %s", FormatVoters(stored), c.votersString())
	}
	return nil
}

// leadership starts or stops the controller's duties as this node gains
// or loses the raft leadership of a cluster.
func (c *Controller) leadership(lead bool) {
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	if lead == (c.sessions.cancel != nil) {
		return
	}
	if !lead {
		c.caughtUp.Store(false)
		c.sessions.cancel()
		c.sessions.cancel = nil
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.sessions.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.lead(ctx)
	}()
}

// lead runs while this node leads: it catches up with the log, writes the
// cluster ID of a new cluster, gives every registered broker a fresh
// session, then fences brokers whose session expires and moves leadership
// back to preferred replicas.
func (c *Controller) lead(ctx context.Context) {
	if err := wait(ctx, c.raft.Barrier(0)); err != nil {
		return
	}
	// Under the lock leadership takes to step down: a step-down either
	// came first (ctx is done) or clears the flag after.
	c.sessions.mu.Lock()
	c.caughtUp.Store(ctx.Err() == nil)
	c.sessions.mu.Unlock()
	if c.Image().ClusterID == "" {
		id := c.cfg.ClusterID
		if id == "" {
			u := uuid.Random()
			id = base64.RawURLEncoding.EncodeToString(u[:])
		}
		if err := c.propose(ctx, metadata.Record{Type: metadata.RecordCluster, ClusterID: id}); err != nil {
			c.log.Warn("writing the cluster ID", "err", err)
			return
		}
	}
	c.sessions.reset(c.Image(), time.Now())
	c.log.Info("this node is the active controller", "node", c.cfg.NodeID, "index", c.Image().Index)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.fenceGone(ctx)
	}()
	tick := time.NewTicker(cmpOr(c.cfg.HeartbeatInterval, 2*time.Second) / 4)
	defer tick.Stop()
	var rebalance <-chan time.Time
	if c.cfg.LeaderImbalanceInterval > 0 {
		t := time.NewTicker(c.cfg.LeaderImbalanceInterval)
		defer t.Stop()
		rebalance = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, b := range c.sessions.expired(c.Image(), now, cmpOr(c.cfg.SessionTimeout, 9*time.Second)) {
				if err := c.fence(ctx, b.ID, b.Epoch, "its session expired (broker.session.timeout.ms)"); err != nil && ctx.Err() == nil {
					c.log.Warn("fencing a broker", "broker", b.ID, "err", err)
				}
			}
		case <-rebalance:
			if err := c.rebalanceLeaders(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("moving leadership back to preferred replicas", "err", err)
			}
		}
	}
}

// Health lists what keeps this node from a healthy cluster: controller
// ports of voters that cannot be reached or that refused this node. A
// voter that failed before is dialed again to see whether it still does.
func (c *Controller) Health() []string {
	if c.stream == nil {
		return nil
	}
	var out []string
	for _, v := range c.cfg.Voters {
		if v.ID == c.cfg.NodeID {
			continue
		}
		err, known := c.peers.get(v.Addr)
		if known && err != nil && !errors.Is(err, errConflict) {
			// A node that does not lead dials other voters rarely:
			// look again rather than report an old failure.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if conn, perr := c.dialPeer(ctx, v.Addr, connProbe); perr == nil {
				conn.Close()
			}
			cancel()
			err, _ = c.peers.get(v.Addr)
		}
		if err != nil {
			out = append(out, fmt.Sprintf("voter %d at %s: %v", v.ID, v.Addr, err))
		}
	}
	for _, err := range c.peers.conflicts() {
		if s := err.Error(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if _, leader := c.raft.LeaderWithID(); leader == "" {
		out = append(out, "no active controller: a majority of controller.quorum.voters is not reachable")
	}
	sort.Strings(out)
	return out
}

// fenceGone fences, while this node leads, the brokers without a session
// connection to it whose listener refuses connections: their process is
// gone. A broker's death is otherwise seen when its session connection
// ends; one that has none here yet (the fresh sessions a new controller
// hands out cover brokers killed with the old controller, often the same
// process, and brokers killed before their first heartbeat reached this
// one) would lead its partitions for a whole session timeout. Only a
// refusal counts: a broker that does not answer at all (a partition, a
// stopped host) waits for its session to expire as before.
func (c *Controller) fenceGone(ctx context.Context) {
	tick := time.NewTicker(cmpOr(c.cfg.HeartbeatInterval, 2*time.Second) / 4)
	defer tick.Stop()
	for {
		c.probeUnbound(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probeUnbound is one pass of fenceGone.
func (c *Controller) probeUnbound(ctx context.Context) {
	for _, b := range c.sessions.unbound(c.Image(), c.cfg.NodeID) {
		if !errors.Is(dialListener(ctx, b), syscall.ECONNREFUSED) {
			continue
		}
		if err := c.fence(ctx, b.ID, b.Epoch, "its listener refuses connections (the process is gone)"); err != nil && ctx.Err() == nil {
			c.log.Warn("fencing a broker", "broker", b.ID, "err", err)
		}
	}
}

// dialListener connects to broker b's listener and hangs up: nil if a
// process listens there. The dial is a plain one, not Config.Dial: it
// asks whether a process listens, not whether this node can reach it.
func dialListener(ctx context.Context, b metadata.Broker) error {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := new(net.Dialer).DialContext(dctx, "tcp", net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	if err == nil {
		conn.Close()
	}
	return err
}

// probeVoters dials every other voter's controller port once and reports
// which answered; a configuration conflict is returned as an error.
func (c *Controller) probeVoters(ctx context.Context) (up []int32, down []string, err error) {
	up = []int32{c.cfg.NodeID}
	for _, v := range c.cfg.Voters {
		if v.ID == c.cfg.NodeID {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, perr := c.dialPeer(pctx, v.Addr, connProbe)
		cancel()
		if perr == nil {
			conn.Close()
			up = append(up, v.ID)
			continue
		}
		if errors.Is(perr, errConflict) {
			return up, down, perr
		}
		down = append(down, fmt.Sprintf("%d@%s (%v)", v.ID, v.Addr, perr))
	}
	return up, down, nil
}
