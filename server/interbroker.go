package server

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Brokers talk to each other over the inter-broker listener
// (inter.broker.listener.name), as clients of each other: replica
// fetches authenticate like any client and need CLUSTER_ACTION on the
// cluster when there is an authorizer.

// interBrokerClient returns a client for the broker at addr, on which a
// fetcher sends its requests (SeedBrokers()[0]); extra options come
// last.
func (b *Broker) interBrokerClient(addr string, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID(fmt.Sprintf("tandem-broker-%d", b.cfg.NodeID)),
		// A replica fetch may carry replica.fetch.response.max.bytes.
		kgo.FetchMaxBytes(max(b.props.Cluster.FetchResponseBytes, 1<<20)),
		kgo.BrokerMaxReadBytes(max(b.props.Cluster.FetchResponseBytes, 1<<20) + 1<<20),
	}
	return kgo.NewClient(slices.Concat(opts, b.ibAuth.opts(b.cfg.Dial), extra)...)
}

// sendVersions are the versions Send may use: franz-go's stable ones
// with the plugins' API keys at the plugins' versions (the mirror state
// APIs): franz-go refuses to send a key it does not know, and sends a
// key it knows (94, UnregisterController to franz-go, CreateMirror to
// Tandem) at its own version otherwise.
func (b *Broker) sendVersions() *kversion.Versions {
	v := kversion.Stable()
	for _, k := range b.apis.Versions() {
		if servedByPlugin(b.apis, k.ApiKey) { // a peer with the same plugins serves it
			v.SetMaxKeyVersion(k.ApiKey, k.MaxVersion)
		}
	}
	return v
}

// peerClients holds one client per peer broker for Send.
type peerClients struct {
	mu      sync.Mutex
	closed  bool
	clients map[int32]*peerClient
}

type peerClient struct {
	addr string
	cl   *kgo.Client
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

func (b *Broker) interBrokerFailed(peer int32, addr string, err error) {
	msg := err.Error()
	auth := errAuthFailure(err)
	b.peerErrs.mu.Lock()
	if b.peerErrs.last == nil {
		b.peerErrs.last = map[int32]peerError{}
	}
	same := b.peerErrs.last[peer].msg == msg
	b.peerErrs.last[peer] = peerError{msg, time.Now()}
	b.peerErrs.mu.Unlock()
	if same {
		return
	}
	if auth {
		b.log.Error("inter-broker authentication or authorization failed", "peer", peer, "addr", addr, "err", err)
	} else {
		b.log.Warn("inter-broker request failed", "peer", peer, "addr", addr, "err", err)
	}
}

func (b *Broker) interBrokerOK(peer int32) {
	b.peerErrs.mu.Lock()
	defer b.peerErrs.mu.Unlock()
	if _, ok := b.peerErrs.last[peer]; ok {
		delete(b.peerErrs.last, peer)
		b.log.Info("inter-broker requests succeed again", "peer", peer)
	}
}

// replicationPeers is replication.Peers: the broker's inter-broker
// client and its record of failing peers, for the replica fetchers.
type replicationPeers struct{ b *Broker }

func (p replicationPeers) Client(addr string) (*kgo.Client, error) {
	return p.b.interBrokerClient(addr)
}
func (p replicationPeers) OK(peer int32) { p.b.interBrokerOK(peer) }
func (p replicationPeers) Failed(peer int32, addr string, err error) {
	p.b.interBrokerFailed(peer, addr, err)
}
func (replicationPeers) AuthFailure(err error) bool { return errAuthFailure(err) }

// peerHealth lists the brokers this one currently fails to talk to.
func (b *Broker) peerHealth() []string {
	b.peerErrs.mu.Lock()
	defer b.peerErrs.mu.Unlock()
	var out []string
	for _, id := range sortedKeys(b.peerErrs.last) {
		e := b.peerErrs.last[id]
		if time.Since(e.at) > peerWarningTTL {
			delete(b.peerErrs.last, id) // its cause is gone; a new failure is logged again
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
