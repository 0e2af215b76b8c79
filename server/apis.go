package server

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// handler answers one request of the key it is registered for. A nil
// response means none is sent; an error closes the connection.
type handler func(b *Broker, ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error)

// coreAPI is one API the broker serves itself: its key and versions, and
// its handler.
type coreAPI struct {
	versions kmsg.ApiVersionsResponseApiKey
	handle   handler
}

// api registers h for key at versions min to max; h receives the
// request as the type kmsg (or the connection, for CreateTopics v8)
// decoded it into.
func api[R kmsg.Request](key kmsg.Key, min, max int16, h func(*Broker, context.Context, *RequestContext, R) (kmsg.Response, error)) coreAPI {
	return coreAPI{
		versions: kmsg.ApiVersionsResponseApiKey{ApiKey: key.Int16(), MinVersion: min, MaxVersion: max},
		handle: func(b *Broker, ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error) {
			return h(b, ctx, rc, req.(R))
		},
	}
}

// coreAPIs is exactly what this broker serves of its own: ApiVersions
// tells the truth, and a request for a key or version outside it (and
// its plugins' keys) closes the connection. Minimums follow what current
// clients need: Fetch from v4 (record batches with LastStableOffset, what
// the Java 4.x client requires), Produce from v0 (message sets are
// refused per batch, not per request), ListOffsets from v1 (kafka-go uses
// v1). The SASL keys have no handler: the connection answers them
// (auth.go) before any request is dispatched.
var coreAPIs = []coreAPI{
	api(kmsg.Produce, 0, 13, (*Broker).handleProduce), // v13: topic IDs
	api(kmsg.Fetch, 4, 18, (*Broker).handleFetch),     // v13+: topic IDs
	api(kmsg.ListOffsets, 1, 10, (*Broker).handleListOffsets),
	api(kmsg.Metadata, 0, 13, (*Broker).handleMetadata),
	{versions: kmsg.ApiVersionsResponseApiKey{ApiKey: kmsg.SASLHandshake.Int16(), MinVersion: 0, MaxVersion: 1}},
	api(kmsg.ApiVersions, 0, 5, (*Broker).handleApiVersions), // v5: KIP-1242 cluster/node check
	{ // v8: KIP-1279's MirrorInfo, which kmsg does not know
		versions: kmsg.ApiVersionsResponseApiKey{ApiKey: kmsg.CreateTopics.Int16(), MinVersion: 2, MaxVersion: 8},
		handle: func(b *Broker, ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error) {
			if r, ok := req.(*createTopicsRequest); ok {
				return b.handleCreateTopics(ctx, rc, &r.CreateTopicsRequest, r.mirrorIDs)
			}
			return b.handleCreateTopics(ctx, rc, req.(*kmsg.CreateTopicsRequest), nil)
		},
	},
	api(kmsg.DeleteTopics, 1, 6, (*Broker).handleDeleteTopics),
	api(kmsg.DeleteRecords, 0, 2, (*Broker).handleDeleteRecords),
	api(kmsg.InitProducerID, 0, 5, (*Broker).handleInitProducerID),
	api(kmsg.OffsetForLeaderEpoch, 2, 4, (*Broker).handleOffsetForLeaderEpoch),
	api(kmsg.DescribeConfigs, 1, 4, (*Broker).handleDescribeConfigs),
	api(kmsg.DescribeLogDirs, 1, 4, (*Broker).handleDescribeLogDirs),
	{versions: kmsg.ApiVersionsResponseApiKey{ApiKey: kmsg.SASLAuthenticate.Int16(), MinVersion: 0, MaxVersion: 2}},
	api(kmsg.AlterConfigs, 0, 2, (*Broker).handleAlterConfigs),
	api(kmsg.CreatePartitions, 0, 3, (*Broker).handleCreatePartitions),
	api(kmsg.ElectLeaders, 0, 2, (*Broker).handleElectLeaders),
	api(kmsg.IncrementalAlterConfigs, 0, 1, (*Broker).handleIncrementalAlterConfigs),
	api(kmsg.AlterPartitionAssignments, 0, 1, (*Broker).handleAlterPartitionReassignments),
	api(kmsg.ListPartitionReassignments, 0, 0, (*Broker).handleListPartitionReassignments),
	api(kmsg.DescribeCluster, 0, 2, (*Broker).handleDescribeCluster), // v2: fenced brokers
	api(kmsg.DescribeProducers, 0, 0, (*Broker).handleDescribeProducers),
	api(kmsg.DescribeTopicPartitions, 0, 0, (*Broker).handleDescribeTopicPartitions),
}

