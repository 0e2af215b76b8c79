package server

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"time"

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

// metaConfig is the metadata quorum's configuration for this broker.
func (b *Broker) metaConfig(meta datadir.Meta, host string) raftmeta.Config {
	cp := b.props.Cluster
	cfg := raftmeta.Config{
		NodeID:                b.cfg.NodeID,
		Dir:                   filepath.Join(b.cfg.DataDir, "meta"),
		DB:                    b.engine.DB(),
		Limits:                b.props.PartitionLimits,
		Logger:                b.log,
		Voters:                cp.Voters,
		ListenAddr:            b.controllerAddr,
		ClusterID:             meta.ClusterID,
		Dial:                  b.cfg.Dial,
		ElectionTimeout:       cp.ElectionTimeout,
		FetchTimeout:          cp.FetchTimeout,
		SessionTimeout:        cp.SessionTimeout,
		HeartbeatInterval:     cp.HeartbeatInterval,
		UncleanLeaderElection: cp.UncleanElection,
	}
	if b.ibAuth.tls != nil {
		// The controller port is as private as the inter-broker
		// listener: TLS with the same keystore and truststore.
		cfg.ServerTLS, cfg.ClientTLS = b.ibAuth.ctrlTLS, b.ibAuth.tls
	}
	if len(cp.Voters) > 0 && cfg.ListenAddr == "" &&
		!slices.ContainsFunc(cp.Voters, func(v raftmeta.Voter) bool { return v.ID == b.cfg.NodeID }) {
		// A broker that is not a voter receives the metadata log on a
		// port of its own, on the host it advertises to other brokers.
		cfg.ListenAddr = net.JoinHostPort(host, "0")
	}
	if b.props.Cluster.RebalanceInterval > 0 {
		cfg.LeaderImbalanceInterval = b.props.Cluster.RebalanceInterval
	}
	return cfg
}

// join registers this broker with the cluster's controller and waits
// until it is unfenced.
func (b *Broker) join(ctx context.Context, meta datadir.Meta, reg metadata.Broker) error {
	reg.Rack = b.props.Cluster.Rack
	reg.Incarnation = uuid.Random()
	s, err := b.meta.Register(ctx, reg)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	b.session = s
	s.ReportDiskFull(b.DiskFull)
	if err := datadir.CheckClusterID(b.cfg.DataDir, meta, b.cfg.NodeID, b.meta.Image().ClusterID); err != nil {
		return err
	}
	// Fenced brokers lead nothing; the controller unfences this one once
	// its heartbeats show it has applied its own registration.
	last := time.Now()
	for {
		img, ch := b.meta.Watch()
		if br, ok := img.Brokers[b.cfg.NodeID]; ok && br.Epoch == s.Epoch() && !br.Fenced {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
			if time.Since(last) > 5*time.Second {
				b.log.Info("waiting for the controller to unfence this broker", "controller", img.ControllerID)
				last = time.Now()
			}
		case <-ctx.Done():
			return fmt.Errorf("server: waiting for the controller to unfence broker %d: %w", b.cfg.NodeID, ctx.Err())
		}
	}
}

// controlledShutdown asks the controller to move this broker's
// leaderships away and waits until it has (at most 30s), while the
// broker still serves: followers finish fetching and clients are told
// where the partitions went.
func (b *Broker) controlledShutdown() {
	b.shutdownOnce.Do(func() {
		b.closeMu.Lock()
		skip := b.session == nil || b.aborting || b.closed || !b.props.Cluster.ControlledShutdown
		b.closeMu.Unlock()
		if skip || !othersLive(b.meta.Image(), b.cfg.NodeID) {
			// With no other live broker there is nowhere to move
			// leaderships to (nor, often, a controller to ask).
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		if err := b.session.Shutdown(ctx); err != nil {
			b.log.Warn("controlled shutdown did not complete; stopping anyway", "err", err)
			return
		}
		b.log.Info("controlled shutdown: leaderships moved", "took", time.Since(start).Round(time.Millisecond))
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
	if b.session != nil {
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
