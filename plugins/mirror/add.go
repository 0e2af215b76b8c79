package mirror

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/admit"
	"github.com/tandem-kafka/tandem/plugins/mirror/metasync"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// sourceTimeout bounds what a mirror API waits for the source cluster.
const sourceTimeout = 15 * time.Second

// sourceClient is a client of a mirror's source cluster for one request
// of the mirror APIs; the caller closes it.
func (p *Plugin) sourceClient(m *metadata.Mirror) (*kgo.Client, error) {
	opts, err := clientOpts(m.Configs, p.cfg)
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(opts, kgo.ClientID("mirror-admin-"+m.Name))...)
}

// probeSource asks each bootstrap server of a would-be source for its API
// versions, over the mirror's transport (TLS or not; Kafka answers
// ApiVersions before SASL). One broker answering is enough. A source that
// cannot be reached now is accepted (it may be down: the mirror shows
// FAILED until it is back); an address that answers, but not as a Kafka
// broker, refuses the mirror, naming the address, within seconds.
// reachable says a broker answered.
func (p *Plugin) probeSource(ctx context.Context, configs map[string]string) (reachable bool, err error) {
	var tc *tls.Config
	if strings.HasSuffix(strings.ToUpper(configs["security.protocol"]), "SSL") {
		if tc, err = tlsConfig(configs); err != nil {
			return false, err
		}
	}
	var notKafka []string
	for _, addr := range strings.Split(configs["bootstrap.servers"], ",") {
		addr = strings.TrimSpace(addr)
		switch err := admit.ProbeKafka(ctx, addr, tc, min(p.cfg.ConnectTimeout, 5*time.Second)); {
		case err == nil:
			return true, nil
		case !errors.Is(err, admit.ErrNotKafka):
			// Unreachable now: the mirror will tell when it is back.
		default:
			notKafka = append(notKafka, fmt.Sprintf("%s (%v)", addr, err))
		}
	}
	if len(notKafka) > 0 {
		return false, fmt.Errorf("mirror config bootstrap.servers: no Kafka broker answers at %s: %w", strings.Join(notKafka, ", "), kerr.InvalidConfig)
	}
	return false, nil
}

// checkNewMirror refuses a mirror (name, configs) that would write what
// another mirror writes: the same mirror.topic.prefix as another's (two
// sources' orders would both be prefix+orders here), or, when its source
// answers, a topic its mirror.topics.include would discover that another
// mirror already holds here; and a mirror whose source is this very
// cluster. A source that does not answer now is accepted, as always
// (AddTopicsToMirror and discovery check again).
func (p *Plugin) checkNewMirror(ctx context.Context, name string, configs map[string]string, reachable bool) error {
	img := p.Image()
	prefix := mirrorcfg.Prefix(configs)
	for _, other := range slices.Sorted(maps.Keys(img.Mirrors)) {
		if prefix != "" && mirrorcfg.Prefix(img.Mirrors[other].Configs) == prefix {
			return fmt.Errorf("mirrors %s and %s would both name their topics %s<source topic> here: give each its own %s: %w",
				name, other, prefix, mirrorcfg.TopicPrefix, kerr.InvalidConfig)
		}
	}
	if !reachable {
		return nil
	}
	m := &metadata.Mirror{Name: name, Configs: configs}
	cl, err := p.sourceClient(m)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, min(p.cfg.RequestTimeout, 5*time.Second))
	defer cancel()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl) // every topic
	if err != nil {
		return nil // it answered ApiVersions only: AddTopicsToMirror checks again
	}
	if resp.ClusterID != nil && *resp.ClusterID == img.ClusterID {
		return admit.SelfMirror(m, img.ClusterID)
	}
	return admit.DiscoveryTaken(img, m, resp)
}

// addTopics is AddTopicsToMirror: every topic is checked on the source
// (ID, partition count, configs) and then created here with the source's
// ID, all in one metadata batch per mirror, or none at all. The answer
// says what LME and replication truncation will remove from topics that
// exist here with records (a failback); validate-only, nothing is added.
func (p *Plugin) addTopics(ctx context.Context, req *mirrorproto.AddTopicsToMirrorRequest) (uuid.UUID, []mirrorproto.Truncation, error) {
	var names []string
	for _, t := range req.Topics {
		if t.MirrorName != nil {
			names = append(names, *t.MirrorName)
		}
	}
	img := p.awaitMirrors(ctx, names...)
	byMirror, err := admit.AddedTopics(img, req.Topics)
	if err != nil {
		return uuid.UUID{}, nil, err
	}
	if err := p.ensureStateTopic(ctx); err != nil {
		return uuid.UUID{}, nil, err
	}
	var first uuid.UUID
	var plan []mirrorproto.Truncation
	for _, mirror := range slices.Sorted(maps.Keys(byMirror)) {
		specs, truncs, err := p.sourceTopics(ctx, img.Mirrors[mirror], byMirror[mirror])
		if err != nil {
			return uuid.UUID{}, nil, err
		}
		plan = append(plan, truncs...)
		first = specs[0].ID
		if req.ValidateOnly {
			continue
		}
		// The controller names the topics' mirror (mirror.name) in the
		// same batch.
		if err := p.Host().Metadata().AddMirrorTopics(ctx, mirror, specs); err != nil {
			return uuid.UUID{}, nil, err
		}
	}
	if !req.ValidateOnly {
		p.poke()
	}
	return first, plan, nil
}