// findCoordinatorAPI is served when a plugin locates coordinators
// (plugin.CoordinatorLocator): v4+ batches keys (KIP-699), v6 adds share
// groups' key type.
var findCoordinatorAPI = api(kmsg.FindCoordinator, 0, 6, (*Broker).handleFindCoordinator)

// apiTable is what the broker serves: its own keys and its plugins', each
// key served by exactly one of them.
type apiTable struct {
	versions []kmsg.ApiVersionsResponseApiKey
	core     map[int16]handler
	plugins  map[int16]plugin.APIHandler
}

func newAPITable(plugins []any) (apiTable, error) {
	t := apiTable{core: map[int16]handler{}, plugins: map[int16]plugin.APIHandler{}}
	add := func(a coreAPI) {
		t.versions = append(t.versions, a.versions)
		if a.handle != nil {
			t.core[a.versions.ApiKey] = a.handle
		}
	}
	for _, a := range coreAPIs {
		add(a)
	}
	for _, h := range plugin.All[plugin.APIHandler](plugins) {
		for _, k := range h.APIVersions() {
			if _, dup := t.lookup(k.ApiKey); dup {
				return t, fmt.Errorf("plugin %T: api key %d is already served", h, k.ApiKey)
			}
			t.versions = append(t.versions, k)
			t.plugins[k.ApiKey] = h
		}
	}
	if _, ok := plugin.Find[plugin.CoordinatorLocator](plugins); ok {
		if _, dup := t.lookup(apiKeyFindCoordinator); dup {
			return t, fmt.Errorf("api key %d is served by the broker for CoordinatorLocator plugins", apiKeyFindCoordinator)
		}
		add(findCoordinatorAPI)
	}
	return t, nil
}

func (t *apiTable) lookup(key int16) (kmsg.ApiVersionsResponseApiKey, bool) {
	for _, k := range t.versions {
		if k.ApiKey == key {
			return k, true
		}
	}
	return kmsg.ApiVersionsResponseApiKey{}, false
}

// newRequest returns an empty request for a served key, nil for others.
func (t *apiTable) newRequest(key int16) kmsg.Request {
	if h := t.plugins[key]; h != nil {
		return h.NewRequest(key)
	}
	if _, ok := t.lookup(key); ok {
		return kmsg.RequestForKey(key)
	}
	return nil
}

// dispatch runs the handler of one request. A nil response means none is
// sent; an error closes the connection.
func (b *Broker) dispatch(ctx context.Context, r *request) (kmsg.Response, error) {
	if r.badVersion {
		return b.apiVersionsUnsupported(), nil
	}
	if h := b.apis.core[r.req.Key()]; h != nil {
		return h(b, ctx, &r.rc, r.req)
	}
	return b.handlePlugin(ctx, &r.rc, r.req)
}

// handlePlugin dispatches a request for a plugin's API key. It cannot
// meet a plugin that is not running: listeners accept once every plugin
// has started, and Close stops plugins after the last request returned.
func (b *Broker) handlePlugin(ctx context.Context, rc *RequestContext, req kmsg.Request) (resp kmsg.Response, err error) {
	if h := b.apis.plugins[req.Key()]; h != nil {
		name := b.plugins.name(h)
		if f, failed := b.plugins.failure(name); failed {
			return errorResponse(req, kerr.UnknownServerError, fmt.Sprintf("plugin %s of this broker failed %s ago (%s): restart the broker",
				name, time.Since(f.at).Round(time.Second), f.reason)), nil
		}
		defer func() {
			if v := recover(); v != nil {
				b.pluginPanicked(name, apiName(req.Key()), v, false)
				resp, err = errorResponse(req, kerr.UnknownServerError, fmt.Sprintf("plugin %s failed serving this request: %v", name, v)), nil
			}
		}()
		return h.HandleRequest(ctx, rc, req)
	}
	// newRequest only admits the keys served, so this is a bug, not input.
	return nil, fmt.Errorf("no handler for api key %d", req.Key())
}
