package mirror

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

func sp(s string) *string { return &s }

// TestEpochRules: increment 10, threshold 3.
func TestEpochRules(t *testing.T) {
	for _, c := range []struct {
		sle, dle    int32
		fence, bump bool
	}{
		{0, 0, false, true},     // SLE == DLE: within the threshold
		{5, 4, true, false},     // SLE > DLE: fenced
		{-1, 0, false, true},    // no epoch yet: 0 - 3 < -1
		{7, 10, false, false},   // SLE == DLE - 3: not yet
		{8, 10, false, true},    // SLE > DLE - 3
		{10, 10, false, true},   //
		{11, 10, true, false},   //
		{100, 20, true, false},  //
		{0, 20, false, false},   //
		{17, 20, false, false},  //
		{18, 20, false, true},   //
		{20, 20, false, true},   //
		{21, 20, true, false},   //
		{3, 1000, false, false}, //
	} {
		fence, bump := epochCheck(c.sle, c.dle)
		if fence != c.fence || bump != c.bump {
			t.Errorf("SLE %d DLE %d: fence %v bump %v, want %v %v", c.sle, c.dle, fence, bump, c.fence, c.bump)
		}
		// After a bump (the controller applies max(min+1, current)),
		// DLE is SLE + 10 or more and SLE is neither fenced nor close.
		if fence || bump {
			dle := max(bumpMinEpoch(c.sle)+1, c.dle)
			if dle < c.sle+mirrorstate.BumpIncrement {
				t.Errorf("SLE %d: bumped DLE %d, want at least %d", c.sle, dle, c.sle+mirrorstate.BumpIncrement)
			}
			if f, b := epochCheck(c.sle, dle); f || b {
				t.Errorf("SLE %d after the bump to %d: fence %v bump %v", c.sle, dle, f, b)
			}
		}
	}
}

func TestBatchHelpers(t *testing.T) {
	b := slices.Concat(recordbatch.At(0, 3, "a"), recordbatch.At(1, 9, "b"), recordbatch.At(2, 4, "c"))
	if e := maxBatchEpoch(b); e != 9 {
		t.Fatalf("maxBatchEpoch = %d, want 9", e)
	}
	if e := maxBatchEpoch(nil); e != -1 {
		t.Fatalf("maxBatchEpoch(nil) = %d", e)
	}
}

