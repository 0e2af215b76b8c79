package server

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

// apiTable is what the broker serves: its own keys and its plugins', each
// key served by exactly one of them.
type apiTable struct {
	versions []kmsg.ApiVersionsResponseApiKey
	plugins  map[int16]plugin.APIHandler
}

func newAPITable(plugins []any) (apiTable, error) {
	t := apiTable{versions: append([]kmsg.ApiVersionsResponseApiKey(nil), apiVersions...), plugins: map[int16]plugin.APIHandler{}}
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
		t.versions = append(t.versions, findCoordinatorVersions)
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
