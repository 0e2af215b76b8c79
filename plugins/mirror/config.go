package mirror

import (
	"crypto/tls"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/internal/kafkaclient"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
)

// A mirror's configs (the MIRROR config resource) are mirrorcfg's: their
// keys, their validation, and the client options for its source cluster.

// clientOpts turns a mirror's configs into franz-go options for a client
// of the source cluster (mirrorcfg.Timeouts.ClientOpts), with this
// broker's timeouts.
func clientOpts(c map[string]string, cfg Config) ([]kgo.Opt, error) {
	return mirrorcfg.Timeouts{Connect: cfg.ConnectTimeout, Request: cfg.RequestTimeout}.ClientOpts(c)
}

func tlsConfig(c map[string]string) (*tls.Config, error) {
	tc, err := kafkaclient.TLSConfig(c)
	if err != nil {
		return nil, fmt.Errorf("mirror config %v: %w", err, kerr.InvalidConfig)
	}
	return tc, nil
}
