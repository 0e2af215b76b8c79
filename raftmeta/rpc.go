package raftmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Controller requests. Every decision method of the Controller (topics,
// configs, ACLs, mirrors, producer ids, broker registration, heartbeats,
// AlterPartition, elections, reassignments) is an op: on the node that
// leads the quorum it runs there; on any other node it is sent to the
// leader over an "rpc" connection of the controller port and its answer
// comes back, so that metadata writes reach the controller from any
// broker (Kafka's forwarding). Each request and response is one frame:
//
//	request  {"op":"CreateTopics","args":{...},"timeoutMs":30000}
//	response {"result":{...},"err":{"code":36,"message":"..."},"index":123,"notLeader":false}
//
// index is the leader's image index after the op: the forwarding node
// waits until its own image has applied it, so that a caller sees its
// write in Image() as on the leader. notLeader says the node is not (or
// no longer) the leader, and who is if it knows; the caller tries again
// there. A node that is not in the quorum yet (a broker that is not a
// voter, before its registration) finds the leader that way, asking the
// voters in turn.

type rpcRequest struct {
	Op      string          `json:"op"`
	Args    json.RawMessage `json:"args,omitempty"`
	Timeout int64           `json:"timeoutMs,omitempty"`
}

type rpcResponse struct {
	Result    json.RawMessage `json:"result,omitempty"`
	Err       *wireError      `json:"err,omitempty"`
	Index     uint64          `json:"index"`
	NotLeader bool            `json:"notLeader,omitempty"`
	// Leader is the controller port of the leader, when NotLeader and
	// the node knows it.
	Leader string `json:"leader,omitempty"`
}

// wireError is an error as it crosses nodes: its Kafka code and text.
type wireError struct {
	Code    int16  `json:"code"`
	Message string `json:"message"`
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	var ke *kerr.Error
	code := int16(0)
	if errors.As(err, &ke) {
		code = ke.Code
	} else if errors.Is(err, context.DeadlineExceeded) {
		code = kerr.RequestTimedOut.Code
	}
	return &wireError{Code: code, Message: err.Error()}
}

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	ke := kerr.ErrorForCode(w.Code)
	if ke == nil {
		return errors.New(w.Message)
	}
	msg := strings.TrimSuffix(w.Message, ": "+ke.Error())
	if msg == ke.Error() || msg == "" {
		return ke
	}
	return fmt.Errorf("%s: %w", msg, ke)
}

// errList is a list of per-item errors (nil for success) that crosses
// nodes.
type errList []error

func (l errList) MarshalJSON() ([]byte, error) {
	w := make([]*wireError, len(l))
	for i, err := range l {
		w[i] = toWire(err)
	}
	return json.Marshal(w)
}

func (l *errList) UnmarshalJSON(b []byte) error {
	var w []*wireError
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*l = make(errList, len(w))
	for i, e := range w {
		(*l)[i] = e.err()
	}
	return nil
}

