package server

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta"
)

// handleDescribeConfigs describes topics and brokers. A broker resource
// named "" describes the dynamic cluster-wide defaults only, a resource
// named by this broker's ID every broker config, as Kafka does.
func (b *Broker) handleDescribeConfigs(ctx context.Context, rc *RequestContext, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	img := b.meta.Image()
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		want := func(name string) bool { return r.ConfigNames == nil || slices.Contains(r.ConfigNames, name) }
		add := func(d *configDef, cv configValue, readOnly bool) {
			if !want(d.name) {
				return
			}
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value, c.ReadOnly, c.IsSensitive = d.name, cv.value, readOnly, d.sensitive
			if d.sensitive {
				c.Value = nil
			}
			c.Source = cv.source
			c.IsDefault = cv.source == kmsg.ConfigSourceDefaultConfig
			if req.IncludeSynonyms {
				c.ConfigSynonyms = cv.synonyms
				if d.sensitive {
					for i := range c.ConfigSynonyms {
						c.ConfigSynonyms[i].Value = nil
					}
				}
			}
			c.ConfigType = d.typ
			if req.IncludeDocumentation {
				c.Documentation = cfgStr(d.doc)
			}
			rr.Configs = append(rr.Configs, c)
		}
		if h := b.configHandler(r.ResourceType); h != nil {
			cfgs, err := h.DescribeConfigResource(ctx, rc, r.ResourceName, r.ConfigNames)
			rr.Configs = cfgs
			rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
			resp.Resources = append(resp.Resources, rr)
			continue
		}
		if err := configDenied(rc, kmsg.ACLOperationDescribeConfigs, r.ResourceType, r.ResourceName); err != nil {
			rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
			resp.Resources = append(resp.Resources, rr)
			continue
		}
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			t, err := b.configTopic(img, r.ResourceName)
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
				break
			}
			l := b.layersOf(img, t)
			for _, d := range topicConfigList {
				add(d, l.topicCfg(d), false)
			}
		case kmsg.ConfigResourceTypeBroker:
			node, err := b.brokerResource(r.ResourceName)
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
				break
			}
			if !node {
				// The cluster-wide default resource holds only what was
				// set dynamically.
				for _, k := range slices.Sorted(maps.Keys(img.BrokerConfigs)) {
					d := brokerConfigs[k]
					if d == nil {
						d = &configDef{name: k, typ: kmsg.ConfigTypeString}
					}
					v := cfgStr(img.BrokerConfigs[k])
					cv := configValue{value: v, source: kmsg.ConfigSourceDynamicDefaultBrokerConfig}
					cv.add(k, v, cv.source)
					add(d, cv, false)
				}
				break
			}
			id := strconv.Itoa(int(b.cfg.NodeID))
			add(&configDef{name: "node.id", typ: kmsg.ConfigTypeInt, doc: "The node ID of this broker."},
				configValue{value: &id, source: kmsg.ConfigSourceStaticBrokerConfig}, true)
			l := b.layersOf(img, nil)
			for _, d := range brokerConfigList {
				add(d, l.broker(d), !d.dynamic)
			}
		default:
			rr.ErrorCode, rr.ErrorMessage = adminErrCode(adminErrorf(kerr.InvalidRequest, "Unsupported resource type: %v", r.ResourceType))
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// configTopic finds a topic named by a config resource.
func (b *Broker) configTopic(img *raftmeta.Image, name string) (*raftmeta.Topic, error) {
	if err := raftmeta.ValidTopicName(name); err != nil {
		return nil, err
	}
	t := img.Topics[name]
	if t == nil {
		return nil, adminErrorf(kerr.UnknownTopicOrPartition, "The topic '%s' does not exist.", name)
	}
	return t, nil
}

// brokerResource checks a broker resource name: "" is the cluster-wide
// default (node false), this broker's ID is this broker (node true).
func (b *Broker) brokerResource(name string) (node bool, err error) {
	if name == "" {
		return false, nil
	}
	if id, err := strconv.ParseInt(name, 10, 32); err == nil && int32(id) == b.cfg.NodeID {
		return true, nil
	}
	return false, adminErrorf(kerr.InvalidRequest, "Unexpected broker id, expected %d or empty string, but received %s", b.cfg.NodeID, name)
}

// layersOf is layers for a given image.
func (b *Broker) layersOf(img *raftmeta.Image, t *raftmeta.Topic) configLayers {
	l := configLayers{static: b.props.static, dynamic: img.BrokerConfigs, node: img.NodeConfigs[b.cfg.NodeID]}
	if t != nil {
		l.topic = t.Configs
		if l.topic == nil {
			l.topic = map[string]string{}
		}
	}
	return l
}

