// Package tandem builds a Tandem broker, a Kafka-compatible broker with
// Cluster Mirroring (KIP-1279), with the plugins that `tandem serve` runs:
// consumer groups, share groups, transactions, ACLs with SCRAM credentials
// and quotas, and mirroring.
//
// Each plugin can be left out at compile time with a build tag:
// tandem_omit_groups, tandem_omit_share, tandem_omit_txn, tandem_omit_acl,
// tandem_omit_mirror.
// A program that wires plugins of its own calls server.New, which builds a
// broker with exactly the plugins it is given.
package tandem

import (
	"log/slog"

	"github.com/tandem-kafka/tandem/plugins/builtin"
	"github.com/tandem-kafka/tandem/server"
)

// NewBroker returns a broker configured by cfg with the plugins of this
// build (Plugins), configured from cfg.Props and logging through
// cfg.Logger, followed by those already in cfg.Plugins. Start it with
// Start and stop it with Close.
func NewBroker(cfg server.Config) (*server.Broker, error) {
	ps, err := Plugins(cfg.Props, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Plugins = append(ps, cfg.Plugins...)
	return server.New(cfg)
}

// Plugins returns the plugins compiled into this build, configured from
// the broker properties, for server.Config.Plugins. A nil log means
// slog.Default(). An invalid property is an error naming it.
//
// plugins/builtin is the one place that names every plugin; plugin
// packages never register themselves into global state, so that a
// process may run many brokers. Each plugin is added by a with<Plugin>
// function in its own file there, guarded by a build tag, with a twin
// under the opposite tag that adds nothing.
func Plugins(props map[string]string, log *slog.Logger) ([]any, error) {
	if log == nil {
		log = slog.Default()
	}
	return builtin.Plugins(props, log)
}