// call runs op on the leader of the quorum and returns its result: the
// caller found that this node does not lead (remote). If this node leads
// by the time the call is made, run runs here instead.
func call[R any](c *Controller, ctx context.Context, op string, args any) (R, error) {
	var zero R
	if ctx.Done() == nil { // every forwarded call has a deadline
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return zero, fmt.Errorf("raftmeta: %s: %w", op, err)
	}
	hint, tries := "", 0
	for ; ; tries++ {
		if c.closed.Load() {
			return zero, fmt.Errorf("raftmeta: %s: node %d is shutting down: %w", op, c.cfg.NodeID, kerr.NotController)
		}
		addr, id := c.raft.LeaderWithID()
		if id == "" && !c.isVoter(c.cfg.NodeID) {
			// Not in the quorum (yet): ask the voters.
			addr, id = raft.ServerAddress(hint), "?"
			if hint == "" {
				addr = raft.ServerAddress(c.cfg.Voters[tries%len(c.cfg.Voters)].Addr)
			}
		}
		switch {
		case id == "":
			// No leader known: a majority of the voters is down or an
			// election is running. Metadata writes wait, then fail
			// with a retriable error.
		case nodeID(id) == c.cfg.NodeID:
			if c.IsLeader() {
				res, err := c.runOp(ctx, op, raw)
				r, _ := res.(R)
				return r, err
			}
		default:
			resp, err := c.rpcs.call(ctx, string(addr), rpcRequest{Op: op, Args: raw})
			hint = resp.Leader
			if err == nil && !resp.NotLeader {
				var r R
				if len(resp.Result) > 0 {
					if err := json.Unmarshal(resp.Result, &r); err != nil {
						return zero, fmt.Errorf("raftmeta: %s: undecodable answer: %w", op, err)
					}
				}
				if resp.Err != nil {
					// A refused op wrote nothing worth waiting for (and a
					// node not in the quorum yet would wait in vain).
					return r, resp.Err.err()
				}
				return r, c.awaitIndex(ctx, resp.Index)
			}
			if err != nil && ctx.Err() == nil {
				c.log.Debug("forwarding to the controller failed; retrying", "op", op, "controller", id, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return zero, fmt.Errorf("raftmeta: %s: no active controller answered: %v: %w", op, ctx.Err(), kerr.NotController)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// awaitIndex waits until this node's image reflects the raft index.
func (c *Controller) awaitIndex(ctx context.Context, index uint64) error {
	for {
		img, ch := c.Watch()
		if img.Index >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("raftmeta: waiting for metadata index %d (have %d): %w", index, img.Index, kerr.RequestTimedOut)
		case <-c.stop:
			return fmt.Errorf("raftmeta: closed: %w", kerr.NotController)
		}
	}
}

// sessionResult is a result that binds the connection it was answered on
// to a broker's session: when the connection ends, the broker is gone.
type sessionResult interface {
	session() (id int32, epoch int64)
}

// serveRPC serves one node's requests on conn until it closes.
func (c *Controller) serveRPC(conn net.Conn, from int32) {
	// A peer may ask before this node's raft runs (its port opens first,
	// and the nodes of a cluster start together): it waits.
	select {
	case <-c.raftStarted:
	case <-c.stream.done:
		conn.Close()
		return
	}
	c.rpcConns.Store(conn, struct{}{})
	defer c.rpcConns.Delete(conn)
	defer conn.Close()
	var boundID int32 = -1
	var boundEpoch int64
	defer func() {
		// A broker's session connection closed: its process ended (kill
		// -9 closes sockets at once), or the broker gave up on a slow
		// heartbeat and dials again. Fence it now rather than after the
		// session timeout if its listener is gone too (or it has none),
		// unless it has registered again meanwhile (another epoch). A
		// listener that still accepts is a live process: its session
		// decides.
		if boundID < 0 {
			return
		}
		c.sessions.bind(boundID, boundEpoch, false)
		if c.closed.Load() || !c.IsLeader() {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if b, ok := c.Image().Brokers[boundID]; ok && b.Host != "" && dialListener(ctx, b) == nil {
				return
			}
			if err := c.fence(ctx, boundID, boundEpoch, "its connection to the controller closed"); err != nil && !c.closed.Load() {
				c.log.Warn("fencing a broker whose connection closed", "broker", boundID, "err", err)
			}
		}()
	}()
	for {
		var req rpcRequest
		if err := readFrame(conn, &req); err != nil {
			return
		}
		resp := c.serveOp(req)
		if err := writeFrame(conn, resp.rpcResponse); err != nil {
			return
		}
		if resp.bind != nil {
			id, epoch := resp.bind.session()
			if boundID >= 0 && (id != boundID || epoch != boundEpoch) {
				c.sessions.bind(boundID, boundEpoch, false)
			}
			boundID, boundEpoch = id, epoch
			c.sessions.bind(id, epoch, true)
		}
	}
}

type servedOp struct {
	rpcResponse
	bind sessionResult
}

func (c *Controller) serveOp(req rpcRequest) (out servedOp) {
	if !c.IsLeader() {
		out.NotLeader = true
		addr, _ := c.raft.LeaderWithID()
		out.Leader = string(addr)
		return out
	}
	timeout := time.Duration(req.Timeout) * time.Millisecond
	if timeout <= 0 || timeout > time.Minute {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := c.runOp(ctx, req.Op, req.Args)
	if errors.Is(err, kerr.NotController) && !c.IsLeader() {
		out.NotLeader = true
		return out
	}
	out.Err = toWire(err)
	if res != nil {
		out.Result, _ = json.Marshal(res)
		if s, ok := res.(sessionResult); ok && err == nil {
			out.bind = s
		}
	}
	out.Index = c.Image().Index
	return out
}

// rpcClient keeps idle connections to controller ports for forwarded
// calls: one call at a time per connection.
type rpcClient struct {
	c    *Controller
	mu   sync.Mutex
	idle map[string][]net.Conn
	done bool
}

const maxIdleRPC = 4

func (p *rpcClient) call(ctx context.Context, addr string, req rpcRequest) (rpcResponse, error) {
	var resp rpcResponse
	p.mu.Lock()
	var conn net.Conn
	if n := len(p.idle[addr]); n > 0 {
		conn = p.idle[addr][n-1]
		p.idle[addr] = p.idle[addr][:n-1]
	}
	p.mu.Unlock()
	if conn == nil {
		var err error
		if conn, err = p.c.dialPeer(ctx, addr, connRPC); err != nil {
			return resp, err
		}
	}
	resp, err := roundTrip(ctx, conn, req)
	if err != nil {
		conn.Close()
		return resp, err
	}
	p.mu.Lock()
	if !p.done && len(p.idle[addr]) < maxIdleRPC {
		if p.idle == nil {
			p.idle = map[string][]net.Conn{}
		}
		p.idle[addr] = append(p.idle[addr], conn)
		conn = nil
	}
	p.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	return resp, nil
}

func (p *rpcClient) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	for _, cs := range p.idle {
		for _, c := range cs {
			c.Close()
		}
	}
	p.idle = nil
}

// roundTrip sends one request on conn and reads its response; ctx
// bounds both (a canceled context closes the connection).
func roundTrip(ctx context.Context, conn net.Conn, req rpcRequest) (rpcResponse, error) {
	var resp rpcResponse
	if d, ok := ctx.Deadline(); ok {
		req.Timeout = max(time.Until(d).Milliseconds(), 1)
		conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	err := writeFrame(conn, req)
	if err == nil {
		err = readFrame(conn, &resp)
	}
	if !stop() && err == nil {
		err = ctx.Err()
	}
	conn.SetDeadline(time.Time{})
	return resp, err
}

// sessionConn is a broker's session connection to the controller.
type sessionConn struct {
	addr string
	conn net.Conn
}

func (s *sessionConn) call(ctx context.Context, req rpcRequest) (rpcResponse, error) {
	return roundTrip(ctx, s.conn, req)
}

func (s *sessionConn) close() { s.conn.Close() }
