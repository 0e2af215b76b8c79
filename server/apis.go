package server

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/admin"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/wire"
)

// handler answers one request of the key it is registered for, decoded
// into the type the key's NewRequest gave. A nil response means none is
// sent; an error closes the connection. It is a plugin.API's Handle: the
// broker's keys and its plugins' are both plugin.APIs, made by
// plugin.Handle (or plugin.Answer).
type handler func(ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error)

// apiTable is what the broker serves: its own keys and its plugins'.
type apiTable = wire.APIs[handler]

func versions(key kmsg.Key, min, max int16) kmsg.ApiVersionsResponseApiKey {
	return kmsg.ApiVersionsResponseApiKey{ApiKey: key.Int16(), MinVersion: min, MaxVersion: max}
}

// clusterName is the name of the one CLUSTER resource.
const clusterName = plugin.ClusterResource

// byBroker is who registers the broker's own keys in its table.
const byBroker = "the broker"

// coreAPIs is exactly what this broker serves of its own: ApiVersions
// tells the truth, and a request for a key or version outside it (and
// its plugins' keys) closes the connection. Minimums follow what current
// clients need: Fetch from v4 (record batches with LastStableOffset, what
// the Java 4.x client requires), Produce from v0 (message sets are
// refused per batch, not per request), ListOffsets from v0 (sarama sends
// it to a cluster it is not told is 0.10.1 or newer). The SASL keys have
// no handler: the connection answers them (server/network/auth.go)
// before any request is dispatched. Each key is a plugin.API, as a
// plugin's are (plugin.Handle): the request as the type kmsg (or
// servedAPIs, for CreateTopics v8) decoded it into.
func coreAPIs(t *apiTable, s coreServers) []plugin.API {
	v := &apiVersions{apis: t, nodeID: s.nodeID, plugins: s.plugins, applied: s.applied}
	return []plugin.API{
		plugin.Handle(kmsg.Produce, 0, 13, s.produce.handleProduce),       // v13: topic IDs
		plugin.Handle(kmsg.Fetch, 4, 18, s.fetch.handleFetch),             // v13+: topic IDs
		plugin.Handle(kmsg.ListOffsets, 0, 10, s.admin.HandleListOffsets), // v0: sarama's default (Burrow)
		plugin.Handle(kmsg.Metadata, 0, 13, s.admin.HandleMetadata),
		{Versions: versions(kmsg.SASLHandshake, 0, 1)},
		plugin.Handle(kmsg.ApiVersions, 0, 5, v.handle), // v5: KIP-1242 cluster/node check
		{ // v8: KIP-1279's MirrorInfo, which kmsg does not know
			Versions: versions(kmsg.CreateTopics, 2, 8),
			Handle: func(ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error) {
				if r, ok := req.(*admin.CreateTopicsRequest); ok {
					return s.admin.HandleCreateTopics(ctx, rc, &r.CreateTopicsRequest, r.MirrorIDs)
				}
				return s.admin.HandleCreateTopics(ctx, rc, req.(*kmsg.CreateTopicsRequest), nil)
			},
		},
		plugin.Handle(kmsg.DeleteTopics, 1, 6, s.admin.HandleDeleteTopics),
		plugin.Handle(kmsg.DeleteRecords, 0, 2, s.admin.HandleDeleteRecords),
		plugin.Handle(kmsg.InitProducerID, 0, 5, s.admin.HandleInitProducerID),
		plugin.Handle(kmsg.OffsetForLeaderEpoch, 2, 4, s.admin.HandleOffsetForLeaderEpoch),
		plugin.Handle(kmsg.DescribeConfigs, 1, 4, s.admin.HandleDescribeConfigs),
		plugin.Handle(kmsg.DescribeLogDirs, 1, 4, s.admin.HandleDescribeLogDirs),
		{Versions: versions(kmsg.SASLAuthenticate, 0, 2)},
		plugin.Handle(kmsg.AlterConfigs, 0, 2, s.admin.HandleAlterConfigs),
		plugin.Handle(kmsg.CreatePartitions, 0, 3, s.admin.HandleCreatePartitions),
		plugin.Handle(kmsg.ElectLeaders, 0, 2, s.admin.HandleElectLeaders),
		plugin.Handle(kmsg.IncrementalAlterConfigs, 0, 1, s.admin.HandleIncrementalAlterConfigs),
		plugin.Handle(kmsg.AlterPartitionAssignments, 0, 1, s.admin.HandleAlterPartitionReassignments),
		plugin.Handle(kmsg.ListPartitionReassignments, 0, 0, s.admin.HandleListPartitionReassignments),
		plugin.Handle(kmsg.DescribeCluster, 0, 2, s.admin.HandleDescribeCluster), // v2: fenced brokers
		plugin.Handle(kmsg.DescribeProducers, 0, 0, s.admin.HandleDescribeProducers),
		plugin.Handle(kmsg.DescribeTopicPartitions, 0, 0, s.admin.HandleDescribeTopicPartitions),
	}
}

