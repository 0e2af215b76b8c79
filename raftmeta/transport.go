package raftmeta

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The controller port. Every node of a cluster listens on one: a voter on
// its controller.quorum.voters entry, a broker that is not a voter on an
// address of its own that it registers. The port carries two things, as
// Kafka's controller listener does: the metadata quorum (hashicorp/raft's
// protocol) and the controller's requests (rpc.go). Every connection
// starts with a handshake, one frame each way:
//
//	frame  = length(4, big endian) JSON
//	hello  {"kind":"raft"|"rpc"|"probe","node":2,"voters":"1@h:p,...","cluster":"..."}
//	answer {"node":1,"cluster":"...","error":"..."}
//
// The acceptor refuses a dialer started with other controller.quorum.voters
// or belonging to another cluster, and the dialer refuses an acceptor that
// is not the node it dialed: the conflict is named in the error and the
// connection closes before a raft message or a metadata write crosses it,
// so a misconfigured node never touches the cluster's metadata.

const (
	connRaft  = "raft"
	connRPC   = "rpc"
	connProbe = "probe"

	handshakeTimeout = 10 * time.Second
	maxFrame         = 64 << 20 // a metadata request or response
)

type hello struct {
	Kind    string `json:"kind"`
	Node    int32  `json:"node"`
	Voters  string `json:"voters"`
	Cluster string `json:"cluster,omitempty"`
}

type answer struct {
	Node    int32  `json:"node"`
	Cluster string `json:"cluster,omitempty"`
	Error   string `json:"error,omitempty"`
}

func writeFrame(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(data)), uint32(len(data)))
	_, err = w.Write(append(buf, data...))
	return err
}

func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", size, maxFrame)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// errConflict marks a handshake refused for a configuration conflict,
// which waiting will not resolve.
var errConflict = errors.New("configuration conflict")

// peers remembers, per address, the last outcome of reaching it, for the
// messages of a node waiting for its quorum and for /healthz. Conflicts
// are logged once per peer and reason.
type peers struct {
	mu     sync.Mutex
	last   map[string]error
	logged map[string]string
}

// set records the outcome of reaching addr; first is true when it
// differs from the last one logged (an error, or the recovery from one).
func (p *peers) set(addr string, err error) (first bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last, p.logged = map[string]error{}, map[string]string{}
	}
	p.last[addr] = err
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if p.logged[addr] == msg {
		return false
	}
	p.logged[addr] = msg
	return true
}

func (p *peers) get(addr string) (err error, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	err, known = p.last[addr]
	return err, known
}

// conflicts returns the peers refused for a configuration conflict.
func (p *peers) conflicts() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []error
	for _, err := range p.last {
		if errors.Is(err, errConflict) {
			out = append(out, err)
		}
	}
	return out
}

// streamLayer is the controller port seen by hashicorp/raft: Accept
// returns the raft connections only, after their handshake; the other
// kinds are served by the controller.
type streamLayer struct {
	c     *Controller
	ln    net.Listener
	addr  net.Addr // advertised
	raftc chan net.Conn
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func newStreamLayer(c *Controller, ln net.Listener, advertise string) (*streamLayer, error) {
	addr, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("controller address %q: %w", advertise, err)
	}
	s := &streamLayer{c: c, ln: ln, addr: addr, raftc: make(chan net.Conn), done: make(chan struct{})}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func (s *streamLayer) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.c.log.Error("controller port: accept failed", "err", err)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serve(conn)
		}()
	}
}

// serve runs the acceptor's side of the handshake and hands the
// connection to raft or to the controller.
func (s *streamLayer) serve(conn net.Conn) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	var h hello
	if err := readFrame(conn, &h); err != nil {
		conn.Close()
		return
	}
	a := answer{Node: s.c.cfg.NodeID, Cluster: s.c.clusterID()}
	if err := s.c.checkPeer(h); err != nil {
		a.Error = err.Error()
		if s.c.peers.set(conn.RemoteAddr().String()+" (node "+fmt.Sprint(h.Node)+")", fmt.Errorf("%w: %v", errConflict, err)) {
			s.c.log.Error("refused a node started with another configuration", "node", h.Node, "remote", conn.RemoteAddr().String(), "reason", err)
		}
	}
	if err := writeFrame(conn, a); err != nil || a.Error != "" {
		conn.Close()
		return
	}
	conn.SetDeadline(time.Time{})
	switch h.Kind {
	case connRaft:
		select {
		case s.raftc <- conn:
		case <-s.done:
			conn.Close()
		}
	case connRPC:
		s.c.serveRPC(conn, h.Node)
	default:
		conn.Close()
	}
}

