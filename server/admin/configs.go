package admin

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/config"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// HandleDescribeConfigs describes topics and brokers. A broker resource
// named "" describes the dynamic cluster-wide defaults only, a resource
// named by this broker's ID every broker config, as Kafka does.
func (a *Admin) HandleDescribeConfigs(ctx context.Context, rc *plugin.RequestContext, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	img := a.Meta.Image()
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		want := func(name string) bool { return r.ConfigNames == nil || slices.Contains(r.ConfigNames, name) }
		add := func(d *config.Def, cv config.Value, readOnly bool) {
			if !want(d.Name) {
				return
			}
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value, c.ReadOnly, c.IsSensitive = d.Name, cv.Value, readOnly, d.Sensitive
			if d.Sensitive {
				c.Value = nil
			}
			c.Source = cv.Source
			c.IsDefault = cv.Source == kmsg.ConfigSourceDefaultConfig
			if req.IncludeSynonyms {
				c.ConfigSynonyms = cv.Synonyms
				if d.Sensitive {
					for i := range c.ConfigSynonyms {
						c.ConfigSynonyms[i].Value = nil
					}
				}
			}
			c.ConfigType = d.Type
			if req.IncludeDocumentation {
				c.Documentation = cfgStr(d.Doc)
			}
			rr.Configs = append(rr.Configs, c)
		}
		if h := a.configHandler(r.ResourceType); h != nil {
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
			t, err := a.configTopic(img, r.ResourceName)
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
				break
			}
			l := a.Layers(img, t)
			for _, d := range config.TopicList {
				add(d, l.TopicConfig(d), false)
			}
		case kmsg.ConfigResourceTypeBroker:
			node, err := a.brokerResource(r.ResourceName)
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
				break
			}
			if !node {
				// The cluster-wide default resource holds only what was
				// set dynamically.
				for _, k := range slices.Sorted(maps.Keys(img.BrokerConfigs)) {
					d := config.Brokers[k]
					if d == nil {
						d = &config.Def{Name: k, Type: kmsg.ConfigTypeString}
					}
					v := cfgStr(img.BrokerConfigs[k])
					cv := config.Value{Value: v, Source: kmsg.ConfigSourceDynamicDefaultBrokerConfig}
					cv.Add(k, v, cv.Source)
					add(d, cv, false)
				}
				break
			}
			id := strconv.Itoa(int(a.NodeID))
			add(&config.Def{Name: "node.id", Type: kmsg.ConfigTypeInt, Doc: "The node ID of this broker."},
				config.Value{Value: &id, Source: kmsg.ConfigSourceStaticBrokerConfig}, true)
			l := a.Layers(img, nil)
			for _, d := range config.BrokerList {
				add(d, l.Broker(d), !d.Dynamic)
			}
		default:
			rr.ErrorCode, rr.ErrorMessage = adminErrCode(config.Errorf(kerr.InvalidRequest, "Unsupported resource type: %v", r.ResourceType))
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// configTopic finds a topic named by a config resource.
func (a *Admin) configTopic(img *metadata.Image, name string) (*metadata.Topic, error) {
	if err := raftmeta.ValidTopicName(name); err != nil {
		return nil, err
	}
	t := img.Topics[name]
	if t == nil {
		return nil, config.Errorf(kerr.UnknownTopicOrPartition, "The topic '%s' does not exist.", name)
	}
	return t, nil
}

// brokerResource checks a broker resource name: "" is the cluster-wide
// default (node false), this broker's ID is this broker (node true).
func (a *Admin) brokerResource(name string) (node bool, err error) {
	if name == "" {
		return false, nil
	}
	if id, err := strconv.ParseInt(name, 10, 32); err == nil && int32(id) == a.NodeID {
		return true, nil
	}
	return false, config.Errorf(kerr.InvalidRequest, "Unexpected broker id, expected %d or empty string, but received %s", a.NodeID, name)
}

// layersOf is layers for a given image.
func (a *Admin) Layers(img *metadata.Image, t *metadata.Topic) config.Layers {
	l := config.Layers{Static: a.Static, Dynamic: img.BrokerConfigs, Node: img.NodeConfigs[a.NodeID]}
	if t != nil {
		l.Topic = t.Configs
		if l.Topic == nil {
			l.Topic = map[string]string{}
		}
	}
	return l
}

