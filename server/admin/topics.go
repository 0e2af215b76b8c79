package admin

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/config"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// HandleCreateTopics validates each topic as Kafka's controller does,
// hands the valid ones to raftmeta, and waits until the engine has the new
// partitions before answering. mirrorIDs (version 8) are the topics'
// MirrorInfo topic IDs, zero where there is none.
func (a *Admin) HandleCreateTopics(ctx context.Context, rc *plugin.RequestContext, req *kmsg.CreateTopicsRequest, mirrorIDs []uuid.UUID) (kmsg.Response, error) {
	ctx, cancel := requestTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	img := a.Meta.Image()
	counts := map[string]int{}
	for _, t := range req.Topics {
		counts[t.Topic]++
	}
	var specs []metadata.TopicSpec
	var specAt []int // response index of each spec
	clusterCreate := rc.Allowed(kmsg.ACLOperationCreate, kmsg.ACLResourceTypeCluster, clusterName)
	for i, t := range req.Topics {
		if counts[t.Topic] < 0 {
			continue // duplicate already answered
		}
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, -1, -1
		var err error
		var spec metadata.TopicSpec
		if counts[t.Topic] > 1 {
			counts[t.Topic] = -1
			err = config.Errorf(kerr.InvalidRequest, "Duplicate topic name.")
		} else if !clusterCreate && !rc.Allowed(kmsg.ACLOperationCreate, kmsg.ACLResourceTypeTopic, t.Topic) {
			err = config.Errorf(kerr.TopicAuthorizationFailed, "Authorization failed.")
		} else if spec, err = a.topicSpec(img, &t); err == nil && i < len(mirrorIDs) && !mirrorIDs[i].IsZero() {
			err = mirrorTopicSpec(img, &spec, mirrorIDs[i])
		}
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = adminErrCode(err)
		} else {
			specs = append(specs, spec)
			specAt = append(specAt, len(resp.Topics))
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(specs) == 0 {
		return resp, nil
	}
	errs := a.Meta.CreateTopics(ctx, specs, req.ValidateOnly)
	created := false
	for i, spec := range specs {
		rt := &resp.Topics[specAt[i]]
		if i < len(errs) && errs[i] != nil {
			rt.ErrorCode, rt.ErrorMessage = adminErrCode(errs[i])
			continue
		}
		created = created || !req.ValidateOnly
		rt.NumPartitions, rt.ReplicationFactor = spec.Partitions, spec.ReplicationFactor
		l := a.Layers(a.Meta.Image(), &metadata.Topic{Configs: spec.Configs})
		for _, d := range config.TopicList {
			cv := l.TopicConfig(d)
			c := kmsg.NewCreateTopicsResponseTopicConfig()
			c.Name, c.Value, c.Source, c.IsSensitive = d.Name, cv.Value, int8(cv.Source), d.Sensitive
			rt.Configs = append(rt.Configs, c)
		}
	}
	if created {
		img = a.Meta.Image()
		for i, spec := range specs {
			if t := img.Topics[spec.Name]; t != nil && resp.Topics[specAt[i]].ErrorCode == 0 {
				resp.Topics[specAt[i]].TopicID = t.ID
			}
		}
		if err := a.WaitApplied(ctx, img.Index); err != nil {
			a.Log.Warn("create topics: waiting for partitions", "err", err)
		}
	}
	return resp, nil
}

// topicSpec validates one CreateTopics entry against the image and the
// broker defaults (Kafka's ReplicationControlManager checks, in order).
func (a *Admin) topicSpec(img *metadata.Image, t *kmsg.CreateTopicsRequestTopic) (metadata.TopicSpec, error) {
	spec := metadata.TopicSpec{Name: t.Topic, Partitions: t.NumPartitions, ReplicationFactor: t.ReplicationFactor}
	if err := raftmeta.ValidTopicName(t.Topic); err != nil {
		return spec, err
	}
	if img.Topics[t.Topic] != nil {
		return spec, config.Errorf(kerr.TopicAlreadyExists, "Topic '%s' already exists.", t.Topic)
	}
	if other := collidingTopic(img, t.Topic); other != "" {
		return spec, config.Errorf(kerr.InvalidTopicException, "Topic '%s' collides with existing topic: %s", t.Topic, other)
	}
	if len(t.ReplicaAssignment) > 0 {
		if t.NumPartitions != -1 {
			return spec, config.Errorf(kerr.InvalidRequest, "A manual partition assignment was specified, but numPartitions was not set to -1.")
		}
		if t.ReplicationFactor != -1 {
			return spec, config.Errorf(kerr.InvalidRequest, "A manual partition assignment was specified, but replicationFactor was not set to -1.")
		}
		if err := a.PartitionLimits.CheckCount(t.Topic, int64(len(t.ReplicaAssignment))); err != nil {
			return spec, err
		}
		assign := make([][]int32, len(t.ReplicaAssignment))
		for _, a := range t.ReplicaAssignment {
			if a.Partition < 0 || int(a.Partition) >= len(assign) || assign[a.Partition] != nil {
				return spec, config.Errorf(kerr.InvalidReplicaAssignment, "Partitions in the manual partition assignment should be a consecutive 0-based integer sequence.")
			}
			if err := checkReplicas(img, a.Replicas); err != nil {
				return spec, err
			}
			if len(a.Replicas) != len(t.ReplicaAssignment[0].Replicas) {
				return spec, config.Errorf(kerr.InvalidReplicaAssignment, "All partitions in the manual partition assignment should have the same number of replicas.")
			}
			assign[a.Partition] = slices.Clone(a.Replicas)
		}
		spec.Assignments = assign
		spec.Partitions, spec.ReplicationFactor = int32(len(assign)), int16(len(assign[0]))
	} else {
		if spec.Partitions == -1 {
			spec.Partitions = a.NumPartitions
		}
		if spec.Partitions <= 0 {
			return spec, config.Errorf(kerr.InvalidPartitions, "Number of partitions was set to an invalid non-positive value.")
		}
		if spec.ReplicationFactor == -1 {
			spec.ReplicationFactor = a.DefaultReplicationFactor
		}
		if spec.ReplicationFactor <= 0 {
			return spec, config.Errorf(kerr.InvalidReplicationFactor, "Replication factor must be larger than 0, or -1 to use the default value.")
		}
		if n := len(img.Brokers); int(spec.ReplicationFactor) > n {
			return spec, config.Errorf(kerr.InvalidReplicationFactor, "Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only %d broker(s) are registered.",
				spec.ReplicationFactor, spec.ReplicationFactor, n)
		}
	}
	if len(t.Configs) > 0 {
		spec.Configs = make(map[string]string, len(t.Configs))
		for _, c := range t.Configs {
			if c.Value == nil {
				return spec, config.Errorf(kerr.InvalidConfig, "Null value not supported for topic configs: %s", c.Name)
			}
			spec.Configs[c.Name] = *c.Value
		}
		if err := config.ValidateTopic(spec.Configs); err != nil {
			return spec, err
		}
		if err := plugin.CheckTopicChange(a.Plugins, plugin.TopicChange{Topic: t.Topic, Op: plugin.OpAlterConfigs, Keys: slices.Sorted(maps.Keys(spec.Configs))}); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

// checkReplicas validates one partition's manual replica list.
func checkReplicas(img *metadata.Image, replicas []int32) error {
	if len(replicas) == 0 {
		return config.Errorf(kerr.InvalidReplicaAssignment, "The manual partition assignment includes an empty replica list.")
	}
	if len(replicas) > len(img.Brokers) { // bounds the quadratic duplicate check below
		return config.Errorf(kerr.InvalidReplicaAssignment, "The manual partition assignment lists %d replicas but only %d broker(s) are registered.", len(replicas), len(img.Brokers))
	}
	for i, r := range replicas {
		if slices.Contains(replicas[:i], r) {
			return config.Errorf(kerr.InvalidReplicaAssignment, "The manual partition assignment includes the broker %d more than once.", r)
		}
		if _, ok := img.Brokers[r]; !ok {
			return config.Errorf(kerr.InvalidReplicaAssignment, "The manual partition assignment includes broker %d, but no broker with that ID is registered.", r)
		}
	}
	return nil
}

// collidingTopic returns an existing topic whose name equals name once
// '.' and '_' are treated alike (their metric names would collide).
func collidingTopic(img *metadata.Image, name string) string {
	if !strings.ContainsAny(name, "._") {
		return ""
	}
	norm := strings.ReplaceAll(name, ".", "_")
	for other := range img.Topics {
		if other != name && strings.ReplaceAll(other, ".", "_") == norm {
			return other
		}
	}
	return ""
}

// createTopicsAuto creates topics that a Metadata or Produce request named
// and that do not exist, with num.partitions and default.replication.factor.
// Invalid names are skipped (the caller answers INVALID_TOPIC_EXCEPTION);
// the caller decides whether auto.create.topics.enable allows it.
func (a *Admin) CreateTopicsAuto(ctx context.Context, names []string) {
	img := a.Meta.Image()
	var specs []metadata.TopicSpec
	for _, name := range names {
		if raftmeta.ValidTopicName(name) != nil || img.Topics[name] != nil || collidingTopic(img, name) != "" ||
			slices.ContainsFunc(specs, func(s metadata.TopicSpec) bool { return s.Name == name }) {
			continue
		}
		specs = append(specs, metadata.TopicSpec{Name: name, Partitions: a.NumPartitions, ReplicationFactor: a.DefaultReplicationFactor})
	}
	if len(specs) == 0 {
		return
	}
	for i, err := range a.Meta.CreateTopics(ctx, specs, false) {
		// A concurrent request may have created it first: that is fine.
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			a.Log.Warn("auto-create topic", "topic", specs[i].Name, "err", err)
		}
	}
	if err := a.WaitApplied(ctx, a.Meta.Image().Index); err != nil {
		a.Log.Warn("auto-create topics: waiting for partitions", "err", err)
	}
}

// HandleDeleteTopics deletes topics by name (v0-v5) or by name or ID (v6).
func (a *Admin) HandleDeleteTopics(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	ctx, cancel := requestTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type item struct {
		name *string
		id   [16]byte
	}
	var items []item
	if req.Version >= 6 {
		for _, t := range req.Topics {
			items = append(items, item{t.Topic, t.TopicID})
		}
	} else {
		for _, n := range req.TopicNames {
			items = append(items, item{name: &n})
		}
	}
	img := a.Meta.Image()
	var ids []metadata.UUID
	var idAt []int
	seen := map[metadata.UUID]bool{}
	for _, it := range items {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = it.name, it.id
		var t *metadata.Topic
		var err error
		switch {
		case !a.DeleteTopicEnable && req.Version < 3:
			err = config.Errorf(kerr.InvalidRequest, "Topic deletion is disabled.")
		case !a.DeleteTopicEnable:
			err = config.Errorf(kerr.TopicDeletionDisabled, "Topic deletion is disabled.")
		case it.name != nil && it.id != [16]byte{}:
			err = config.Errorf(kerr.InvalidRequest, "You may not specify both topic name and topic id.")
		case it.name != nil:
			if t = img.Topics[*it.name]; t == nil {
				err = config.Errorf(kerr.UnknownTopicOrPartition, "This server does not host this topic-partition.")
			}
		case it.id != [16]byte{}:
			if t = img.TopicsByID[it.id]; t == nil {
				err = config.Errorf(kerr.UnknownTopicID, "This server does not host this topic ID.")
			}
		default:
			err = config.Errorf(kerr.InvalidRequest, "Neither topic name nor topic id were specified.")
		}
		if err == nil && !rc.Allowed(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, t.Name) {
			if it.name == nil {
				err = config.Errorf(kerr.UnknownTopicID, "This server does not host this topic ID.") // do not leak the name
			} else {
				err = config.Errorf(kerr.TopicAuthorizationFailed, "Authorization failed.")
			}
			t = nil
		} else if err != nil && it.name != nil && !rc.Allowed(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, *it.name) {
			err = config.Errorf(kerr.TopicAuthorizationFailed, "Authorization failed.")
		}
		if err == nil {
			rt.Topic, rt.TopicID = &t.Name, t.ID
			switch {
			case seen[t.ID]:
				err = config.Errorf(kerr.InvalidRequest, "Duplicate topic in the request.")
			case t.Internal:
				err = config.Errorf(kerr.InvalidTopicException, "Internal topic %s cannot be deleted.", t.Name)
			default:
				err = plugin.CheckTopicChange(a.Plugins, plugin.TopicChange{Topic: t.Name, Op: plugin.OpDeleteTopic})
			}
			seen[t.ID] = true
		}
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = adminErrCode(err)
		} else {
			ids = append(ids, t.ID)
			idAt = append(idAt, len(resp.Topics))
		}
		if req.Version < 6 {
			rt.TopicID = [16]byte{}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(ids) == 0 {
		return resp, nil
	}
	for i, err := range a.Meta.DeleteTopics(ctx, ids) {
		if err != nil {
			resp.Topics[idAt[i]].ErrorCode, resp.Topics[idAt[i]].ErrorMessage = adminErrCode(err)
		}
	}
	if err := a.WaitApplied(ctx, a.Meta.Image().Index); err != nil {
		a.Log.Warn("delete topics: waiting for partitions to go", "err", err)
	}
	if req.Version < 5 {
		for i := range resp.Topics {
			resp.Topics[i].ErrorMessage = nil
		}
	}
	return resp, nil
}

// HandleCreatePartitions grows topics to the requested partition count.
func (a *Admin) HandleCreatePartitions(ctx context.Context, rc *plugin.RequestContext, req *kmsg.CreatePartitionsRequest) (kmsg.Response, error) {
	ctx, cancel := requestTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	counts := map[string]int{}
	for _, t := range req.Topics {
		counts[t.Topic]++
	}
	img := a.Meta.Image()
	grew := false
	for _, t := range req.Topics {
		if counts[t.Topic] < 0 {
			continue
		}
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var err error
		if counts[t.Topic] > 1 {
			counts[t.Topic] = -1
			err = config.Errorf(kerr.InvalidRequest, "Duplicate topic name.")
		} else if !rc.Allowed(kmsg.ACLOperationAlter, kmsg.ACLResourceTypeTopic, t.Topic) {
			err = config.Errorf(kerr.TopicAuthorizationFailed, "Authorization failed.")
		} else if err = checkCreatePartitions(img, &t); err == nil {
			err = plugin.CheckTopicChange(a.Plugins, plugin.TopicChange{Topic: t.Topic, Op: plugin.OpCreatePartitions})
		}
		if err == nil {
			err = a.Meta.CreatePartitions(ctx, t.Topic, t.Count, req.ValidateOnly)
			grew = grew || (err == nil && !req.ValidateOnly)
		}
		rt.ErrorCode, rt.ErrorMessage = adminErrCode(err)
		resp.Topics = append(resp.Topics, rt)
	}
	if grew {
		if err := a.WaitApplied(ctx, a.Meta.Image().Index); err != nil {
			a.Log.Warn("create partitions: waiting for partitions", "err", err)
		}
	}
	return resp, nil
}

// checkCreatePartitions applies Kafka's checks to one topic of a
// CreatePartitions request.
func checkCreatePartitions(img *metadata.Image, t *kmsg.CreatePartitionsRequestTopic) error {
	topic := img.Topics[t.Topic]
	if topic == nil {
		return config.Errorf(kerr.UnknownTopicOrPartition, "This server does not host this topic-partition.")
	}
	have := int32(len(topic.Partitions))
	switch {
	case t.Count < have:
		return config.Errorf(kerr.InvalidPartitions, "The topic %s currently has %d partition(s); %d would not be an increase.", t.Topic, have, t.Count)
	case t.Count == have:
		return config.Errorf(kerr.InvalidPartitions, "Topic already has %d partition(s).", have)
	}
	if t.Assignment == nil {
		return nil
	}
	if add := t.Count - have; int32(len(t.Assignment)) != add {
		return config.Errorf(kerr.InvalidReplicaAssignment, "Attempted to add %d additional partition(s), but only %d assignment(s) were specified.", add, len(t.Assignment))
	}
	rf := len(topic.Partitions[0].Replicas)
	for _, a := range t.Assignment {
		if err := checkReplicas(img, a.Replicas); err != nil {
			return err
		}
		if len(a.Replicas) != rf {
			return config.Errorf(kerr.InvalidReplicaAssignment, "The manual partition assignment includes a partition with %d replica(s), but this is not consistent with previous partitions, which have %d replica(s).", len(a.Replicas), rf)
		}
	}
	if len(img.Brokers) > rf {
		// raftmeta places new partitions itself; an explicit placement
		// is only honoured when every broker holds every partition.
		return config.Errorf(kerr.InvalidReplicaAssignment, "Manual assignments of new partitions are not supported yet when the cluster has more brokers than the topic has replicas.")
	}
	return nil
}

// requestTimeout bounds an admin request's wait for the controller by the
// request's own timeout (timeoutMs), as Kafka does: a client waits that
// long plus its own margin, so an answer must come within it, and without
// a reachable controller it is a retriable NOT_CONTROLLER. A timeout of
// 0 or less leaves ctx as it is.
func requestTimeout(ctx context.Context, ms int32) (context.Context, context.CancelFunc) {
	if ms <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
}
