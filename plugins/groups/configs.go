package groups

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Group configs (the GROUP config resource, type 32, as Kafka's): a
// group may override the broker's defaults with
// kafka-configs --entity-type groups. They are stored in the metadata
// quorum like topic configs, and read from the latest image when used.

var _ plugin.ConfigResourceHandler = (*Plugin)(nil)

// groupConfig is a config a group may set.
type groupConfig struct {
	name string
	typ  kmsg.ConfigType
	// def is the broker's value; check validates a group's value.
	def   func(p *Plugin) string
	check func(p *Plugin, v string) error
}

func msConfig(name string, def func(p *Plugin) time.Duration, bounds func(p *Plugin) (time.Duration, time.Duration)) groupConfig {
	return groupConfig{name: name, typ: kmsg.ConfigTypeInt,
		def: func(p *Plugin) string { return strconv.FormatInt(def(p).Milliseconds(), 10) },
		check: func(p *Plugin, v string) error {
			n, err := strconv.ParseInt(v, 10, 32)
			lo, hi := bounds(p)
			if err != nil || n < lo.Milliseconds() || n > hi.Milliseconds() {
				return fmt.Errorf("%s=%q: want an integer from %d to %d", name, v, lo.Milliseconds(), hi.Milliseconds())
			}
			return nil
		}}
}

// groupConfigs are the configs of the GROUP resource, by name.
var groupConfigs = func() map[string]groupConfig {
	all := []groupConfig{
		msConfig("consumer.session.timeout.ms", func(p *Plugin) time.Duration { return p.cfg.Consumer.Session },
			func(p *Plugin) (time.Duration, time.Duration) {
				return p.cfg.Consumer.MinSession, p.cfg.Consumer.MaxSession
			}),
		msConfig("consumer.heartbeat.interval.ms", func(p *Plugin) time.Duration { return p.cfg.Consumer.Heartbeat },
			func(p *Plugin) (time.Duration, time.Duration) {
				return p.cfg.Consumer.MinHeartbeat, p.cfg.Consumer.MaxHeartbeat
			}),
		msConfig("share.session.timeout.ms", func(p *Plugin) time.Duration { return p.cfg.Share.Session },
			func(p *Plugin) (time.Duration, time.Duration) { return p.cfg.Share.MinSession, p.cfg.Share.MaxSession }),
		msConfig("share.heartbeat.interval.ms", func(p *Plugin) time.Duration { return p.cfg.Share.Heartbeat },
			func(p *Plugin) (time.Duration, time.Duration) {
				return p.cfg.Share.MinHeartbeat, p.cfg.Share.MaxHeartbeat
			}),
		msConfig("share.record.lock.duration.ms", func(p *Plugin) time.Duration { return p.cfg.RecordLock },
			func(p *Plugin) (time.Duration, time.Duration) { return p.cfg.MinRecordLock, p.cfg.MaxRecordLock }),
		{name: "share.delivery.count.limit", typ: kmsg.ConfigTypeInt,
			def: func(p *Plugin) string { return strconv.Itoa(p.cfg.DeliveryLimit) },
			check: func(_ *Plugin, v string) error {
				if n, err := strconv.Atoi(v); err != nil || n < 2 || n > 10 {
					return fmt.Errorf("share.delivery.count.limit=%q: want an integer from 2 to 10", v)
				}
				return nil
			}},
		{name: "share.auto.offset.reset", typ: kmsg.ConfigTypeString,
			def: func(*Plugin) string { return "latest" },
			check: func(_ *Plugin, v string) error {
				_, _, err := parseAutoOffsetReset(v)
				return err
			}},
		{name: "share.isolation.level", typ: kmsg.ConfigTypeString,
			def: func(*Plugin) string { return "read_uncommitted" },
			check: func(_ *Plugin, v string) error {
				if v != "read_uncommitted" && v != "read_committed" {
					return fmt.Errorf("share.isolation.level=%q: want read_uncommitted or read_committed", v)
				}
				return nil
			}},
	}
	m := map[string]groupConfig{}
	for _, c := range all {
		m[c.name] = c
	}
	return m
}()

// groupConfigValue is a group's value of a config: its own, else the
// broker's.
func (p *Plugin) groupConfigValue(group, name string) string {
	if img := p.Image(); img != nil {
		if v, ok := img.GroupConfigs[group][name]; ok {
			return v
		}
	}
	return groupConfigs[name].def(p)
}

// groupConfigMs is a millisecond config of a group.
func (p *Plugin) groupConfigMs(group, name string) time.Duration {
	n, _ := strconv.ParseInt(p.groupConfigValue(group, name), 10, 64)
	return time.Duration(n) * time.Millisecond
}

// sessionTimeout is the session timeout of a modern group's members.
func (p *Plugin) sessionTimeout(g *group) time.Duration {
	if g.kind == kindShare {
		return p.groupConfigMs(g.name, "share.session.timeout.ms")
	}
	return p.groupConfigMs(g.name, "consumer.session.timeout.ms")
}

// heartbeatInterval is the heartbeat interval of a modern group's members.
func (p *Plugin) heartbeatInterval(group string, kind groupKind) int32 {
	if kind == kindShare {
		return int32(p.groupConfigMs(group, "share.heartbeat.interval.ms").Milliseconds())
	}
	return int32(p.groupConfigMs(group, "consumer.heartbeat.interval.ms").Milliseconds())
}

// ConfigResourceType implements plugin.ConfigResourceHandler.
func (p *Plugin) ConfigResourceType() kmsg.ConfigResourceType {
	return kmsg.ConfigResourceTypeGroupConfig
}

// DescribeConfigResource implements plugin.ConfigResourceHandler: every
// group config, the group's own (source GROUP_CONFIG) or the broker's.
func (p *Plugin) DescribeConfigResource(_ context.Context, rc *plugin.RequestContext, name string, keys []string) ([]kmsg.DescribeConfigsResponseResourceConfig, error) {
	if !rc.Allowed(kmsg.ACLOperationDescribeConfigs, kmsg.ACLResourceTypeGroup, name) {
		return nil, kerr.GroupAuthorizationFailed
	}
	var own map[string]string
	if img := p.Image(); img != nil {
		own = img.GroupConfigs[name]
	}
	var out []kmsg.DescribeConfigsResponseResourceConfig
	for _, k := range slices.Sorted(maps.Keys(groupConfigs)) {
		if keys != nil && !slices.Contains(keys, k) {
			continue
		}
		gc := groupConfigs[k]
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.ConfigType = k, gc.typ
		v, ok := own[k]
		if ok {
			c.Source = kmsg.ConfigSourceGroupConfig
		} else {
			v, c.Source, c.IsDefault = gc.def(p), kmsg.ConfigSourceDefaultConfig, true
		}
		c.Value = &v
		out = append(out, c)
	}
	return out, nil
}

// AlterConfigResource implements plugin.ConfigResourceHandler: SET and
// DELETE of group configs, each value checked against the broker's
// bounds.
func (p *Plugin) AlterConfigResource(ctx context.Context, rc *plugin.RequestContext, name string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig, validateOnly bool) error {
	if !rc.Allowed(kmsg.ACLOperationAlterConfigs, kmsg.ACLResourceTypeGroup, name) {
		return kerr.GroupAuthorizationFailed
	}
	if name == "" {
		return fmt.Errorf("empty group name: %w", kerr.InvalidRequest)
	}
	host := p.Host()
	if host == nil {
		return kerr.CoordinatorNotAvailable
	}
	var changes []metadata.ConfigChange
	for _, op := range ops {
		gc, ok := groupConfigs[op.Name]
		if !ok {
			return fmt.Errorf("unknown group config %s: %w", op.Name, kerr.InvalidConfig)
		}
		ch := metadata.ConfigChange{Resource: metadata.ConfigResourceGroup, Name: name, Key: op.Name}
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if op.Value == nil {
				return fmt.Errorf("null value for %s: %w", op.Name, kerr.InvalidConfig)
			}
			if err := gc.check(p, *op.Value); err != nil {
				return fmt.Errorf("%v: %w", err, kerr.InvalidConfig)
			}
			ch.Value = op.Value
		case kmsg.IncrementalAlterConfigOpDelete:
		default:
			return fmt.Errorf("operation %d on group config %s is not supported: %w", op.Op, op.Name, kerr.InvalidRequest)
		}
		changes = append(changes, ch)
	}
	if validateOnly {
		return nil
	}
	return host.Metadata().AlterConfigs(ctx, changes)
}
