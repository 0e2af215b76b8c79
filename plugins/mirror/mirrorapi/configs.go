package mirrorapi

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The MIRROR config resource (type 64).

// ConfigResourceType implements plugin.ConfigResourceHandler.
func (h *Handler) ConfigResourceType() kmsg.ConfigResourceType { return kmsg.ConfigResourceType(64) }

// DescribeConfigResource implements plugin.ConfigResourceHandler. Secrets
// are reported as sensitive with a null value, never in clear.
func (h *Handler) DescribeConfigResource(ctx context.Context, rc *plugin.RequestContext, name string, keys []string) ([]kmsg.DescribeConfigsResponseResourceConfig, error) {
	if err := Authorized(rc, kmsg.ACLOperationDescribeConfigs, name); err != nil {
		return nil, err
	}
	m := h.b.Mirrors(ctx, name).Mirrors[name]
	if m == nil {
		return nil, fmt.Errorf("mirror %s does not exist: %w", name, mirrorproto.ErrMirrorNotFound)
	}
	var out []kmsg.DescribeConfigsResponseResourceConfig
	for _, k := range slices.Sorted(maps.Keys(m.Configs)) {
		if keys != nil && !slices.Contains(keys, k) {
			continue
		}
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Source, c.ConfigType = k, kmsg.ConfigSourceDynamicTopicConfig, kmsg.ConfigTypeString
		c.IsSensitive = mirrorcfg.Secret(k)
		if !c.IsSensitive {
			v := m.Configs[k]
			c.Value = &v
		}
		out = append(out, c)
	}
	return out, nil
}

// AlterConfigResource implements plugin.ConfigResourceHandler.
func (h *Handler) AlterConfigResource(ctx context.Context, rc *plugin.RequestContext, name string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig, validateOnly bool) error {
	if err := Authorized(rc, kmsg.ACLOperationAlterConfigs, name); err != nil {
		return err
	}
	m := h.b.Mirrors(ctx, name).Mirrors[name]
	if m == nil {
		return fmt.Errorf("mirror %s does not exist: %w", name, mirrorproto.ErrMirrorNotFound)
	}
	next := maps.Clone(m.Configs)
	if next == nil {
		next = map[string]string{}
	}
	for _, op := range ops {
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if op.Value == nil {
				return fmt.Errorf("null value for %s: %w", op.Name, kerr.InvalidRequest)
			}
			next[op.Name] = *op.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(next, op.Name)
		default:
			return fmt.Errorf("operation %d on mirror config %s is not supported: %w", op.Op, op.Name, kerr.InvalidRequest)
		}
	}
	if err := h.b.CheckConfigs(next); err != nil {
		return err
	}
	if err := mirrorcfg.PrefixChange(m.Configs, next); err != nil {
		return fmt.Errorf("%v: %w", err, kerr.InvalidConfig)
	}
	if validateOnly {
		return nil
	}
	return h.b.AlterConfigs(ctx, name, next)
}
