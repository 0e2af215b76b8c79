package mirrorcfg

import (
	"context"
	"log/slog"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/server"
)

func TestClientOpts(t *testing.T) {
	for _, c := range []struct {
		configs map[string]string
		ok      bool
	}{
		{map[string]string{"bootstrap.servers": "a:1, b:2"}, true},
		{map[string]string{}, false},
		{map[string]string{"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
			"sasl.jaas.config": `x required username="u" password="p";`}, true},
		{map[string]string{"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512"}, false},
		{map[string]string{"bootstrap.servers": "a:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token": "t"}, true},
		{map[string]string{"bootstrap.servers": "a:1", "security.protocol": "BOGUS"}, false},
		{map[string]string{"bootstrap.servers": "a:1", "ssl.key.password": "x"}, false},
		{map[string]string{"bootstrap.servers": "a:1", "unknown": "x"}, false},
		{map[string]string{"bootstrap.servers": "a"}, false},
		{map[string]string{"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, false},
		{map[string]string{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.truststore.certificates": "not a pem"}, false},
		{map[string]string{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.truststore.location": "/nonexistent"}, false},
	} {
		if _, err := DefaultTimeouts.ClientOpts(c.configs); (err == nil) != c.ok {
			t.Errorf("%v: error %v, want ok=%v", c.configs, err, c.ok)
		}
	}
}

// TestClientOptsBootstrapList: a mirror's bootstrap.servers is a
// comma-separated list, as Kafka's: a client built from it knows every
// entry and reaches the source through the one that answers.
func TestClientOptsBootstrapList(t *testing.T) {
	b, err := server.New(server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	opts, err := ClientOpts(map[string]string{"bootstrap.servers": deadAddr + " , " + b.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if seeds := cl.OptValue(kgo.SeedBrokers).([]string); !reflect.DeepEqual(seeds, []string{deadAddr, b.Addr()}) {
		t.Fatalf("seeds %q, want %q and %q", seeds, deadAddr, b.Addr())
	}
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("the source through a list whose first entry is down: %v", err)
	}
}
