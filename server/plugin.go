package server

import (
	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The plugin API (every hook, Host, the request context, the error
// codes, the contracts between plugins) is package plugin. The broker
// finds a plugin's hooks in Config.Plugins by type assertion (see New)
// and is the plugins' Host (pluginHost: the broker, knowing which plugin
// it serves).

var (
	_ plugin.Host               = pluginHost{}
	_ plugin.ReplicaConvergence = (*Broker)(nil)
)

// RequestContext is what a handler knows of its request; handlers of the
// broker and of plugins share it.
type RequestContext = plugin.RequestContext

// NodeID implements plugin.Host.
func (b *Broker) NodeID() int32 { return b.cfg.NodeID }

// Engine implements plugin.Host.
func (b *Broker) Engine() *engine.Engine { return b.engine }

// Metadata implements plugin.Host.
func (b *Broker) Metadata() *raftmeta.Controller { return b.meta }

// Plugins implements plugin.Host.
func (b *Broker) Plugins() []any { return b.cfg.Plugins }
