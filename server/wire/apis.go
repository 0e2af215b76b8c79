package wire

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// API is one key a broker serves: its ApiVersions entry and who answers
// it. H is the broker's handler type (server.Handler: the broker's own
// handlers and a plugin's HandleRequest are both one); the table only
// keeps it, so that framing knows nothing of what handlers see.
type API[H any] struct {
	Versions kmsg.ApiVersionsResponseApiKey
	// Handler is the zero H for a key the connection answers itself
	// before anything is dispatched (the SASL keys).
	Handler H
	// NewRequest returns an empty request of the key; nil means
	// kmsg.RequestForKey, which is right for every key kmsg knows by the
	// meaning the broker gives it.
	NewRequest func(key int16) kmsg.Request
}

// APIs is the one table of what a broker serves, its own keys and its
// plugins', each key registered once. The order of registration is the
// order of ApiVersions, which clients and tests read as it is. It is
// filled before the broker serves and only read after, from any
// goroutine.
type APIs[H any] struct {
	versions []kmsg.ApiVersionsResponseApiKey
	keys     map[int16]registered[H]
}

type registered[H any] struct {
	API[H]
	by string
}

// Register adds apis, served by by (say "the broker", or "plugin
// *groups.Plugin"), in their order. A key already registered, by an
// earlier call or earlier in apis, is an error naming who registered it
// first, and then none of apis is added.
func (t *APIs[H]) Register(by string, apis ...API[H]) error {
	if t.keys == nil {
		t.keys = map[int16]registered[H]{}
	}
	first := make(map[int16]string, len(apis))
	for _, r := range t.keys {
		first[r.Versions.ApiKey] = r.by
	}
	for _, a := range apis {
		k := a.Versions.ApiKey
		if prev, dup := first[k]; dup {
			return fmt.Errorf("api key %d is already served by %s", k, prev)
		}
		first[k] = by
	}
	for _, a := range apis {
		t.versions = append(t.versions, a.Versions)
		t.keys[a.Versions.ApiKey] = registered[H]{a, by}
	}
	return nil
}

// Versions lists every key served with its versions, in registration
// order, for ApiVersions responses. The slice is the table's: callers do
// not modify it.
func (t *APIs[H]) Versions() []kmsg.ApiVersionsResponseApiKey { return t.versions }

// Lookup returns the versions of key, and whether it is served.
func (t *APIs[H]) Lookup(key int16) (kmsg.ApiVersionsResponseApiKey, bool) {
	r, ok := t.keys[key]
	return r.Versions, ok
}

// NewRequest returns an empty request for a served key, nil for any
// other: the connection decodes only what the table serves.
func (t *APIs[H]) NewRequest(key int16) kmsg.Request {
	r, ok := t.keys[key]
	switch {
	case !ok:
		return nil
	case r.NewRequest != nil:
		return r.NewRequest(key)
	default:
		return kmsg.RequestForKey(key)
	}
}

// Handler returns the handler of key, the zero H for a key not served or
// answered by the connection.
func (t *APIs[H]) Handler(key int16) H { return t.keys[key].Handler }

// ServedBy returns who registered key, "" for a key not served.
func (t *APIs[H]) ServedBy(key int16) string { return t.keys[key].by }

// APIName names a key for logs and metric labels.
func APIName(key int16) string {
	if name := kmsg.NameForKey(key); name != "" {
		return name
	}
	return "Unknown"
}
