package server

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/datadir"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// A broker joins a cluster when controller.quorum.voters is set: it
// registers with the active controller (waiting for a majority of the
// voters, and saying which it waits for), is unfenced once it has caught
// up with the metadata, heartbeats, and on Close moves its leaderships
// away before it stops (controlled shutdown).

// membership is this broker's part in its cluster: the metadata quorum's
// configuration (metaConfig), the registration with the controller
// (join) and the move of its leaderships before it stops
// (controlledShutdown). It holds what these take of the broker.
type membership struct {
	nodeID         int32
	dataDir        string
	props          ClusterProps
	limits         raftmeta.PartitionLimits // of the metadata quorum
	controllerAddr string                   // where the controller port binds
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	auth           *interBrokerAuth // the controller port's TLS is the inter-broker listener's
	log            *slog.Logger
	session        *raftmeta.Session // registration and heartbeats; set by join, nil standalone
	shutdownOnce   sync.Once
}

// metaConfig is the metadata quorum's configuration for this broker,
// whose storage is e.
func (m *membership) metaConfig(e *engine.Engine, meta datadir.Meta, host string) raftmeta.Config {
	cp := m.props
	cfg := raftmeta.Config{
		NodeID:                m.nodeID,
		Dir:                   filepath.Join(m.dataDir, "meta"),
		DB:                    e.DB(),
		Limits:                m.limits,
		Logger:                m.log,
		Voters:                cp.Voters,
		ListenAddr:            m.controllerAddr,
		ClusterID:             meta.ClusterID,
		Dial:                  m.dial,
		ElectionTimeout:       cp.ElectionTimeout,
		FetchTimeout:          cp.FetchTimeout,
		SessionTimeout:        cp.SessionTimeout,
		HeartbeatInterval:     cp.HeartbeatInterval,
		UncleanLeaderElection: cp.UncleanElection,
	}
	if m.auth.tls != nil {
		// The controller port is as private as the inter-broker
		// listener: TLS with the same keystore and truststore.
		cfg.ServerTLS, cfg.ClientTLS = m.auth.ctrlTLS, m.auth.tls
	}
	if len(cp.Voters) > 0 && cfg.ListenAddr == "" &&
		!slices.ContainsFunc(cp.Voters, func(v raftmeta.Voter) bool { return v.ID == m.nodeID }) {
		// A broker that is not a voter receives the metadata log on a
		// port of its own, on the host it advertises to other brokers.
		cfg.ListenAddr = net.JoinHostPort(host, "0")
	}
	if m.props.RebalanceInterval > 0 {
		cfg.LeaderImbalanceInterval = m.props.RebalanceInterval
	}
	return cfg
}

// join registers this broker with the cluster's controller ctrl and
// waits until it is unfenced. diskFull is what its heartbeats report.
func (m *membership) join(ctx context.Context, ctrl *raftmeta.Controller, meta datadir.Meta, reg metadata.Broker, diskFull func() bool) error {
	reg.Rack = m.props.Rack
	reg.Incarnation = uuid.Random()
	s, err := ctrl.Register(ctx, reg)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	m.session = s
	s.ReportDiskFull(diskFull)
	if err := datadir.CheckClusterID(m.dataDir, meta, m.nodeID, ctrl.Image().ClusterID); err != nil {
		return err
	}
	// Fenced brokers lead nothing; the controller unfences this one once
	// its heartbeats show it has applied its own registration.
	last := time.Now()
	for {
		img, ch := ctrl.Watch()
		if br, ok := img.Brokers[m.nodeID]; ok && br.Epoch == s.Epoch() && !br.Fenced {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
			if time.Since(last) > 5*time.Second {
				m.log.Info("waiting for the controller to unfence this broker", "controller", img.ControllerID)
				last = time.Now()
			}
		case <-ctx.Done():
			return fmt.Errorf("server: waiting for the controller to unfence broker %d: %w", m.nodeID, ctx.Err())
		}
	}
}

