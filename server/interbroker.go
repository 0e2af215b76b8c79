package server

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Brokers talk to each other over the inter-broker listener
// (inter.broker.listener.name), as clients of each other: replica
// fetches authenticate like any client and need CLUSTER_ACTION on the
// cluster when there is an authorizer.

// interBrokerClient returns a client for the broker at addr, on which a
// fetcher sends its requests (SeedBrokers()[0]).
func (b *Broker) interBrokerClient(addr string) (*kgo.Client, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID(fmt.Sprintf("tandem-broker-%d", b.cfg.NodeID)),
		// A replica fetch may carry replica.fetch.response.max.bytes.
		kgo.FetchMaxBytes(max(b.props.Cluster.FetchResponseBytes, 1<<20)),
		kgo.BrokerMaxReadBytes(max(b.props.Cluster.FetchResponseBytes, 1<<20) + 1<<20),
	}
	if b.cfg.Dial != nil {
		opts = append(opts, kgo.Dialer(b.cfg.Dial))
	}
	sec, err := b.interBrokerSecurity()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(opts, sec...)...)
}

// peerErrors remembers, per broker, why talking to it last failed, so
// that a failure is logged once (not at every retry) and shown in
// /healthz until it recovers.
type peerErrors struct {
	mu   sync.Mutex
	last map[int32]string
}

func (b *Broker) interBrokerFailed(peer int32, addr string, err error) {
	msg := err.Error()
	auth := errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.IllegalSaslState) || errors.Is(err, kerr.UnsupportedSaslMechanism)
	b.peerErrs.mu.Lock()
	if b.peerErrs.last == nil {
		b.peerErrs.last = map[int32]string{}
	}
	same := b.peerErrs.last[peer] == msg
	b.peerErrs.last[peer] = msg
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

// peerHealth lists the brokers this one currently fails to talk to.
func (b *Broker) peerHealth() []string {
	b.peerErrs.mu.Lock()
	defer b.peerErrs.mu.Unlock()
	var out []string
	for _, id := range sortedKeys(b.peerErrs.last) {
		out = append(out, fmt.Sprintf("broker %d: %s", id, b.peerErrs.last[id]))
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

// interBrokerSecurity returns the client options that authenticate this
// broker to the others (step by step: plaintext for now).
func (b *Broker) interBrokerSecurity() ([]kgo.Opt, error) { return nil, nil }