// TestIsBarrier tells the engine's producer-state barrier from the other
// batches of a log.
func TestIsBarrier(t *testing.T) {
	e, err := engine.Open(engine.Config{Dir: "/data", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ep, err := e.Create("t", engine.TopicID{1}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := ep.WriteTxnMarkers(ctx, engine.Marker{ProducerID: 7, ProducerEpoch: 0}); err != nil {
		t.Fatal(err)
	}
	at, err := ep.WriteProducerBarrier(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ep.Fetch(0, 1<<20, engine.ReadUncommitted)
	if err != nil || len(res.Batches) != 2 {
		t.Fatalf("fetch: %v, %d batches", err, len(res.Batches))
	}
	if engine.IsProducerBarrier(res.Batches[0]) || !engine.IsProducerBarrier(res.Batches[1]) || at != 1 {
		t.Fatalf("isBarrier: marker %v, barrier %v (at %d)", engine.IsProducerBarrier(res.Batches[0]), engine.IsProducerBarrier(res.Batches[1]), at)
	}
	if has, err := hasBarrier(ep, 0); err != nil || !has {
		t.Fatalf("hasBarrier(0) = %v, %v", has, err)
	}
	if has, err := hasBarrier(ep, 2); err != nil || has {
		t.Fatalf("hasBarrier(2) = %v, %v", has, err)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Partitions != 50 || c.ReplicationFactor != 3 || c.RefreshInterval != 30*time.Second || c.FetchMaxBytes != 1<<20 ||
		c.FetchMaxWait != 500*time.Millisecond || c.Backoff != time.Second || c.ReconnectBackoff != 50*time.Millisecond || c.ThrottledRate != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = ParseConfig(map[string]string{"mirror.topic.num.partitions": "4", "replica.fetch.wait.max.ms": "200", "mirror.replication.throttled.rate": "1000"})
	if err != nil || c.Partitions != 4 || c.FetchMaxWait != 200*time.Millisecond || c.ThrottledRate != 1000 {
		t.Fatalf("overrides: %+v %v", c, err)
	}
	for _, bad := range []map[string]string{
		{"mirror.topic.num.partitions": "0"},
		{"mirror.topic.num.partitions": "x"},
		{"replica.fetch.max.bytes": "-1"},
		{"mirror.metadata.refresh.interval.ms": "0"},
	} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	p := New(map[string]string{"mirror.topic.num.partitions": "x"}, nil)
	if err := p.Start(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "mirror.topic.num.partitions") {
		t.Fatalf("Start with a bad property: %v", err)
	}
	for k, want := range map[string]bool{"mirror.topic.num.partitions": true, "replica.fetch.max.bytes": true, "num.partitions": false, "offsets.topic.num.partitions": false} {
		if p.OwnsProp(k) != want {
			t.Errorf("OwnsProp(%s) = %v", k, !want)
		}
	}
}

// TestDefaultTimeouts: mirrorcfg.ClientOpts (the CLI's client of a
// source) has the timeouts of a broker whose properties leave them unset.
func TestDefaultTimeouts(t *testing.T) {
	cfg, _ := ParseConfig(nil)
	if got := (mirrorcfg.Timeouts{Connect: cfg.ConnectTimeout, Request: cfg.RequestTimeout}); got != mirrorcfg.DefaultTimeouts {
		t.Fatalf("ParseConfig(nil) timeouts %+v, mirrorcfg.DefaultTimeouts %+v", got, mirrorcfg.DefaultTimeouts)
	}
}

// TestConfigSecretsRedacted runs a broker with the plugin: DescribeConfigs
// of the MIRROR resource (64) marks secrets sensitive with a null value
// and returns the other configs in clear; IncrementalAlterConfigs
// validates what it sets.
func TestConfigSecretsRedacted(t *testing.T) {
	props := map[string]string{"mirror.topic.num.partitions": "2"}
	b, err := server.New(server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Props: props,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Plugins: []any{New(props, slog.New(slog.DiscardHandler))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.MaxVersions(mirrorproto.ClientVersions()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	jaas := `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="hunter2";`
	create := &mirrorproto.CreateMirrorRequest{MirrorName: sp("m"), Configs: []mirrorproto.MirrorConfig{{Name: "bootstrap.servers", Value: sp("127.0.0.1:1")},
		{Name: "security.protocol", Value: sp("SASL_PLAINTEXT")}, {Name: "sasl.jaas.config", Value: &jaas}, {Name: "sasl.oauthbearer.token", Value: sp("k3y")}}}
	resp, err := cl.Request(ctx, create)
	if err != nil || resp.(*mirrorproto.CreateMirrorResponse).ErrorCode != 0 {
		t.Fatalf("create mirror: %v %+v", err, resp)
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: 64, ResourceName: "m"}}
	dresp, err := req.RequestWith(ctx, cl)
	if err != nil || len(dresp.Resources) != 1 || dresp.Resources[0].ErrorCode != 0 {
		t.Fatalf("describe configs: %v %+v", err, dresp)
	}
	got := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, c := range dresp.Resources[0].Configs {
		got[c.Name] = c
		if c.Value != nil && (strings.Contains(*c.Value, "hunter2") || strings.Contains(*c.Value, "k3y")) {
			t.Fatalf("secret in clear: %s=%s", c.Name, *c.Value)
		}
	}
	for _, k := range []string{"sasl.jaas.config", "sasl.oauthbearer.token"} {
		if c, ok := got[k]; !ok || !c.IsSensitive || c.Value != nil {
			t.Fatalf("%s: %+v, want sensitive with a null value", k, c)
		}
	}
	if c := got["bootstrap.servers"]; c.IsSensitive || c.Value == nil || *c.Value != "127.0.0.1:1" {
		t.Fatalf("bootstrap.servers: %+v", c)
	}
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	alter.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: 64, ResourceName: "m",
		Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "sasl.mechanism", Value: sp("GSSAPI")}}}}
	aresp, err := alter.RequestWith(ctx, cl)
	if err != nil || aresp.Resources[0].ErrorCode == 0 {
		t.Fatalf("altering to an unsupported SASL mechanism: %v %+v", err, aresp)
	}
}
