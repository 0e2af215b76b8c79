package netns_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestControllerOfAsksAgain: a broker that knows no controller yet (a
// voter still electing right after a cut healed) answers Metadata with
// controller -1; controllerOf must ask again, not read the client's
// cache of that first answer for the rest of its wait. In-process
// (kfake on 127.0.0.1), no namespaces.
func TestControllerOfAsksAgain(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The first three Metadata answers name no controller, as a
	// leaderless voter's do; the others name node 2. Brokers are 1-3,
	// as in a tandem cluster.
	leaderless := 3
	var asked atomic.Int32
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		asked.Add(1)
		resp := req.(*kmsg.MetadataRequest).ResponseKind().(*kmsg.MetadataResponse)
		resp.ControllerID = 2
		if leaderless > 0 {
			leaderless--
			resp.ControllerID = -1
		}
		for i, addr := range c.ListenAddrs() {
			host, port, _ := net.SplitHostPort(addr)
			p, _ := strconv.Atoi(port)
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID, b.Host, b.Port = int32(i+1), host, int32(p)
			resp.Brokers = append(resp.Brokers, b)
		}
		return resp, nil, true
	})
	cl := tandemtest.Client(t, c.ListenAddrs()[0], kgo.SeedBrokers(c.ListenAddrs()...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := controllerOf(ctx, cl, 5*time.Second)
	if err != nil {
		t.Fatalf("%v (the brokers were asked %d times)", err, asked.Load())
	}
	if id != 2 {
		t.Fatalf("controller %d, want 2", id)
	}
}
