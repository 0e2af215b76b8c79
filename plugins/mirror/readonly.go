package mirror

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/metasync"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The one-writer rule: the only writer of a mirror partition is its
// mirror fetcher, and only the mirror APIs change a mirror topic. It
// lives here, in two hooks that share one notion of "mirror topic"
// (a member of a mirror, not stopped):
//
//   - ValidateAppend sees every append, whatever its origin: client
//     produce, a coordinator, transaction markers (the transaction
//     coordinator's, or a client's WriteTxnMarkers), the mirror's own;
//   - CheckTopicChange is asked by the broker's admin handlers
//     (DeleteRecords, CreatePartitions, DeleteTopics, config changes) and
//     by the transaction coordinator before they change a topic.

// ValidateAppend implements engine.AppendValidator. On a mirror topic it
// accepts only the mirror fetcher's batches while the partition is
// MIRRORING (with the KIP's epoch checks), the failover sequence's
// markers while it is STOPPING, and in-cluster replication; everything
// else is refused (errReadOnly), and the log is left untouched.
func (p *Plugin) ValidateAppend(req *engine.AppendRequest) error {
	if req.Origin == engine.OriginReplica {
		return nil // a follower copies its leader, which obeys the rule
	}
	img := p.Image()
	if img == nil {
		return nil
	}
	mirror := img.MirrorOf(req.Topic)
	switch req.Origin {
	case engine.OriginCrossCluster:
		if st := p.partState(mirror, req.Topic, req.Partition); st != mirrorstate.Mirroring {
			return fmt.Errorf("%s-%d is not a MIRRORING partition (mirror %q, %s): a fetcher may not append: %w",
				req.Topic, req.Partition, mirror, st, mirrorproto.ErrReadOnlyTopic)
		}
		return p.checkEpochs(img, mirror, req)
	case engine.OriginPluginControl:
		if st := p.partState(mirror, req.Topic, req.Partition); mirror != "" && st != mirrorstate.Stopping {
			return fmt.Errorf("%s-%d is %s, not STOPPING: %w", req.Topic, req.Partition, st, mirrorproto.ErrReadOnlyTopic)
		}
		return nil
	}
	if mirror != "" {
		return errReadOnly("topic %s is a read-only mirror topic of mirror %s (%s append refused)", req.Topic, mirror, req.Origin)
	}
	return nil
}

// errReadOnly is a mirror topic's refusal of a change that a client, a
// coordinator or an admin API asked for. READ_ONLY_TOPIC (137) is the
// KIP's code, but no released client knows it yet: kcat printed
// "Err-137?", franz-go and the Java client UNKNOWN_SERVER_ERROR. So the
// refusal is POLICY_VIOLATION, which every client knows and none
// retries, with READ_ONLY_TOPIC and the mirror in its message (Produce
// v8+ and the admin APIs carry one; see docs/decisions-mirroring.md,
// "Read-only mirror topics").
func errReadOnly(format string, args ...any) error {
	return fmt.Errorf(format+" [READ_ONLY_TOPIC]: %w", append(args, kerr.PolicyViolation)...)
}

// partState is a partition's state as the run of its mirror on this
// broker knows it (UNKNOWN if none).
func (p *Plugin) partState(mirror, topic string, partition int32) mirrorstate.State {
	if mirror == "" {
		return mirrorstate.Unknown
	}
	r := p.run(mirror)
	if r == nil {
		return mirrorstate.Unknown
	}
	st, _ := r.state(topicPartition{Topic: topic, Partition: partition})
	return st
}

// checkEpochs applies the KIP's leader epoch rules to mirrored batches:
// none may carry an epoch above the destination's (the partition must be
// fenced and its epoch bumped first), and one close to it schedules a
// bump.
func (p *Plugin) checkEpochs(img *metadata.Image, mirror string, req *engine.AppendRequest) error {
	t := img.Topics[req.Topic]
	if t == nil || int(req.Partition) >= len(t.Partitions) {
		return nil
	}
	dle := t.Partitions[req.Partition].LeaderEpoch
	sle := maxBatchEpoch(req.Records)
	fence, bump := epochCheck(sle, dle)
	if fence {
		return fmt.Errorf("%s-%d: batch leader epoch %d above destination epoch %d: %w", req.Topic, req.Partition, sle, dle, mirrorproto.ErrMirrorLeaderEpochExceeded)
	}
	if bump {
		if r := p.run(mirror); r != nil {
			r.scheduleBump(req.Topic, req.Partition, sle)
		}
	}
	return nil
}

var opNames = map[plugin.TopicOp]string{
	plugin.OpWrite:            "writing records",
	plugin.OpTxnMarkers:       "writing transaction markers",
	plugin.OpDeleteRecords:    "DeleteRecords",
	plugin.OpCreatePartitions: "CreatePartitions",
	plugin.OpDeleteTopic:      "DeleteTopics",
	plugin.OpAlterConfigs:     "altering configs",
}

// CheckTopicChange implements plugin.TopicGuard: a mirror topic refuses
// every change but those of configs the mirror does not sync (its
// mirror.topic.properties.exclude), with errReadOnly naming the
// mirror.
func (p *Plugin) CheckTopicChange(c plugin.TopicChange) error {
	img := p.Image()
	if img == nil {
		return nil
	}
	m := img.MirrorOf(c.Topic)
	if m == "" {
		if c.Op == plugin.OpAlterConfigs && slices.Contains(c.Keys, mirrorNameConfig) {
			return fmt.Errorf("topic %s: %s is set by the mirror APIs only (AddTopicsToMirror): %w", c.Topic, mirrorNameConfig, kerr.InvalidConfig)
		}
		return nil
	}
	if c.Op == plugin.OpAlterConfigs {
		excluded := metasync.ExcludedProps(img.Mirrors[m].Configs)
		for _, k := range c.Keys {
			if k == mirrorNameConfig || !excluded[k] {
				return errReadOnly("topic %s is a read-only mirror topic of mirror %s: config %s is synced from the source (only keys in mirror.topic.properties.exclude may be set here)",
					c.Topic, m, k)
			}
		}
		return nil
	}
	return errReadOnly("topic %s is a read-only mirror topic of mirror %s: %s refused (fail it over first)", c.Topic, m, opNames[c.Op])
}

// mirrorNameConfig is the topic config that names a topic's mirror (the
// KIP's mirror.name): the controller sets it with the topic's membership
// and clears it with the membership's stop.
const mirrorNameConfig = metadata.MirrorNameConfig
