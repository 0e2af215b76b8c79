package raftmeta

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// freeAddrs reserves n loopback addresses for controller ports.
// long is tandemtest.Long, which this package's tests cannot import (it
// imports raftmeta): the quick tier (go test -short) skips the test, for
// it waits out sessions and elections of a three-node quorum for
// seconds; make test runs it.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("full tier only (make test); the quick tier, go test -short, skips it")
	}
}

func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		ln.Close()
	}
	return out
}

// clusterNode is one node of a test quorum on its own in-memory Pebble.
type clusterNode struct {
	t   *testing.T
	cfg Config
	db  *pebble.DB
	c   *Controller
	s   *Session
	// ln is the node's broker listener, as a real broker has one: the
	// controller probes it before it fences a broker whose session
	// connection closed (a heartbeat that timed out under load), and
	// fences at once only when nothing listens. It accepts and closes.
	ln net.Listener
}

func testVoters(addrs []string) []Voter {
	vs := make([]Voter, len(addrs))
	for i, a := range addrs {
		vs[i] = Voter{ID: int32(i + 1), Addr: a}
	}
	return vs
}

func openNode(t *testing.T, id int32, voters []Voter, mod func(*Config)) *clusterNode {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	n := &clusterNode{t: t, db: db, cfg: Config{
		NodeID: id, Dir: t.TempDir(), DB: db, Voters: voters,
		SessionTimeout: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}}
	if mod != nil {
		mod(&n.cfg)
	}
	n.c, err = Open(ctxT(t), n.cfg)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	return n
}

func (n *clusterNode) register(ctx context.Context) error {
	if n.ln == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		n.ln = ln
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	var err error
	n.s, err = n.c.Register(ctx, metadata.Broker{ID: n.cfg.NodeID, Host: "127.0.0.1", Port: int32(n.ln.Addr().(*net.TCPAddr).Port), Incarnation: uuid.Random()})
	return err
}

func (n *clusterNode) close() {
	if n.ln != nil {
		n.ln.Close() // the process is gone: nothing listens
		n.ln = nil
	}
	if n.c == nil {
		return
	}
	if n.s != nil {
		n.s.Close()
	}
	if err := n.c.Close(); err != nil {
		n.t.Error(err)
	}
	n.db.Close()
	n.c = nil
}

// waitImage waits until cond holds for c's image.
func waitImage(t *testing.T, c *Controller, what string, cond func(*metadata.Image) bool) *metadata.Image {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond) // leadership changes publish too
	defer tick.Stop()
	for {
		img, ch := c.Watch()
		if cond(img) {
			return img
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; image %+v", what, c.Image())
		}
	}
}

