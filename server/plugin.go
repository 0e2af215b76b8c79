package server

import (
	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// The plugin API (every hook, Host, the request context, the error
// codes, the contracts between plugins) is package plugin. The broker
// finds a plugin's hooks in Config.Plugins by type assertion (see New)
// and is the plugins' Host.

var _ plugin.Host = (*Broker)(nil)

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

// The names below moved to package plugin. They stay here, as aliases,
// for plugins/mirror until it imports package plugin.

// Deprecated: for plugins/mirror until it moves to package plugin.
type (
	LeaderChange          = plugin.LeaderChange
	LeaderObserver        = plugin.LeaderObserver
	MetadataObserver      = plugin.MetadataObserver
	Lifecycle             = plugin.Lifecycle
	PropsOwner            = plugin.PropsOwner
	Host                  = plugin.Host
	InternalTopic         = plugin.InternalTopic
	CoordinatorLocator    = plugin.CoordinatorLocator
	TopicPartition        = plugin.TopicPartition
	CommittedOffset       = plugin.CommittedOffset
	GroupOffsets          = plugin.GroupOffsets
	ConfigResourceHandler = plugin.ConfigResourceHandler
	APIHandler            = plugin.APIHandler
	ACLStore              = plugin.ACLStore
	CoordinatorAuthorizer = plugin.CoordinatorAuthorizer
	TopicGuard            = plugin.TopicGuard
	TopicChange           = plugin.TopicChange
	TopicOp               = plugin.TopicOp
)

// Deprecated: for plugins/mirror until it moves to package plugin.
const (
	CoordinatorGroup   = plugin.CoordinatorGroup
	CoordinatorMirror  = plugin.CoordinatorMirror
	ACLResourceMirror  = plugin.ACLResourceMirror
	OpWrite            = plugin.OpWrite
	OpTxnMarkers       = plugin.OpTxnMarkers
	OpDeleteRecords    = plugin.OpDeleteRecords
	OpCreatePartitions = plugin.OpCreatePartitions
	OpDeleteTopic      = plugin.OpDeleteTopic
	OpAlterConfigs     = plugin.OpAlterConfigs
)

// ErrorCode is plugin.ErrorCode.
//
// Deprecated: for plugins/mirror until it moves to package plugin.
func ErrorCode(err error) int16 { return plugin.ErrorCode(err) }

// CheckTopicChange is plugin.CheckTopicChange.
func CheckTopicChange(plugins []any, c TopicChange) error { return plugin.CheckTopicChange(plugins, c) }