// configTarget is one resource of an alter request, resolved.
type configTarget struct {
	resource metadata.ConfigResource
	name     string
	current  map[string]string // dynamic configs set on it now
	topic    *metadata.Topic
}

// alterTarget resolves a resource of AlterConfigs/IncrementalAlterConfigs.
func (a *Admin) alterTarget(img *metadata.Image, typ kmsg.ConfigResourceType, name string) (configTarget, error) {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		t, err := a.configTopic(img, name)
		if err != nil {
			return configTarget{}, err
		}
		return configTarget{resource: metadata.ConfigResourceTopic, name: name, current: t.Configs, topic: t}, nil
	case kmsg.ConfigResourceTypeBroker:
		node, err := a.brokerResource(name)
		if err != nil {
			return configTarget{}, err
		}
		ct := configTarget{resource: metadata.ConfigResourceBroker, name: name, current: img.BrokerConfigs}
		if node {
			ct.current = img.NodeConfigs[a.NodeID]
		}
		return ct, nil
	}
	return configTarget{}, config.Errorf(kerr.InvalidRequest, "Unsupported resource type: %v", typ)
}

// validate checks the complete new set of dynamic configs of a target.
func (ct *configTarget) validate(next map[string]string) error {
	if ct.resource == metadata.ConfigResourceTopic {
		return config.ValidateTopic(next)
	}
	var fixed []string
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if d := config.Brokers[k]; d == nil || !d.Dynamic {
			fixed = append(fixed, k)
		}
	}
	prefix := "Invalid config value for resource ConfigResource(type=BROKER, name='" + ct.name + "'): "
	if len(fixed) > 0 {
		return config.Errorf(kerr.InvalidRequest, "%sCannot update these configs dynamically: %s", prefix, strings.Join(fixed, ", "))
	}
	var perBroker []string
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if ct.name == "" && config.Brokers[k].PerBroker && next[k] != ct.current[k] {
			perBroker = append(perBroker, k)
		}
	}
	if len(perBroker) > 0 {
		return config.Errorf(kerr.InvalidRequest, "%sCannot update these configs at default cluster level, broker id must be specified: %s", prefix, strings.Join(perBroker, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if err := config.Brokers[k].Check(next[k]); err != nil {
			return config.Errorf(kerr.InvalidRequest, "%s%s", prefix, err.Error())
		}
	}
	return nil
}

// changes are the records that turn the current configs into next.
func (ct *configTarget) changes(next map[string]string) []metadata.ConfigChange {
	var out []metadata.ConfigChange
	for _, k := range slices.Sorted(maps.Keys(ct.current)) {
		if _, ok := next[k]; !ok {
			out = append(out, metadata.ConfigChange{Resource: ct.resource, Name: ct.name, Key: k})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if old, ok := ct.current[k]; !ok || old != next[k] {
			out = append(out, metadata.ConfigChange{Resource: ct.resource, Name: ct.name, Key: k, Value: cfgStr(next[k])})
		}
	}
	return out
}

// HandleAlterConfigs replaces the whole set of dynamic configs of each
// resource (the legacy AlterConfigs semantics).
func (a *Admin) HandleAlterConfigs(ctx context.Context, rc *plugin.RequestContext, req *kmsg.AlterConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	img := a.Meta.Image()
	dups := duplicateResources(len(req.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return req.Resources[i].ResourceType, req.Resources[i].ResourceName
	})
	for i, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		err := func() error {
			if dups[i] {
				return config.Errorf(kerr.InvalidRequest, "Duplicate resource in the request.")
			}
			if err := configDenied(rc, kmsg.ACLOperationAlterConfigs, r.ResourceType, r.ResourceName); err != nil {
				return err
			}
			ct, err := a.alterTarget(img, r.ResourceType, r.ResourceName)
			if err != nil {
				return err
			}
			next := map[string]string{}
			for _, c := range r.Configs {
				if c.Value == nil {
					return config.Errorf(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
				}
				if _, ok := next[c.Name]; ok {
					return config.Errorf(kerr.InvalidRequest, "Error due to duplicate config keys")
				}
				next[c.Name] = *c.Value
			}
			return a.applyConfigs(ctx, &ct, next, req.ValidateOnly)
		}()
		rr.ErrorCode, rr.ErrorMessage = adminErrCode(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// HandleIncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT
// operations to each resource's dynamic configs.
func (a *Admin) HandleIncrementalAlterConfigs(ctx context.Context, rc *plugin.RequestContext, req *kmsg.IncrementalAlterConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	img := a.Meta.Image()
	dups := duplicateResources(len(req.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return req.Resources[i].ResourceType, req.Resources[i].ResourceName
	})
	for i, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		err := func() error {
			if dups[i] {
				return config.Errorf(kerr.InvalidRequest, "Duplicate resource in the request.")
			}
			if h := a.configHandler(r.ResourceType); h != nil {
				return h.AlterConfigResource(ctx, rc, r.ResourceName, r.Configs, req.ValidateOnly)
			}
			if err := configDenied(rc, kmsg.ACLOperationAlterConfigs, r.ResourceType, r.ResourceName); err != nil {
				return err
			}
			ct, err := a.alterTarget(img, r.ResourceType, r.ResourceName)
			if err != nil {
				return err
			}
			next := maps.Clone(ct.current)
			if next == nil {
				next = map[string]string{}
			}
			defs := config.Brokers
			if ct.resource == metadata.ConfigResourceTopic {
				defs = config.Topics
			}
			seen := map[string]bool{}
			for _, c := range r.Configs {
				if seen[c.Name] {
					return config.Errorf(kerr.InvalidRequest, "Error due to duplicate config keys")
				}
				seen[c.Name] = true
				if c.Op != kmsg.IncrementalAlterConfigOpDelete && c.Value == nil {
					return config.Errorf(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
				}
				switch c.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					next[c.Name] = *c.Value
				case kmsg.IncrementalAlterConfigOpDelete:
					delete(next, c.Name)
				case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
					d := defs[c.Name]
					if d == nil && ct.resource == metadata.ConfigResourceTopic {
						return config.Errorf(kerr.InvalidConfig, "Unknown topic config name: %s", c.Name)
					}
					if d == nil || d.Type != kmsg.ConfigTypeList {
						return config.Errorf(kerr.InvalidConfig, "Config value append is not allowed for config key: %s", c.Name)
					}
					// Kafka starts from the value set on the resource, or
					// the config's default.
					old, ok := next[c.Name]
					if !ok && d.Default != nil {
						old = *d.Default
					}
					list := config.List(old)
					for _, v := range config.List(*c.Value) {
						if c.Op == kmsg.IncrementalAlterConfigOpAppend && !slices.Contains(list, v) {
							list = append(list, v)
						} else if c.Op == kmsg.IncrementalAlterConfigOpSubtract {
							list = slices.DeleteFunc(list, func(s string) bool { return s == v })
						}
					}
					next[c.Name] = strings.Join(list, ",")
				default:
					return config.Errorf(kerr.InvalidRequest, "Unknown config operation %d for %s", c.Op, c.Name)
				}
			}
			return a.applyConfigs(ctx, &ct, next, req.ValidateOnly)
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
func (a *Admin) applyConfigs(ctx context.Context, ct *configTarget, next map[string]string, validateOnly bool) error {
	if err := ct.validate(next); err != nil {
		return err
	}
	changes := ct.changes(next)
	if ct.topic != nil {
		c := plugin.TopicChange{Topic: ct.name, Op: plugin.OpAlterConfigs}
		for _, ch := range changes {
			c.Keys = append(c.Keys, ch.Key)
		}
		if err := plugin.CheckTopicChange(a.Plugins, c); err != nil {
			return err
		}
	}
	if validateOnly || len(changes) == 0 {
		return nil
	}
	if err := a.Meta.AlterConfigs(ctx, changes); err != nil {
		return err
	}
	// The metadata loop pushes the new log configs to the engine.
	if err := a.WaitApplied(ctx, a.Meta.Image().Index); err != nil {
		a.Log.Warn("alter configs: waiting for metadata", "err", err)
	}
	return nil
}

// configDenied checks op on a config resource as Kafka does: topics by
// name, broker and broker-logger resources on the cluster.
func configDenied(rc *plugin.RequestContext, op kmsg.ACLOperation, typ kmsg.ConfigResourceType, name string) error {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		if !rc.Allowed(op, kmsg.ACLResourceTypeTopic, name) {
			return config.Errorf(kerr.TopicAuthorizationFailed, "Authorization failed.")
		}
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		if !rc.Allowed(op, kmsg.ACLResourceTypeCluster, clusterName) {
			return config.Errorf(kerr.ClusterAuthorizationFailed, "Authorization failed.")
		}
	}
	return nil
}
