package plugin

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// API is one key served, the broker's own or a plugin's (APIHandler):
// its ApiVersions entry beside its handler. Handle and Answer make one;
// the broker registers them all in one table.
type API struct {
	Versions kmsg.ApiVersionsResponseApiKey
	// Handle answers one request of the key, decoded into the type
	// NewRequest gave. A nil response means none is sent; an error closes
	// the connection. It is nil only for a key the broker's connection
	// answers itself (the SASL keys).
	Handle func(ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error)
	// NewRequest returns an empty request of the key; nil means
	// kmsg.RequestForKey, which is right for every key kmsg knows by the
	// meaning Tandem gives it. A key kmsg does not know (the mirror's)
	// sets it.
	NewRequest func(key int16) kmsg.Request
}

// Handle serves key at versions min to max with h, which receives the
// request as the type NewRequest (kmsg.RequestForKey unless set after)
// decoded it into.
func Handle[R kmsg.Request](key kmsg.Key, min, max int16, h func(context.Context, *RequestContext, R) (kmsg.Response, error)) API {
	return API{
		Versions: kmsg.ApiVersionsResponseApiKey{ApiKey: key.Int16(), MinVersion: min, MaxVersion: max},
		Handle: func(ctx context.Context, rc *RequestContext, req kmsg.Request) (kmsg.Response, error) {
			return h(ctx, rc, req.(R))
		},
	}
}

// Answer is Handle for a handler that always answers: its error is nil.
func Answer[R kmsg.Request, S kmsg.Response](key kmsg.Key, min, max int16, h func(context.Context, *RequestContext, R) S) API {
	return Handle(key, min, max, func(ctx context.Context, rc *RequestContext, req R) (kmsg.Response, error) {
		return h(ctx, rc, req), nil
	})
}
