package server

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// APIHandler plugins serve API keys the broker itself does not: consumer
// groups, ACLs, the mirror APIs. The broker advertises their versions in
// ApiVersions and dispatches their requests to HandleRequest, with the same
// conventions as its own handlers: the response's version is the request's,
// a nil response sends nothing, and an error closes the connection.
type APIHandler interface {
	// APIVersions lists the keys and version ranges the plugin serves.
	APIVersions() []kmsg.ApiVersionsResponseApiKey
	// NewRequest returns an empty request for key; for keys kmsg knows
	// it may return kmsg.RequestForKey(key).
	NewRequest(key int16) kmsg.Request
	HandleRequest(ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error)
}

// apiTable is what the broker serves: its own keys and its plugins', each
// key served by exactly one of them.
type apiTable struct {
	versions []kmsg.ApiVersionsResponseApiKey
	plugins  map[int16]APIHandler
}

func newAPITable(plugins []any) (apiTable, error) {
	t := apiTable{versions: append([]kmsg.ApiVersionsResponseApiKey(nil), apiVersions...), plugins: map[int16]APIHandler{}}
	for _, p := range plugins {
		h, ok := p.(APIHandler)
		if !ok {
			continue
		}
		for _, k := range h.APIVersions() {
			if _, dup := t.lookup(k.ApiKey); dup {
				return t, fmt.Errorf("plugin %T: api key %d is already served", p, k.ApiKey)
			}
			t.versions = append(t.versions, k)
			t.plugins[k.ApiKey] = h
		}
	}
	if hasLocator(plugins) {
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
