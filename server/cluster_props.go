package server

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/raftmeta"
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

func parseClusterProps(l configLayers) (ClusterProps, error) {
	ms := func(k string) time.Duration { return time.Duration(l.int(k)) * time.Millisecond }
	p := ClusterProps{
		ControllerListener: strings.ToUpper(strings.TrimSpace(l.str("controller.listener.names"))),
		Rack:               l.str("broker.rack"),
		SessionTimeout:     ms("broker.session.timeout.ms"),
		HeartbeatInterval:  ms("broker.heartbeat.interval.ms"),
		ElectionTimeout:    ms("controller.quorum.election.timeout.ms"),
		FetchTimeout:       ms("controller.quorum.fetch.timeout.ms"),
		ReplicaLagMax:      ms("replica.lag.time.max.ms"),
		FetchWait:          ms("replica.fetch.wait.max.ms"),
		FetchMaxBytes:      int32(l.int("replica.fetch.max.bytes")),
		FetchResponseBytes: int32(l.int("replica.fetch.response.max.bytes")),
		UncleanElection:    l.bool("unclean.leader.election.enable"),
		ControlledShutdown: l.bool("controlled.shutdown.enable"),
	}
	if l.bool("auto.leader.rebalance.enable") {
		p.RebalanceInterval = time.Duration(l.int("leader.imbalance.check.interval.seconds")) * time.Second
	}
	if v := strings.TrimSpace(l.str("controller.quorum.voters")); v != "" {
		var err error
		if p.Voters, err = raftmeta.ParseVoters(v); err != nil {
			return p, adminErrorf(kerr.InvalidConfig, "%v", err)
		}
	}
	if p.HeartbeatInterval >= p.SessionTimeout {
		return p, adminErrorf(kerr.InvalidConfig, "broker.heartbeat.interval.ms (%v) must be below broker.session.timeout.ms (%v)", p.HeartbeatInterval, p.SessionTimeout)
	}
	return p, nil
}

func validVoters(v string) string {
	if strings.TrimSpace(v) == "" {
		return ""
	}
	if _, err := raftmeta.ParseVoters(v); err != nil {
		return err.Error()
	}
	return ""
}
