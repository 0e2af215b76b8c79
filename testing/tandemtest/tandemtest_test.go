package tandemtest

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestInProcessRawProduce drives an in-process broker with raw requests:
// a hand-built batch is stored, and the same batch with a broken CRC is not.
func TestInProcessRawProduce(t *testing.T) {
	b := StartInProcess(t, map[string]string{"auto.create.topics.enable": "true"})
	c := Dial(t, b.Addr())

	meta := kmsg.NewPtrMetadataRequest()
	meta.Version, meta.AllowAutoTopicCreation = 9, true
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("raw")
	meta.Topics = append(meta.Topics, mt)
	if _, err := c.Request(meta); err != nil {
		t.Fatal(err)
	}

	produce := func(batch []byte) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		res, err := c.Produce("raw", batch)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i, codec := range []int8{recordbatch.CodecNone, recordbatch.CodecGzip, recordbatch.CodecZstd} {
		batch, err := recordbatch.Build(codec, recordbatch.KV{Key: []byte("k"), Value: []byte("v")}, recordbatch.KV{Value: []byte("w")})
		if err != nil {
			t.Fatal(err)
		}
		if res := produce(batch); res.ErrorCode != 0 || res.BaseOffset != int64(2*i) {
			t.Fatalf("codec %d: %v, base offset %d, want %d", codec, kerr.ErrorForCode(res.ErrorCode), res.BaseOffset, 2*i)
		}
	}
	batch, _ := recordbatch.Build(recordbatch.CodecNone, recordbatch.KV{Value: []byte("x")})
	batch[20] ^= 1 // inside the CRC
	if res := produce(batch); res.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("bad CRC: %v", kerr.ErrorForCode(res.ErrorCode))
	}

	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 4
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "raw"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1 // latest
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	resp, err := c.Request(lo)
	if err != nil {
		t.Fatal(err)
	}
	if end := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].Offset; end != 6 {
		t.Fatalf("end offset %d, want 6 (three batches of two records)", end)
	}
}

// TestInProcessPlugins checks that StartInProcess's broker has the plugins
// of `tandem serve`: ApiVersions lists an API of each.
func TestInProcessPlugins(t *testing.T) {
	b := StartInProcess(t, nil)
	resp, err := Dial(t, b.Addr()).Request(kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		t.Fatal(err)
	}
	served := map[int16]bool{}
	for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
		served[k.ApiKey] = true
	}
	for plugin, key := range map[string]int16{"groups": 11, "txn": 24, "acl": 30, "mirror": 94} { // JoinGroup, AddPartitionsToTxn, CreateAcls, CreateMirror
		if !served[key] {
			t.Errorf("ApiVersions does not list key %d: no %s plugin", key, plugin)
		}
	}
}

// TestProcessStopRestart checks the process helpers: SIGTERM exits 0, and a
// restart comes back on the same address.
func TestProcessStopRestart(t *testing.T) {
	p := StartProcess(t, t.TempDir())
	addr := p.Addr
	if err := p.Stop(15 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if c, err := DialErr(addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Stop", addr)
	}
	p.Restart()
	if p.Addr != addr {
		t.Fatalf("restarted on %s, want %s", p.Addr, addr)
	}
	p.Kill9()
	if p.Running() {
		t.Fatal("running after Kill9")
	}
	p.Restart()
	if rss, peak, err := p.Mem(); err != nil || rss <= 0 || peak < rss {
		t.Fatalf("Mem: rss %d peak %d err %v", rss, peak, err)
	}
}

// TestStartClusterPortTaken: a port StartCluster picked is taken by
// someone else before the broker binds it (a parallel test can); the
// start is retried on fresh ports instead of failing the test.
func TestStartClusterPortTaken(t *testing.T) {
	Long(t) // two three-broker cluster starts: the full tier only
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	pickAddrs = func(t testing.TB, n int) []string {
		calls++
		out := freeAddrs(t, n)
		if calls == 2 { // the first Kafka listeners of the first attempt
			out[1] = taken.Addr().String()
		}
		return out
	}
	defer func() { pickAddrs = freeAddrs }()
	c := StartCluster(t, 3, nil)
	if calls != 4 {
		t.Fatalf("addresses picked %d times, want 4 (two attempts)", calls)
	}
	for _, b := range c.Brokers {
		if b.Addr == taken.Addr().String() {
			t.Fatalf("broker %d on the taken address %s", b.ID, b.Addr)
		}
		if b.Broker() == nil {
			t.Fatalf("broker %d not running", b.ID)
		}
	}
	CreateTopic(t, c.Addrs()[0], "after-retry", 1)
}
