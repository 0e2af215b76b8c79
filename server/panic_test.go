package server

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// panicPlugin serves Heartbeat and panics: while decoding version 0, in
// the handler for version 1, while encoding the response of version 2.
type panicPlugin struct{}

type panicRequest struct{ kmsg.HeartbeatRequest }

func (r *panicRequest) ReadFrom(b []byte) error {
	if r.Version == 0 {
		panic("decoding")
	}
	return r.HeartbeatRequest.ReadFrom(b)
}

type panicResponse struct{ *kmsg.HeartbeatResponse }

func (panicResponse) AppendTo([]byte) []byte { panic("encoding") }

func (panicPlugin) APIs() []plugin.API {
	a := plugin.Handle(kmsg.Heartbeat, 0, 4, panicPlugin{}.handle)
	a.NewRequest = func(int16) kmsg.Request { return &panicRequest{kmsg.NewHeartbeatRequest()} }
	return []plugin.API{a}
}

func (panicPlugin) handle(_ context.Context, _ *RequestContext, r *panicRequest) (kmsg.Response, error) {
	switch r.Version {
	case 1:
		var m map[string]int
		m["handler"]++ // a nil map write, as a real bug would panic
	case 2:
		return panicResponse{r.ResponseKind().(*kmsg.HeartbeatResponse)}, nil
	}
	return r.ResponseKind(), nil
}

// TestHandlerPanic: a panic while decoding or encoding one request closes
// that request's connection, one in a plugin's handler answers it with
// UNKNOWN_SERVER_ERROR; either is counted and leaves the broker serving
// other connections and later requests.
func TestHandlerPanic(t *testing.T) {
	// The stacks the broker logs would only clutter the test's output.
	b := startBrokerWith(t, Config{Plugins: []any{panicPlugin{}}, Logger: slog.New(slog.DiscardHandler)})
	createTopic(t, b, "after", 1, nil)
	for _, version := range []int16{0, 2} {
		c, err := net.DialTimeout("tcp", b.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Version, hb.Group, hb.MemberID = version, "g", "m"
		if err := writeRequest(c, hb, 1, "test-client"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("version %d: connection still open after a panic (read %d bytes, %v)", version, n, err)
		}
		c.Close()
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID = 1, "g", "m"
	if resp := rawRequest(t, b.Addr(), hb).(*kmsg.HeartbeatResponse); resp.ErrorCode != kerr.UnknownServerError.Code {
		t.Fatalf("heartbeat v1, whose handler panics: code %d", resp.ErrorCode)
	}
	hb.Version = 3
	if resp := rawRequest(t, b.Addr(), hb).(*kmsg.HeartbeatResponse); resp.ErrorCode != 0 {
		t.Fatalf("heartbeat v3 after the panics: code %d", resp.ErrorCode)
	}
	rawRequest(t, b.Addr(), produceReq(9, "after", [16]byte{}, 0, -1, recordbatch.Of("still serving")))
	sameValues(t, "after the panics", consumeAll(t, b, "after", 1), []string{"still serving"})
	var sb strings.Builder
	b.WritePrometheus(&sb)
	if !strings.Contains(sb.String(), "tandem_server_request_panics_total 2\n") ||
		!strings.Contains(sb.String(), `tandem_server_plugin_panics_total{plugin="server"} 1`+"\n") {
		t.Fatalf("panic metric:\n%s", sb.String())
	}
}