// Accept returns the next raft connection.
func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.raftc:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *streamLayer) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.ln.Close()
	})
	return nil
}

// wait returns once every connection handler ended; the controller
// closes its RPC connections first.
func (s *streamLayer) wait() { s.wg.Wait() }

func (s *streamLayer) Addr() net.Addr { return s.addr }

// Dial opens a raft connection.
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.c.dialPeer(ctx, string(addr), connRaft)
}

// dialPeer connects to a controller port and runs the dialer's side of
// the handshake. The outcome is remembered per address (peers).
func (c *Controller) dialPeer(ctx context.Context, addr, kind string) (net.Conn, error) {
	conn, err := c.dial(ctx, addr)
	if err != nil {
		if c.peers.set(addr, err) {
			c.log.Info("controller port unreachable", "addr", addr, "err", err)
		}
		return nil, err
	}
	err = func() error {
		// A peer that accepts but never answers (a stopped process: the
		// kernel still completes the TCP handshake) holds the dialer no
		// longer than ctx allows.
		deadline := time.Now().Add(handshakeTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		conn.SetDeadline(deadline)
		if err := writeFrame(conn, hello{Kind: kind, Node: c.cfg.NodeID, Voters: c.votersString(), Cluster: c.clusterID()}); err != nil {
			return err
		}
		var a answer
		if err := readFrame(conn, &a); err != nil {
			return err
		}
		if a.Error != "" {
			return fmt.Errorf("%w: node %d at %s refused this node: %s", errConflict, a.Node, addr, a.Error)
		}
		if want, ok := c.voterAt(addr); ok && want != a.Node {
			return fmt.Errorf("%w: controller.quorum.voters names node %d at %s, but node %d answers there", errConflict, want, addr, a.Node)
		}
		if mine := c.clusterID(); mine != "" && a.Cluster != "" && mine != a.Cluster {
			return fmt.Errorf("%w: node %d at %s belongs to cluster %s, this node to cluster %s", errConflict, a.Node, addr, a.Cluster, mine)
		}
		conn.SetDeadline(time.Time{})
		return nil
	}()
	if c.peers.set(addr, err) {
		switch {
		case errors.Is(err, errConflict):
			c.log.Error("a controller.quorum.voters peer has another configuration", "addr", addr, "err", err)
		case err == nil:
			c.log.Info("controller port reachable", "addr", addr)
		default:
			c.log.Info("controller port unreachable", "addr", addr, "err", err)
		}
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func (c *Controller) dial(ctx context.Context, addr string) (net.Conn, error) {
	dial := c.cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil || c.cfg.ClientTLS == nil {
		return conn, err
	}
	cfg := c.cfg.ClientTLS.Clone()
	if cfg.ServerName, _, err = net.SplitHostPort(addr); err != nil {
		conn.Close()
		return nil, err
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS handshake with the controller port at %s: %w", addr, err)
	}
	return tc, nil
}

// checkPeer is the acceptor's check of a dialer's hello.
func (c *Controller) checkPeer(h hello) error {
	if mine := c.votersString(); h.Voters != mine {
		return fmt.Errorf("node %d was started with controller.quorum.voters=%s, node %d with %s", h.Node, h.Voters, c.cfg.NodeID, mine)
	}
	if mine := c.clusterID(); mine != "" && h.Cluster != "" && h.Cluster != mine {
		return fmt.Errorf("node %d belongs to cluster %s (its meta.properties), node %d to cluster %s", h.Node, h.Cluster, c.cfg.NodeID, mine)
	}
	if h.Node == c.cfg.NodeID {
		return fmt.Errorf("node %d dialed a node with its own node ID %d: two nodes have the same node.id", h.Node, h.Node)
	}
	return nil
}