// topicRF is the replication factor of the topics mirror m creates here:
// the mirror's mirror.topic.replication.factor, else this cluster's
// default.replication.factor if it is set, else min(3, the brokers
// registered here). The destination decides how many copies it keeps,
// as it does for its own topics; the source's replication factor says
// nothing about the brokers here. Kafka's default.replication.factor of
// 1 suits a developer's topics, not a disaster-recovery copy: one
// broker lost would make the copy unavailable when it is needed.
func (p *Plugin) topicRF(m *metadata.Mirror) int16 {
	if n, err := strconv.ParseInt(m.Configs["mirror.topic.replication.factor"], 10, 16); err == nil && n > 0 {
		return int16(n)
	}
	if p.cfg.TopicRF > 0 {
		return p.cfg.TopicRF
	}
	// Registered, not live: a broker down now does not make the copy
	// smaller for good (CreateTopics refuses it until the broker is back,
	// as it refuses any replication factor above the live brokers).
	return int16(max(1, min(3, len(p.Image().Brokers))))
}

// sourceTopics describes topics on a mirror's source cluster: their specs
// here, and what truncation takes from those that exist here.
func (p *Plugin) sourceTopics(ctx context.Context, m *metadata.Mirror, topics []admit.AddedTopic) ([]metadata.TopicSpec, []mirrorproto.Truncation, error) {
	cl, err := p.sourceClient(m)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, min(p.cfg.RequestTimeout, sourceTimeout))
	defer cancel()
	unavailable := func(what string, err error) error {
		return fmt.Errorf("source cluster %s of mirror %s: %s: %v: %w", m.Configs["bootstrap.servers"], m.Name, what, err, mirrorproto.ErrMirrorSourceUnavailable)
	}
	dest := map[string]string{} // source names to ours
	mreq := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		dest[t.Src] = t.Dest
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t.Src)
		mreq.Topics = append(mreq.Topics, mt)
	}
	resp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, unavailable("metadata", err)
	}
	img := p.Image()
	if resp.ClusterID != nil && *resp.ClusterID == img.ClusterID {
		return nil, nil, admit.SelfMirror(m, img.ClusterID)
	}
	prefixed := slices.ContainsFunc(topics, func(t admit.AddedTopic) bool { return t.Src != t.Dest })
	var theirs metasync.SourceMirrors // the source's own mirrors
	if prefixed {
		if theirs, err = metasync.SourceMirrorTopics(ctx, cl); err != nil {
			return nil, nil, unavailable("its mirrors", err)
		}
	}
	exclude := metasync.ExcludedProps(m.Configs)
	creq := kmsg.NewPtrDescribeConfigsRequest()
	var specs []metadata.TopicSpec
	for _, t := range resp.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		if t.ErrorCode != 0 {
			return nil, nil, fmt.Errorf("topic %s on the source cluster of mirror %s: %w", name, m.Name, kerr.ErrorForCode(t.ErrorCode))
		}
		if metasync.IsInternal(name, t.IsInternal) {
			return nil, nil, fmt.Errorf("topic %s is internal to the source cluster and never mirrored: %w", name, kerr.InvalidRequest)
		}
		here := dest[name]
		if err := admit.CheckDest(img, m, name, here, t, theirs.Topics); err != nil {
			return nil, nil, err
		}
		spec := metadata.TopicSpec{Name: here, ID: t.TopicID, Partitions: int32(len(t.Partitions)), ReplicationFactor: p.topicRF(m)}
		if here != name {
			spec.Source = name
		}
		specs = append(specs, spec)
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, name
		creq.Resources = append(creq.Resources, r)
	}
	cresp, err := creq.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, unavailable("topic configs", err)
	}
	for i, r := range cresp.Resources {
		if r.ErrorCode != 0 || i >= len(specs) {
			continue
		}
		for _, c := range r.Configs {
			if c.Name == mirrorNameConfig && c.Value != nil && *c.Value != "" && specs[i].Source != "" {
				return nil, nil, admit.MirrorOfMirror(m, specs[i], *c.Value)
			}
			if c.Name == mirrorNameConfig && c.Value != nil && *c.Value != "" && img.Topics[specs[i].Name] != nil {
				return nil, nil, admit.MirrorLoop(img.ClusterID, resp.ClusterID, specs[i].Name, *c.Value)
			}
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil && !exclude[c.Name] {
				if specs[i].Configs == nil {
					specs[i].Configs = map[string]string{}
				}
				specs[i].Configs[c.Name] = *c.Value
			}
		}
	}
	plan, err := p.truncationPlan(ctx, cl, m.Name, specs)
	if err != nil {
		return nil, nil, unavailable("last mirror epochs", err)
	}
	return specs, plan, nil
}

