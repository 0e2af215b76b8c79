package mirror

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// CreateMirror (key 94) of KIP-1279 (Cluster Mirroring): the plugin's side.

func (p *Plugin) createMirror(ctx context.Context, req *mirrorproto.CreateMirrorRequest) error {
	if req.MirrorName == nil || *req.MirrorName == "" {
		return fmt.Errorf("a mirror needs a name: %w", kerr.InvalidRequest)
	}
	name := *req.MirrorName
	configs := map[string]string{}
	for _, c := range req.Configs {
		if c.Value != nil {
			configs[c.Name] = *c.Value
		}
	}
	if _, err := clientOpts(configs, p.cfg); err != nil {
		return err
	}
	if p.Image().Mirrors[name] != nil {
		return fmt.Errorf("mirror %s already exists: %w", name, mirrorproto.ErrMirrorAlreadyExists)
	}
	reachable, err := p.probeSource(ctx, configs)
	if err != nil {
		return err
	}
	if err := p.checkNewMirror(ctx, name, configs, reachable); err != nil {
		return err
	}
	if err := p.ensureStateTopic(ctx); err != nil {
		return err
	}
	return p.Host().Metadata().CreateMirror(ctx, name, configs)
}
