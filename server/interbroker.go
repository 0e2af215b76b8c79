package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Brokers talk to each other over the inter-broker listener
// (inter.broker.listener.name), as clients of each other: replica
// fetches authenticate like any client and need CLUSTER_ACTION on the
// cluster when there is an authorizer.

// peerLinks is how this broker reaches the other brokers: a client of
// one, logged in as this broker, and the record of failing peers. It is
// replication.Peers, for the replica fetchers, and Send's.
type peerLinks struct {
	nodeID             int32
	fetchResponseBytes int32 // replica.fetch.response.max.bytes
	auth               *interBrokerAuth
	dial               func(ctx context.Context, network, addr string) (net.Conn, error) // Config.Dial
	log                *slog.Logger
	errs               peerErrors
}

// client returns a client for the broker at addr, on which a
// fetcher sends its requests (SeedBrokers()[0]); extra options come
// last.
func (l *peerLinks) client(addr string, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID(fmt.Sprintf("tandem-broker-%d", l.nodeID)),
		// A replica fetch may carry replica.fetch.response.max.bytes.
		kgo.FetchMaxBytes(max(l.fetchResponseBytes, 1<<20)),
		kgo.BrokerMaxReadBytes(max(l.fetchResponseBytes, 1<<20) + 1<<20),
	}
	return kgo.NewClient(slices.Concat(opts, l.auth.opts(l.dial), extra)...)
}

// sendVersions are the versions Send may use: franz-go's stable ones
// with the plugins' API keys at the plugins' versions (the mirror state
// APIs): franz-go refuses to send a key it does not know, and sends a
// key it knows (94, UnregisterController to franz-go, CreateMirror to
// Tandem) at its own version otherwise.
func sendVersions(apis *apiTable) *kversion.Versions {
	v := kversion.Stable()
	for _, k := range apis.Versions() {
		if servedByPlugin(apis, k.ApiKey) { // a peer with the same plugins serves it
			v.SetMaxKeyVersion(k.ApiKey, k.MaxVersion)
		}
	}
	return v
}

// peerClients holds one client per peer broker for Send.
type peerClients struct {
	links *peerLinks // makes the clients, and hears how requests went
	apis  *apiTable  // what the broker serves: sendVersions

	mu      sync.Mutex
	closed  bool
	clients map[int32]*peerClient
}

type peerClient struct {
	addr string
	cl   *kgo.Client
}

// send is Host.Send: it sends req to broker node of img over the
// inter-broker listener, authenticated as this broker, and returns its
// response. The connection is kept per peer address for later requests;
// a peer that re-registers on another address gets a new one.
func (p *peerClients) send(ctx context.Context, img *metadata.Image, node int32, req kmsg.Request) (kmsg.Response, error) {
	br, ok := img.Brokers[node]
	if !ok {
		return nil, fmt.Errorf("broker %d is not registered: %w", node, kerr.BrokerNotAvailable)
	}
	addr := fmt.Sprintf("%s:%d", br.Host, br.Port)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("broker is closing: %w", kerr.BrokerNotAvailable)
	}
	c := p.clients[node]
	if c != nil && c.addr != addr {
		c.cl.Close()
		c = nil
	}
	if c == nil {
		cl, err := p.links.client(addr, kgo.MaxVersions(sendVersions(p.apis)))
		if err != nil {
			p.mu.Unlock()
			return nil, fmt.Errorf("client for broker %d: %w", node, err)
		}
		c = &peerClient{addr: addr, cl: cl}
		if p.clients == nil {
			p.clients = map[int32]*peerClient{}
		}
		p.clients[node] = c
	}
	p.mu.Unlock()
	resp, err := c.cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		p.links.Failed(node, addr, err)
		return nil, fmt.Errorf("%s to broker %d: %w", kmsg.NameForKey(req.Key()), node, err)
	}
	p.links.OK(node)
	return resp, nil
}

func (p *peerClients) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.clients {
		c.cl.Close()
	}
	p.clients = nil
}

// peerErrors remembers, per broker, why talking to it last failed and
// when, so that a failure is logged once (not at every retry) and shown
// in /healthz while it lasts: until a request to the broker succeeds,
// or until nothing has failed for peerWarningTTL (the followers that
// fetched from a dead leader fetch from its successor once it is back,
// and no request to it succeeds to clear the warning).
type peerErrors struct {
	mu   sync.Mutex
	last map[int32]peerError
}

type peerError struct {
	msg string
	at  time.Time // the latest failure
}

// peerWarningTTL is how long a failure is shown without another: a
// failing exchange is retried at least every 10 s (1 s for replication,
// 10 s for refused credentials).
const peerWarningTTL = 15 * time.Second

// Failed records a failed request to peer, logged unless it failed so
// last time.
func (l *peerLinks) Failed(peer int32, addr string, err error) {
	msg := err.Error()
	auth := errAuthFailure(err)
	l.errs.mu.Lock()
	if l.errs.last == nil {
		l.errs.last = map[int32]peerError{}
	}
	same := l.errs.last[peer].msg == msg
	l.errs.last[peer] = peerError{msg, time.Now()}
	l.errs.mu.Unlock()
	if same {
		return
	}
	if auth {
		l.log.Error("inter-broker authentication or authorization failed", "peer", peer, "addr", addr, "err", err)
	} else {
		l.log.Warn("inter-broker request failed", "peer", peer, "addr", addr, "err", err)
	}
}

// OK records a request to peer that succeeded.
func (l *peerLinks) OK(peer int32) {
	l.errs.mu.Lock()
	defer l.errs.mu.Unlock()
	if _, ok := l.errs.last[peer]; ok {
		delete(l.errs.last, peer)
		l.log.Info("inter-broker requests succeed again", "peer", peer)
	}
}

// Client is client without extra options (replication.Peers).
func (l *peerLinks) Client(addr string) (*kgo.Client, error) { return l.client(addr) }

// AuthFailure is errAuthFailure (replication.Peers).
func (*peerLinks) AuthFailure(err error) bool { return errAuthFailure(err) }

// health lists the brokers this one currently fails to talk to.
func (l *peerLinks) health() []string {
	l.errs.mu.Lock()
	defer l.errs.mu.Unlock()
	var out []string
	for _, id := range sortedKeys(l.errs.last) {
		e := l.errs.last[id]
		if time.Since(e.at) > peerWarningTTL {
			delete(l.errs.last, id) // its cause is gone; a new failure is logged again
			continue
		}
		out = append(out, fmt.Sprintf("broker %d: %s", id, e.msg))
	}
	return out
}

func sortedKeys[V any](m map[int32]V) []int32 {
	ks := make([]int32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return slices.Clip(ks)
}
