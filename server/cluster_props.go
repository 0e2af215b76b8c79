package server

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server/config"
)

// ClusterProps are the broker properties of multi-broker clusters, with
// Kafka's names and defaults.
type ClusterProps struct {
	// Voters is controller.quorum.voters; empty for a standalone broker.
	Voters []raftmeta.Voter
	// ControllerListener is controller.listener.names: the listener of
	// "listeners" the controller port binds to instead of the node's
	// voters entry (and that is not a Kafka listener).
	ControllerListener string
	Rack               string        // broker.rack
	SessionTimeout     time.Duration // broker.session.timeout.ms
	HeartbeatInterval  time.Duration // broker.heartbeat.interval.ms
	ElectionTimeout    time.Duration // controller.quorum.election.timeout.ms
	FetchTimeout       time.Duration // controller.quorum.fetch.timeout.ms
	ReplicaLagMax      time.Duration // replica.lag.time.max.ms
	FetchWait          time.Duration // replica.fetch.wait.max.ms
	FetchMaxBytes      int32         // replica.fetch.max.bytes
	FetchResponseBytes int32         // replica.fetch.response.max.bytes
	UncleanElection    bool          // unclean.leader.election.enable
	ControlledShutdown bool          // controlled.shutdown.enable
	// RebalanceInterval is leader.imbalance.check.interval.seconds when
	// auto.leader.rebalance.enable, else 0.
	RebalanceInterval time.Duration
}

func parseClusterProps(l config.Layers) (ClusterProps, error) {
	ms := func(k string) time.Duration { return time.Duration(l.Int(k)) * time.Millisecond }
	p := ClusterProps{
		ControllerListener: strings.ToUpper(strings.TrimSpace(l.Str("controller.listener.names"))),
		Rack:               l.Str("broker.rack"),
		SessionTimeout:     ms("broker.session.timeout.ms"),
		HeartbeatInterval:  ms("broker.heartbeat.interval.ms"),
		ElectionTimeout:    ms("controller.quorum.election.timeout.ms"),
		FetchTimeout:       ms("controller.quorum.fetch.timeout.ms"),
		ReplicaLagMax:      ms("replica.lag.time.max.ms"),
		FetchWait:          ms("replica.fetch.wait.max.ms"),
		FetchMaxBytes:      int32(l.Int("replica.fetch.max.bytes")),
		FetchResponseBytes: int32(l.Int("replica.fetch.response.max.bytes")),
		UncleanElection:    l.Bool("unclean.leader.election.enable"),
		ControlledShutdown: l.Bool("controlled.shutdown.enable"),
	}
	if l.Bool("auto.leader.rebalance.enable") {
		p.RebalanceInterval = time.Duration(l.Int("leader.imbalance.check.interval.seconds")) * time.Second
	}
	if v := strings.TrimSpace(l.Str("controller.quorum.voters")); v != "" {
		var err error
		if p.Voters, err = raftmeta.ParseVoters(v); err != nil {
			return p, config.Errorf(kerr.InvalidConfig, "%v", err)
		}
	}
	if p.HeartbeatInterval >= p.SessionTimeout {
		return p, config.Errorf(kerr.InvalidConfig, "broker.heartbeat.interval.ms (%v) must be below broker.session.timeout.ms (%v)", p.HeartbeatInterval, p.SessionTimeout)
	}
	return p, nil
}