// truncationPlan predicts what adding topics to a mirror removes from the
// partitions here that have records: the mirror will truncate to where
// the source's last mirror epoch (LME) ends here (everything if the source
// never mirrored the topic), then to where that epoch ends on the source.
// The source is asked by its names, the plan names the topics here.
func (p *Plugin) truncationPlan(ctx context.Context, cl *kgo.Client, mirror string, specs []metadata.TopicSpec) ([]mirrorproto.Truncation, error) {
	img := p.Image()
	eng := p.Host()
	lmeReq := &mirrorproto.LastMirroredOffsetsRequest{MirrorName: mirror}
	here := map[string]string{} // source names to ours
	for _, s := range specs {
		if img.Topics[s.Name] == nil {
			continue // created here: empty
		}
		src := cmp.Or(s.Source, s.Name)
		here[src] = s.Name
		pt := mirrorproto.PartitionsTopic{Name: src}
		for i := range s.Partitions {
			pt.Partitions = append(pt.Partitions, i)
		}
		lmeReq.Topics = append(lmeReq.Topics, pt)
	}
	if len(lmeReq.Topics) == 0 {
		return nil, nil
	}
	lmes := map[topicPartition]int32{}
	served, err := admit.ServesKey(ctx, cl, mirrorproto.KeyLastMirroredOffsets)
	if err != nil {
		return nil, err
	}
	if served {
		resp, err := cl.Request(ctx, lmeReq)
		if err != nil {
			return nil, err
		}
		for _, t := range resp.(*mirrorproto.LastMirroredOffsetsResponse).Topics {
			for _, pp := range t.Partitions {
				if pp.ErrorCode != 0 {
					return nil, fmt.Errorf("%s-%d: %w", t.Name, pp.PartitionIndex, mirrorproto.ErrorForCode(pp.ErrorCode))
				}
				lmes[topicPartition{Topic: t.Name, Partition: pp.PartitionIndex}] = pp.LastMirrorEpoch
			}
		}
	}
	// Where each LME ends on the source.
	ends := map[topicPartition]int64{}
	oreq := kmsg.NewPtrOffsetForLeaderEpochRequest()
	oreq.ReplicaID = -1
	for _, t := range lmeReq.Topics {
		ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
		ot.Topic = t.Name
		for _, i := range t.Partitions {
			if lme, ok := lmes[topicPartition{Topic: t.Name, Partition: i}]; ok && lme >= 0 {
				op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
				op.Partition, op.CurrentLeaderEpoch, op.LeaderEpoch = i, -1, lme
				ot.Partitions = append(ot.Partitions, op)
			}
		}
		if len(ot.Partitions) > 0 {
			oreq.Topics = append(oreq.Topics, ot)
		}
	}
	if len(oreq.Topics) > 0 {
		oresp, err := oreq.RequestWith(ctx, cl)
		if err != nil {
			return nil, err
		}
		for _, t := range oresp.Topics {
			for _, pp := range t.Partitions {
				if pp.ErrorCode == 0 && pp.EndOffset >= 0 {
					ends[topicPartition{Topic: t.Topic, Partition: pp.Partition}] = pp.EndOffset
				}
			}
		}
	}
	var plan []mirrorproto.Truncation
	for _, t := range lmeReq.Topics {
		id := img.Topics[here[t.Name]].ID
		for _, i := range t.Partitions {
			ep := eng.Partition(id, i)
			if ep == nil {
				continue // not hosted here
			}
			k := topicPartition{Topic: t.Name, Partition: i} // by source name, as asked
			offs := ep.Offsets()
			lme, to := int32(-1), offs.LogStart
			if e, ok := lmes[k]; ok {
				lme = e
			}
			if lme >= 0 {
				if _, end := ep.EndOffsetForEpoch(lme); end >= 0 {
					to = max(to, end)
				}
				if end, ok := ends[k]; ok {
					to = max(offs.LogStart, min(to, end))
				}
			}
			if to < offs.LogEnd {
				plan = append(plan, mirrorproto.Truncation{Topic: here[t.Name], Partition: i, LogEnd: offs.LogEnd, TruncateTo: to, LastMirrorEpoch: lme})
			}
		}
	}
	return plan, nil
}
