package wire

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// pluginRequest is a plugin's own request type for a key kmsg knows by
// another meaning, as the mirror plugin's CreateMirror is key 94.
type pluginRequest struct {
	kmsg.UnregisterControllerRequest
}

func versions(key kmsg.Key, min, max int16) kmsg.ApiVersionsResponseApiKey {
	return kmsg.ApiVersionsResponseApiKey{ApiKey: key.Int16(), MinVersion: min, MaxVersion: max}
}

// handler is the test's handler type: the table keeps any.
type handler func(context.Context, kmsg.Request) (kmsg.Response, error)

// answering is a handler whose response says who answered: a
// MetadataResponse whose ThrottleMillis is n.
func answering(n int32) handler {
	return func(context.Context, kmsg.Request) (kmsg.Response, error) {
		return &kmsg.MetadataResponse{ThrottleMillis: n}, nil
	}
}

func answeredBy(t *testing.T, h handler) int32 {
	t.Helper()
	if h == nil {
		t.Fatal("no handler")
	}
	resp, err := h(context.Background(), kmsg.NewPtrMetadataRequest())
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.MetadataResponse).ThrottleMillis
}

// TestAPIs registers core keys, a key answered by the connection and a
// plugin's keys, and checks what the table answers for each and for a
// key nobody serves; then that a key registered twice is refused.
func TestAPIs(t *testing.T) {
	var apis APIs[handler]
	if err := apis.Register("the broker",
		API[handler]{Versions: versions(kmsg.Produce, 0, 13), Handler: answering(1)},
		API[handler]{Versions: versions(kmsg.SASLHandshake, 0, 1)},
		API[handler]{Versions: versions(kmsg.Metadata, 4, 12), Handler: answering(2)},
	); err != nil {
		t.Fatal(err)
	}
	newPluginRequest := func(key int16) kmsg.Request {
		if key == kmsg.UnregisterController.Int16() {
			return new(pluginRequest)
		}
		return kmsg.RequestForKey(key)
	}
	if err := apis.Register("plugin groups",
		API[handler]{Versions: versions(kmsg.UnregisterController, 0, 0), Handler: answering(3), NewRequest: newPluginRequest},
		API[handler]{Versions: versions(kmsg.JoinGroup, 0, 9), Handler: answering(3), NewRequest: newPluginRequest},
	); err != nil {
		t.Fatal(err)
	}

	want := []kmsg.ApiVersionsResponseApiKey{
		versions(kmsg.Produce, 0, 13), versions(kmsg.SASLHandshake, 0, 1), versions(kmsg.Metadata, 4, 12),
		versions(kmsg.UnregisterController, 0, 0), versions(kmsg.JoinGroup, 0, 9),
	}
	if got := apis.Versions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("versions %v, want %v (registration order)", got, want)
	}
	for _, v := range want {
		if got, ok := apis.Lookup(v.ApiKey); !ok || !reflect.DeepEqual(got, v) {
			t.Errorf("lookup %d: %v %v, want %v", v.ApiKey, got, ok, v)
		}
	}

	for _, c := range []struct {
		key      kmsg.Key
		request  kmsg.Request
		answer   int32 // 0: no handler
		servedBy string
	}{
		{kmsg.Produce, new(kmsg.ProduceRequest), 1, "the broker"},
		{kmsg.SASLHandshake, new(kmsg.SASLHandshakeRequest), 0, "the broker"},
		{kmsg.Metadata, new(kmsg.MetadataRequest), 2, "the broker"},
		{kmsg.UnregisterController, new(pluginRequest), 3, "plugin groups"},
		{kmsg.JoinGroup, new(kmsg.JoinGroupRequest), 3, "plugin groups"},
	} {
		k := c.key.Int16()
		if got := apis.NewRequest(k); got == nil || reflect.TypeOf(got) != reflect.TypeOf(c.request) {
			t.Errorf("new request for %d: %T, want %T", k, got, c.request)
		}
		if h := apis.Handler(k); c.answer == 0 {
			if h != nil {
				t.Errorf("key %d has a handler", k)
			}
		} else if got := answeredBy(t, h); got != c.answer {
			t.Errorf("key %d answered by handler %d, want %d", k, got, c.answer)
		}
		if got := apis.ServedBy(k); got != c.servedBy {
			t.Errorf("key %d served by %q, want %q", k, got, c.servedBy)
		}
	}

	unknown := kmsg.Fetch.Int16()
	if v, ok := apis.Lookup(unknown); ok {
		t.Errorf("lookup of a key not served: %v", v)
	}
	if r := apis.NewRequest(unknown); r != nil {
		t.Errorf("new request for a key not served: %T", r)
	}
	if apis.Handler(unknown) != nil || apis.ServedBy(unknown) != "" {
		t.Error("a key not served has a handler or a registrant")
	}

	// A key served already, by another registrant or earlier in the same
	// call, is refused naming who served it first, and nothing of that
	// call is added.
	for _, c := range []struct {
		apis  []API[handler]
		first string
	}{
		{[]API[handler]{{Versions: versions(kmsg.Fetch, 4, 18)}, {Versions: versions(kmsg.Metadata, 0, 13)}}, "the broker"},
		{[]API[handler]{{Versions: versions(kmsg.JoinGroup, 0, 9)}}, "plugin groups"},
		{[]API[handler]{{Versions: versions(kmsg.Fetch, 4, 18)}, {Versions: versions(kmsg.Fetch, 4, 18)}}, "plugin other"},
	} {
		err := apis.Register("plugin other", c.apis...)
		if err == nil || !strings.HasSuffix(err.Error(), "is already served by "+c.first) {
			t.Errorf("registering %v again: %v, want served by %s", c.apis, err, c.first)
		}
	}
	if got := apis.Versions(); !reflect.DeepEqual(got, want) {
		t.Errorf("after refused registrations: versions %v, want %v", got, want)
	}
	if _, ok := apis.Lookup(unknown); ok {
		t.Error("a refused registration added a key")
	}
}
