package fuzz

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMain(m *testing.M) {
	// A fuzzed request may name a host for the mirror plugin to connect
	// to; harmful() drops those that name anything but loopback, and
	// without DNS no name can reach further anyway.
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in the fuzz test")
	}}
	os.Exit(m.Run())
}

// FuzzRequests sends one request per input to a broker with every plugin,
// on a new connection, then checks that no handler panicked and that the
// broker still answers ApiVersions and Metadata on another connection.
//
// An input is (key, version, seed, ops, raw). With raw empty, the request
// is generated: key is mapped onto the keys the broker advertises and
// version into the key's range, seed drives the generator over kmsg's (or
// the plugin's) request struct, and ops mutate the encoded bytes (see
// mutate). With raw set, raw is the request body as it is sent, under key
// and version as given: that is how a crasher is kept as a regression case
// whatever the generator becomes.
func FuzzRequests(f *testing.F) {
	tg, err := startTarget(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { tg.b.Close() })

	for _, key := range tg.keys {
		v := tg.apis[key]
		f.Add(key, v.MinVersion, int64(key), []byte(nil), []byte(nil))
		f.Add(key, v.MaxVersion, int64(key)<<16|int64(v.MaxVersion), []byte{1, 0, 9, 3, 0, 1}, []byte(nil))
	}
	// The requests of issue 12 that killed the broker: 2^31-1 partitions
	// (validate only), and a topic and an internal topic grown to 2^30.
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.ValidateOnly = 7, true
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "huge", NumPartitions: 1<<31 - 1, ReplicationFactor: 1}}
	f.Add(ct.Key(), ct.Version, int64(0), []byte(nil), ct.AppendTo(nil))
	for _, topic := range []string{"fuzz-a", "__transaction_state"} {
		cp := kmsg.NewPtrCreatePartitionsRequest()
		cp.Version = 3
		cp.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: topic, Count: 1 << 30}}
		f.Add(cp.Key(), cp.Version, int64(0), []byte(nil), cp.AppendTo(nil))
	}

	// Found by this fuzzer: a mirror request claiming 2^32 tagged fields
	// kept a handler busy for minutes.
	f.Add(int16(98), int16(0), int64(0), []byte(nil), []byte{0xff, 0xff, 0xff, 0xff, 0x0f})

	f.Fuzz(func(t *testing.T, key, version int16, seed int64, ops, raw []byte) {
		var body []byte
		flexible := false
		mech := []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}[uint64(seed)%3]
		if len(raw) > 0 {
			body = raw
			if req := tg.request(key); req != nil {
				req.SetVersion(version)
				flexible = req.IsFlexible()
			}
		} else {
			if _, ok := tg.apis[key]; !ok {
				key = tg.keys[int(uint16(key))%len(tg.keys)]
			}
			v := tg.apis[key]
			version = v.MinVersion + int16(int(uint16(version))%int(v.MaxVersion-v.MinVersion+1))
			g := &gen{r: rand.New(rand.NewPCG(uint64(seed), uint64(key))), topicIDs: tg.topicIDs}
			req := tg.request(key)
			var ok bool
			if body, ok = g.encode(req, version); !ok {
				t.Skipf("%s v%d cannot be encoded", kmsg.NameForKey(key), version)
			}
			flexible = req.IsFlexible()
			body = mutate(body, ops)
		}
		if tg.harmful(key, version, body) {
			t.Skip("the request would make the broker connect beyond loopback or throttle everyone")
		}
		clientID := []*string{nil, kmsg.StringPtr(""), kmsg.StringPtr("fuzz")}[uint64(seed>>8)%3]
		if err := tg.send(key, frame(key, version, clientID, flexible, body), mech); err != nil {
			t.Fatalf("%s", describe(tg, key, version, body, err))
		}
		if err := tg.healthy(); err != nil {
			t.Fatalf("%s", describe(tg, key, version, body, err))
		}
	})
}

func describe(tg *target, key, version int16, body []byte, err error) string {
	return fmt.Sprintf("after %s (key %d) v%d, body of %d bytes % x: %v\nbroker errors:\n%s",
		kmsg.NameForKey(key), key, version, len(body), body[:min(len(body), 64)], err, tg.errs)
}