// controlledShutdown asks the controller ctrl to move this broker's
// leaderships away and waits until it has (at most 30s), while the
// broker still serves: followers finish fetching and clients are told
// where the partitions went. Only the first call does, and not when
// skip (asked then) says the broker is aborting or closed.
func (m *membership) controlledShutdown(ctrl *raftmeta.Controller, skip func() bool) {
	m.shutdownOnce.Do(func() {
		if m.session == nil || skip() || !m.props.ControlledShutdown || !othersLive(ctrl.Image(), m.nodeID) {
			// With no other live broker there is nowhere to move
			// leaderships to (nor, often, a controller to ask).
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		if err := m.session.Shutdown(ctx); err != nil {
			m.log.Warn("controlled shutdown did not complete; stopping anyway", "err", err)
			return
		}
		m.log.Info("controlled shutdown: leaderships moved", "took", time.Since(start).Round(time.Millisecond))
	})
}

// Abort stops the broker as a crash would for the rest of the cluster:
// no controlled shutdown, connections dropped. What was synced stays.
// Tests use it to kill a broker in process.
func (b *Broker) Abort() error {
	b.closeMu.Lock()
	b.aborting = true
	b.closeMu.Unlock()
	return b.Close()
}

// Health lists what keeps this broker from a healthy cluster: voters that
// cannot be reached or have another configuration, no active controller,
// a fenced registration, and what plugins report (plugin.HealthReporter:
// a mirror whose source cannot be reached). Empty for a healthy or
// standalone broker.
func (b *Broker) Health() []string {
	if b.meta == nil {
		return nil
	}
	out := append(b.meta.Health(), b.links.health()...)
	for _, h := range plugin.All[plugin.HealthReporter](b.cfg.Plugins) {
		if !b.plugins.failedOf(h) { // a failed plugin may never answer
			out = append(out, h.Health()...)
		}
	}
	if b.member.session != nil {
		img := b.applied.get()
		if br, ok := img.Brokers[b.cfg.NodeID]; ok && br.Fenced {
			out = append(out, fmt.Sprintf("broker %d is fenced by the controller", b.cfg.NodeID))
		}
		for _, id := range slices.Sorted(maps.Keys(img.Brokers)) {
			if img.Brokers[id].DiskFull {
				out = append(out, fmt.Sprintf("broker %d's disk is full: it leads no partition another in-sync replica can lead, and joins no ISR, until space is freed", id))
			}
		}
	}
	return out
}

// AppliedImage is the last metadata image whose partitions this broker
// has applied: what its answers to clients reflect.
func (b *Broker) AppliedImage() *metadata.Image { return b.applied.get() }

// othersLive reports whether a broker of img other than self is live.
func othersLive(img *metadata.Image, self int32) bool {
	for id, br := range img.Brokers {
		if id != self && br.Live() {
			return true
		}
	}
	return false
}

// clusterFamilies are Kafka's controller and replica manager metrics, as
// this broker sees them: the controller's counters count the decisions
// taken while this node led the quorum.
var clusterFamilies = []prom.Family{
	{Name: "tandem_controller_unclean_leader_elections_total", Type: prom.Counter, Help: "Leaders this node elected from outside the ISR while it was the active controller (each may have lost acknowledged records)."},
	{Name: "tandem_controller_leader_elections_total", Type: prom.Counter, Help: "Partition leader changes this node decided while it was the active controller."},
	{Name: "tandem_controller_fenced_brokers_total", Type: prom.Counter, Help: "Brokers this node fenced while it was the active controller (session expired or connection closed)."},
	{Name: "tandem_controller_active", Type: prom.Gauge, Help: "1 while this node is the active controller, else 0."},
	{Name: "tandem_controller_fenced_brokers", Type: prom.Gauge, Help: "Registered brokers that are fenced, in this broker's metadata."},
	{Name: "tandem_controller_offline_partitions", Type: prom.Gauge, Help: "Partitions without a leader, in this broker's metadata."},
	{Name: "tandem_server_under_replicated_partitions", Type: prom.Gauge, Help: "Partitions this broker leads whose ISR is smaller than their replica set."},
}

func clusterMetrics(b *Broker, s *prom.Set) {
	s.Describe(clusterFamilies...)
	ctrl := func(name string, f func(m *raftmeta.ControllerMetrics) int64) {
		s.NewGauge(name, func() float64 {
			if b.meta == nil {
				return 0
			}
			return float64(f(b.meta.Metrics()))
		})
	}
	ctrl("tandem_controller_unclean_leader_elections_total", func(m *raftmeta.ControllerMetrics) int64 { return m.UncleanElections.Load() })
	ctrl("tandem_controller_leader_elections_total", func(m *raftmeta.ControllerMetrics) int64 { return m.LeaderElections.Load() })
	ctrl("tandem_controller_fenced_brokers_total", func(m *raftmeta.ControllerMetrics) int64 { return m.FencedBrokers.Load() })
	image := func(name string, f func(img *metadata.Image) int) {
		s.NewGauge(name, func() float64 {
			if b.meta == nil {
				return 0
			}
			return float64(f(b.applied.get()))
		})
	}
	image("tandem_controller_active", func(img *metadata.Image) int {
		if b.meta.IsLeader() {
			return 1
		}
		return 0
	})
	image("tandem_controller_fenced_brokers", func(img *metadata.Image) int {
		n := 0
		for _, br := range img.Brokers {
			if br.Fenced {
				n++
			}
		}
		return n
	})
	image("tandem_controller_offline_partitions", func(img *metadata.Image) int {
		n := 0
		for _, t := range img.Topics {
			for _, p := range t.Partitions {
				if p.Leader < 0 {
					n++
				}
			}
		}
		return n
	})
	image("tandem_server_under_replicated_partitions", func(img *metadata.Image) int {
		n := 0 // of the partitions this broker leads
		for _, t := range img.Topics {
			for _, p := range t.Partitions {
				if p.Leader == b.cfg.NodeID && len(p.ISR) < len(p.Replicas) {
					n++
				}
			}
		}
		return n
	})
}