// configTarget is one resource of an alter request, resolved.
type configTarget struct {
	resource raftmeta.ConfigResource
	name     string
	current  map[string]string // dynamic configs set on it now
	topic    *raftmeta.Topic
}

// alterTarget resolves a resource of AlterConfigs/IncrementalAlterConfigs.
func (b *Broker) alterTarget(img *raftmeta.Image, typ kmsg.ConfigResourceType, name string) (configTarget, error) {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		t, err := b.configTopic(img, name)
		if err != nil {
			return configTarget{}, err
		}
		return configTarget{resource: raftmeta.ConfigResourceTopic, name: name, current: t.Configs, topic: t}, nil
	case kmsg.ConfigResourceTypeBroker:
		node, err := b.brokerResource(name)
		if err != nil {
			return configTarget{}, err
		}
		ct := configTarget{resource: raftmeta.ConfigResourceBroker, name: name, current: img.BrokerConfigs}
		if node {
			ct.current = img.NodeConfigs[b.cfg.NodeID]
		}
		return ct, nil
	}
	return configTarget{}, adminErrorf(kerr.InvalidRequest, "Unsupported resource type: %v", typ)
}

// validate checks the complete new set of dynamic configs of a target.
func (ct *configTarget) validate(next map[string]string) error {
	if ct.resource == raftmeta.ConfigResourceTopic {
		return validateTopicConfigs(next)
	}
	var fixed []string
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if d := brokerConfigs[k]; d == nil || !d.dynamic {
			fixed = append(fixed, k)
		}
	}
	prefix := "Invalid config value for resource ConfigResource(type=BROKER, name='" + ct.name + "'): "
	if len(fixed) > 0 {
		return adminErrorf(kerr.InvalidRequest, "%sCannot update these configs dynamically: %s", prefix, strings.Join(fixed, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if err := brokerConfigs[k].check(next[k]); err != nil {
			return adminErrorf(kerr.InvalidRequest, "%s%s", prefix, err.Error())
		}
	}
	return nil
}

// changes are the records that turn the current configs into next.
func (ct *configTarget) changes(next map[string]string) []raftmeta.ConfigChange {
	var out []raftmeta.ConfigChange
	for _, k := range slices.Sorted(maps.Keys(ct.current)) {
		if _, ok := next[k]; !ok {
			out = append(out, raftmeta.ConfigChange{Resource: ct.resource, Name: ct.name, Key: k})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if old, ok := ct.current[k]; !ok || old != next[k] {
			out = append(out, raftmeta.ConfigChange{Resource: ct.resource, Name: ct.name, Key: k, Value: cfgStr(next[k])})
		}
	}
	return out
}

// handleAlterConfigs replaces the whole set of dynamic configs of each
// resource (the legacy AlterConfigs semantics).
func (b *Broker) handleAlterConfigs(ctx context.Context, rc *RequestContext, req *kmsg.AlterConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	img := b.meta.Image()
	dups := duplicateResources(len(req.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return req.Resources[i].ResourceType, req.Resources[i].ResourceName
	})
	for i, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		err := func() error {
			if dups[i] {
				return adminErrorf(kerr.InvalidRequest, "Duplicate resource in the request.")
			}
			if err := configDenied(rc, kmsg.ACLOperationAlterConfigs, r.ResourceType, r.ResourceName); err != nil {
				return err
			}
			ct, err := b.alterTarget(img, r.ResourceType, r.ResourceName)
			if err != nil {
				return err
			}
			next := map[string]string{}
			for _, c := range r.Configs {
				if c.Value == nil {
					return adminErrorf(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
				}
				if _, ok := next[c.Name]; ok {
					return adminErrorf(kerr.InvalidRequest, "Error due to duplicate config keys")
				}
				next[c.Name] = *c.Value
			}
			return b.applyConfigs(ctx, &ct, next, req.ValidateOnly)
		}()
		rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// handleIncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT
// operations to each resource's dynamic configs.
func (b *Broker) handleIncrementalAlterConfigs(ctx context.Context, rc *RequestContext, req *kmsg.IncrementalAlterConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	img := b.meta.Image()
	dups := duplicateResources(len(req.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return req.Resources[i].ResourceType, req.Resources[i].ResourceName
	})
	for i, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		err := func() error {
			if dups[i] {
				return adminErrorf(kerr.InvalidRequest, "Duplicate resource in the request.")
			}
			if h := b.configHandler(r.ResourceType); h != nil {
				return h.AlterConfigResource(ctx, rc, r.ResourceName, r.Configs, req.ValidateOnly)
			}
			if err := configDenied(rc, kmsg.ACLOperationAlterConfigs, r.ResourceType, r.ResourceName); err != nil {
				return err
			}
			ct, err := b.alterTarget(img, r.ResourceType, r.ResourceName)
			if err != nil {
				return err
			}
			next := maps.Clone(ct.current)
			if next == nil {
				next = map[string]string{}
			}
			defs := brokerConfigs
			if ct.resource == raftmeta.ConfigResourceTopic {
				defs = topicConfigs
			}
			seen := map[string]bool{}
			for _, c := range r.Configs {
				if seen[c.Name] {
					return adminErrorf(kerr.InvalidRequest, "Error due to duplicate config keys")
				}
				seen[c.Name] = true
				if c.Op != kmsg.IncrementalAlterConfigOpDelete && c.Value == nil {
					return adminErrorf(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
				}
				switch c.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					next[c.Name] = *c.Value
				case kmsg.IncrementalAlterConfigOpDelete:
					delete(next, c.Name)
				case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
					d := defs[c.Name]
					if d == nil && ct.resource == raftmeta.ConfigResourceTopic {
						return adminErrorf(kerr.InvalidConfig, "Unknown topic config name: %s", c.Name)
					}
					if d == nil || d.typ != kmsg.ConfigTypeList {
						return adminErrorf(kerr.InvalidConfig, "Config value append is not allowed for config key: %s", c.Name)
					}
					// Kafka starts from the value set on the resource, or
					// the config's default.
					old, ok := next[c.Name]
					if !ok && d.def != nil {
						old = *d.def
					}
					list := configList(old)
					for _, v := range configList(*c.Value) {
						if c.Op == kmsg.IncrementalAlterConfigOpAppend && !slices.Contains(list, v) {
							list = append(list, v)
						} else if c.Op == kmsg.IncrementalAlterConfigOpSubtract {
							list = slices.DeleteFunc(list, func(s string) bool { return s == v })
						}
					}
					next[c.Name] = strings.Join(list, ",")
				default:
					return adminErrorf(kerr.InvalidRequest, "Unknown config operation %d for %s", c.Op, c.Name)
				}
			}
			return b.applyConfigs(ctx, &ct, next, req.ValidateOnly)
		}()
		rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// duplicateResources marks resources named more than once in a request.
func duplicateResources(n int, at func(int) (kmsg.ConfigResourceType, string)) []bool {
	type key struct {
		t    kmsg.ConfigResourceType
		name string
	}
	count := map[key]int{}
	for i := range n {
		t, name := at(i)
		count[key{t, name}]++
	}
	dups := make([]bool, n)
	for i := range n {
		t, name := at(i)
		dups[i] = count[key{t, name}] > 1
	}
	return dups
}

// applyConfigs validates the new dynamic configs of a target, writes the
// difference through raftmeta and pushes the resulting log configs to the
// engine before the request is answered.
func (b *Broker) applyConfigs(ctx context.Context, ct *configTarget, next map[string]string, validateOnly bool) error {
	if err := ct.validate(next); err != nil {
		return err
	}
	changes := ct.changes(next)
	if ct.topic != nil {
		c := TopicChange{Topic: ct.name, Op: OpAlterConfigs}
		for _, ch := range changes {
			c.Keys = append(c.Keys, ch.Key)
		}
		if err := CheckTopicChange(b.cfg.Plugins, c); err != nil {
			return err
		}
	}
	if validateOnly || len(changes) == 0 {
		return nil
	}
	if err := b.meta.AlterConfigs(ctx, changes); err != nil {
		return err
	}
	// The metadata loop pushes the new log configs to the engine.
	if err := b.waitApplied(ctx, b.meta.Image().Index); err != nil {
		b.log.Warn("alter configs: waiting for metadata", "err", err)
	}
	return nil
}

// configDenied checks op on a config resource as Kafka does: topics by
// name, broker and broker-logger resources on the cluster.
func configDenied(rc *RequestContext, op kmsg.ACLOperation, typ kmsg.ConfigResourceType, name string) error {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		if !rc.Allowed(op, kmsg.ACLResourceTypeTopic, name) {
			return adminErrorf(kerr.TopicAuthorizationFailed, "Authorization failed.")
		}
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		if !rc.Allowed(op, kmsg.ACLResourceTypeCluster, clusterName) {
			return adminErrorf(kerr.ClusterAuthorizationFailed, "Authorization failed.")
		}
	}
	return nil
}