func startCluster(t *testing.T, n int) []*clusterNode {
	t.Helper()
	voters := testVoters(freeAddrs(t, n))
	nodes := make([]*clusterNode, n)
	for i := range nodes {
		nodes[i] = openNode(t, int32(i+1), voters, nil)
	}
	errs := make(chan error, n)
	for _, nd := range nodes {
		go func() { errs <- nd.register(ctxT(t)) }()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, nd := range nodes {
		waitImage(t, nd.c, "every broker unfenced", func(img *metadata.Image) bool {
			for _, v := range voters {
				if b, ok := img.Brokers[v.ID]; !ok || b.Fenced {
					return false
				}
			}
			return img.ControllerID >= 0
		})
	}
	return nodes
}

// TestClusterQuorum forms a three-voter quorum, writes through a node that
// does not lead (forwarding), and checks that every node has the same
// image with replicas on every broker.
func TestClusterQuorum(t *testing.T) {
	nodes := startCluster(t, 3)
	var follower *clusterNode
	for _, n := range nodes {
		if !n.c.IsLeader() {
			follower = n
		}
	}
	mustCreate(t, follower.c, metadata.TopicSpec{Name: "replicated", Partitions: 3, ReplicationFactor: 3})
	img := follower.c.Image() // a forwarded write is applied locally before it returns
	top := img.Topics["replicated"]
	if top == nil {
		t.Fatalf("the forwarded CreateTopics is not in the forwarding node's image")
	}
	leaders := map[int32]bool{}
	for i, p := range top.Partitions {
		if len(p.Replicas) != 3 || len(p.ISR) != 3 || p.Leader != p.Replicas[0] {
			t.Fatalf("partition %d: %+v", i, p)
		}
		leaders[p.Leader] = true
	}
	if len(leaders) != 3 {
		t.Fatalf("leaders %v: not spread over the brokers", leaders)
	}
	for _, n := range nodes {
		got := waitImage(t, n.c, "the topic", func(img *metadata.Image) bool { return img.Topics["replicated"] != nil })
		if got.Topics["replicated"].ID != top.ID || got.ClusterID != img.ClusterID {
			t.Fatalf("node %d has another image", n.cfg.NodeID)
		}
	}
	_, err := follower.c.AllocateProducerIDs(ctxT(t), 10)
	if err != nil {
		t.Fatalf("forwarded AllocateProducerIDs: %v", err)
	}
	if errs := follower.c.CreateTopics(ctxT(t), []metadata.TopicSpec{{Name: "replicated", Partitions: 1, ReplicationFactor: 1}}, false); !errors.Is(errs[0], kerr.TopicAlreadyExists) {
		t.Fatalf("a forwarded error comes back with its code: %v", errs[0])
	}
}

// TestClusterFencesAndElects closes a broker's session abruptly: the
// controller fences it at once, moves its leaderships to the other ISR
// members with a new leader epoch and takes it out of the ISRs; when it
// registers again it is unfenced and leads again where it is the only
// choice.
func TestClusterFencesAndElects(t *testing.T) {
	long(t)
	nodes := startCluster(t, 3)
	mustCreate(t, nodes[0].c, metadata.TopicSpec{Name: "t", Partitions: 3, ReplicationFactor: 3})
	var victim *clusterNode
	for _, n := range nodes {
		if !n.c.IsLeader() {
			victim = n
			break
		}
	}
	id := victim.cfg.NodeID
	before := waitImage(t, victim.c, "the topic", func(img *metadata.Image) bool { return img.Topics["t"] != nil }).Topics["t"]
	victim.s.Close() // as kill -9 does: the session connection ends
	victim.s = nil
	other := nodes[0]
	if other == victim {
		other = nodes[1]
	}
	img := waitImage(t, other.c, "the broker fenced", func(img *metadata.Image) bool { return img.Brokers[id].Fenced })
	for i, p := range img.Topics["t"].Partitions {
		old := before.Partitions[i]
		if p.Leader == id || p.Leader < 0 {
			t.Fatalf("partition %d still led by %d: %+v", i, p.Leader, p)
		}
		if old.Leader == id && p.LeaderEpoch != old.LeaderEpoch+1 {
			t.Fatalf("partition %d: leader epoch %d after %d", i, p.LeaderEpoch, old.LeaderEpoch)
		}
		if slices.Contains(p.ISR, id) {
			t.Fatalf("partition %d: fenced broker %d still in ISR %v", i, id, p.ISR)
		}
	}
	if err := victim.register(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitImage(t, other.c, "the broker unfenced", func(img *metadata.Image) bool { return !img.Brokers[id].Fenced })
}

// TestClusterSessionConnClosedListenerUp: a broker's session connection
// closes while its listener still accepts (a heartbeat that timed out
// under load; the broker dials again). The process is alive, so the
// controller leaves it to the session: not fenced at once, fenced when
// the session expires without heartbeats.
func TestClusterSessionConnClosedListenerUp(t *testing.T) {
	long(t)
	nodes := startCluster(t, 3)
	var victim *clusterNode
	for _, n := range nodes {
		if !n.c.IsLeader() {
			victim = n
			break
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	id := victim.cfg.NodeID
	victim.s.Close()
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	if victim.s, err = victim.c.Register(ctxT(t), metadata.Broker{ID: id, Host: "127.0.0.1", Port: port, Incarnation: uuid.Random()}); err != nil {
		t.Fatal(err)
	}
	other := nodes[0]
	if other == victim {
		other = nodes[1]
	}
	epoch := waitImage(t, other.c, "the broker unfenced", func(img *metadata.Image) bool { return !img.Brokers[id].Fenced }).Brokers[id].Epoch
	closed := time.Now()
	victim.s.Close()
	victim.s = nil
	img := waitImage(t, other.c, "the broker fenced", func(img *metadata.Image) bool { return img.Brokers[id].Fenced })
	if b := img.Brokers[id]; b.Epoch != epoch {
		t.Fatalf("broker %d has epoch %d, want %d", id, b.Epoch, epoch)
	}
	// The session timeout is 2 s: a fence at once comes within
	// milliseconds.
	if waited := time.Since(closed); waited < time.Second {
		t.Fatalf("broker %d with a live listener was fenced %v after its session connection closed, before its session expired", id, waited)
	}
}

// TestClusterReregisterAcrossControllerChange: a broker whose process
// stopped without a controlled shutdown and started again (its listener
// is back, so nothing fences it) is refused with
// DUPLICATE_BROKER_REGISTRATION until its previous incarnation's session
// expires. A controller elected meanwhile hands every broker a fresh
// session, so the refusals last longer than one session timeout from the
// first; the broker waits for the session of the controller refusing it
// and registers, rather than giving up as if another running node had
// its ID. tandem cluster restarting a whole cluster, whose quorum may
// elect twice, failed so.
func TestClusterReregisterAcrossControllerChange(t *testing.T) {
	long(t)
	nodes := startCluster(t, 3)
	var leader, victim *clusterNode
	for _, n := range nodes {
		if n.c.IsLeader() {
			leader = n
		} else if victim == nil {
			victim = n
		}
	}
	if leader == nil {
		t.Fatal("no leader")
	}
	id := victim.cfg.NodeID
	term := victim.c.raft.CurrentTerm()
	victim.s.Close() // no controlled shutdown; victim.ln stays up, as the new process's
	victim.s = nil
	// Three quarters into the session, the leadership moves: the new
	// controller's session for the old incarnation runs a whole timeout
	// from then.
	timeout := victim.cfg.SessionTimeout
	moved := make(chan error, 1)
	go func() {
		time.Sleep(timeout * 3 / 4)
		moved <- leader.c.raft.LeadershipTransfer().Error()
	}()
	inc := uuid.Random()
	start := time.Now()
	s, err := victim.c.Register(ctxT(t), metadata.Broker{ID: id, Host: "127.0.0.1", Port: int32(victim.ln.Addr().(*net.TCPAddr).Port), Incarnation: inc})
	if err != nil {
		t.Fatalf("re-registering broker %d after %v (session timeout %v, leadership moved: %v): %v", id, time.Since(start).Round(time.Millisecond), timeout, <-moved, err)
	}
	victim.s = s
	if err := <-moved; err != nil {
		t.Fatalf("moving the leadership: %v", err)
	}
	if victim.c.raft.CurrentTerm() == term {
		t.Fatal("the term did not change: the test did not elect a controller while the broker was refused")
	}
	waitImage(t, victim.c, "the new incarnation unfenced", func(img *metadata.Image) bool {
		b := img.Brokers[id]
		return b.Incarnation == inc && b.Epoch == s.Epoch() && !b.Fenced
	})
}

// TestClusterRefusesMisconfiguredNodes: a node started with another
// voter list, a second broker with a running broker's node ID, and a node
// of another cluster are refused at once, naming the conflict, and the
// cluster's metadata is untouched.
func TestClusterRefusesMisconfiguredNodes(t *testing.T) {
	long(t)
	nodes := startCluster(t, 3)
	voters := nodes[0].cfg.Voters

	// Another voter list: node 4 thinks the quorum is 1, 2 and itself.
	other := append(append([]Voter(nil), voters[:2]...), Voter{ID: 4, Addr: freeAddrs(t, 1)[0]})
	n4 := openNode(t, 4, other, nil)
	err := n4.register(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "controller.quorum.voters") {
		t.Fatalf("a node with another voter list: %v", err)
	}

	// A second broker-only node 5 while the first runs.
	n5 := openNode(t, 5, voters, func(c *Config) { c.ListenAddr = "127.0.0.1:0" })
	if err := n5.register(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	n5b := openNode(t, 5, voters, func(c *Config) { c.ListenAddr = "127.0.0.1:0" })
	err = n5b.register(ctxT(t))
	if !errors.Is(err, kerr.DuplicateBrokerRegistration) {
		t.Fatalf("a second node 5: %v", err)
	}

	// A node whose data dir belongs to another cluster.
	n6 := openNode(t, 6, voters, func(c *Config) { c.ListenAddr = "127.0.0.1:0"; c.ClusterID = "another-cluster" })
	err = n6.register(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "another-cluster") {
		t.Fatalf("a node of another cluster: %v", err)
	}
	img := nodes[0].c.Image()
	if _, ok := img.Brokers[6]; ok {
		t.Fatal("the node of another cluster was registered")
	}
	if _, ok := img.Brokers[4]; ok {
		t.Fatal("the node with another voter list was registered")
	}
}

// TestRPCBeforeRaftStarts: a node's controller port opens before its
// raft starts (raft's transport is that port), and a peer may ask it
// something in between, as the brokers of a cluster whose nodes start
// together do. The request waits until raft runs and is answered then;
// it crashed the node (a nil raft) before.
func TestRPCBeforeRaftStarts(t *testing.T) {
	addrs := freeAddrs(t, 2)
	voters := testVoters(addrs)
	peer := openNode(t, 2, voters, nil)
	asked := make(chan error, 1)
	openNode(t, 1, voters, func(cfg *Config) {
		cfg.beforeRaft = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := peer.c.rpcs.call(ctx, addrs[0], rpcRequest{Op: "catchUp"})
			asked <- err
		}
	})
	// No answer: the call ends at its deadline, as a deadline or as the
	// connection it closed then.
	if err := <-asked; !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a request to a node whose raft has not started: %v; want no answer until it has", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := peer.c.rpcs.call(ctx, addrs[0], rpcRequest{Op: "catchUp"}); err != nil {
		t.Fatalf("once raft runs: %v", err)
	}
}