// coreServers are the servers of the broker's own keys: what its table
// of APIs takes of the broker.
type coreServers struct {
	nodeID  int32
	plugins []any // Config.Plugins
	applied *appliedState
	produce *producer
	fetch   *fetcher
	admin   *admin.Admin
	coord   *coordinators // FindCoordinator, when a plugin locates coordinators
}

// newAPITable registers what the broker serves: its own keys (coreAPIs),
// then every plugin's (plugin.APIHandler), each plugin's handlers through
// pluginHandler, then FindCoordinator when a plugin locates coordinators
// (plugin.CoordinatorLocator). state is the plugins' state, read per
// request (pluginHandler).
func newAPITable(s coreServers, state func() *pluginState) (*apiTable, error) {
	t := new(apiTable)
	if err := register(t, byBroker, coreAPIs(t, s), nil); err != nil {
		return nil, err
	}
	for _, h := range plugin.All[plugin.APIHandler](s.plugins) {
		apis := h.APIs()
		for _, a := range apis {
			if a.Handle == nil {
				return nil, fmt.Errorf("plugin %T: api key %d has no handler", h, a.Versions.ApiKey)
			}
		}
		contain := func(handle handler) handler { return pluginHandler(h, handle, state) }
		if err := register(t, fmt.Sprintf("plugin %T", h), apis, contain); err != nil {
			return nil, fmt.Errorf("plugin %T: %w", h, err)
		}
	}
	if _, ok := plugin.Find[plugin.CoordinatorLocator](s.plugins); ok {
		// v4+ batches keys (KIP-699), v6 adds share groups' key type.
		find := plugin.Handle(kmsg.FindCoordinator, 0, 6, s.coord.handleFindCoordinator)
		if err := register(t, byBroker, []plugin.API{find}, nil); err != nil {
			return nil, fmt.Errorf("FindCoordinator for CoordinatorLocator plugins: %w", err)
		}
	}
	return t, nil
}

// register adds apis to t as served by by, each handler through wrap
// (nil: as it is); a key without a handler (the SASL keys) keeps none.
func register(t *apiTable, by string, apis []plugin.API, wrap func(handler) handler) error {
	entries := make([]wire.API[handler], len(apis))
	for i, a := range apis {
		var h handler
		if a.Handle != nil {
			h = a.Handle
			if wrap != nil {
				h = wrap(h)
			}
		}
		entries[i] = wire.API[handler]{Versions: a.Versions, Handler: h, NewRequest: a.NewRequest}
	}
	return t.Register(by, entries...)
}

// servedByPlugin says whether a plugin serves key.
func servedByPlugin(t *apiTable, key int16) bool {
	by := t.ServedBy(key)
	return by != "" && by != byBroker
}

// servedAPIs is the table as the broker's connections use it
// (network.APIs).
type servedAPIs struct{ t *apiTable }

// NewRequest implements network.APIs: CreateTopics from v8 decodes into
// admin.CreateTopicsRequest, for MirrorInfo, which kmsg does not know.
func (a servedAPIs) NewRequest(key, version int16) kmsg.Request {
	req := a.t.NewRequest(key)
	if _, ok := req.(*kmsg.CreateTopicsRequest); ok && version >= admin.CreateTopicsMirrorVersion {
		return new(admin.CreateTopicsRequest)
	}
	return req
}

// Lookup implements network.APIs.
func (a servedAPIs) Lookup(key int16) (kmsg.ApiVersionsResponseApiKey, bool) { return a.t.Lookup(key) }

// Versions implements network.APIs.
func (a servedAPIs) Versions() []kmsg.ApiVersionsResponseApiKey { return a.t.Versions() }

// Dispatch implements network.APIs: it runs the handler of one request.
// A nil response means none is sent; an error closes the connection.
func (a servedAPIs) Dispatch(ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error) {
	if h := a.t.Handler(req.Key()); h != nil {
		return h(ctx, rc, req)
	}
	// The connection only decodes the keys served, and answers the
	// SASL keys itself, so this is a bug, not input.
	return nil, fmt.Errorf("no handler for api key %d", req.Key())
}

// pluginHandler is handle, a handler of plugin h's API keys, contained.
// It cannot meet a plugin that is not running: listeners accept once every plugin has
// started, and Close stops plugins after the last request returned. A
// plugin that failed, or panics serving the request, gets the request an
// error response instead of closing the client's connection. It asks
// state for the plugins' state per request: New makes the API table
// before the plugins' state.
func pluginHandler(h plugin.APIHandler, handle handler, state func() *pluginState) handler {
	return func(ctx context.Context, rc *RequestContext, req kmsg.Request) (resp kmsg.Response, err error) {
		plugins := state()
		name := plugins.name(h)
		if f, failed := plugins.failure(name); failed {
			return errorResponse(req, kerr.UnknownServerError, fmt.Sprintf("plugin %s of this broker failed %s ago (%s): restart the broker",
				name, time.Since(f.at).Round(time.Second), f.reason)), nil
		}
		defer func() {
			if v := recover(); v != nil {
				plugins.panicked(name, wire.APIName(req.Key()), v, false)
				resp, err = errorResponse(req, kerr.UnknownServerError, fmt.Sprintf("plugin %s failed serving this request: %v", name, v)), nil
			}
		}()
		return handle(ctx, rc, req)
	}
}
