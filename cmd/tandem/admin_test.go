package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// cliResult is one run of the tandem CLI in this process.
type cliResult struct {
	code           int
	stdout, stderr string
}

// tandemCLI runs `tandem ARGS` with in as stdin (nil: empty).
func tandemCLI(t *testing.T, in string, args ...string) cliResult {
	t.Helper()
	stdin = strings.NewReader(in)
	defer func() { stdin = os.Stdin }()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return cliResult{code, stdout.String(), stderr.String()}
}

// ok runs the CLI and fails the test unless it exits 0.
func ok(t *testing.T, in string, args ...string) string {
	t.Helper()
	r := tandemCLI(t, in, args...)
	if r.code != 0 {
		t.Fatalf("tandem %s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args, " "), r.code, r.stderr, r.stdout)
	}
	return r.stdout
}

// fails runs the CLI, checks its exit code and that stderr is the one
// line "tandem <cmd>: ..." matching re, and returns that line.
func fails(t *testing.T, code int, re string, args ...string) string {
	t.Helper()
	r := tandemCLI(t, "", args...)
	line, rest, _ := strings.Cut(r.stderr, "\n")
	if r.code != code || rest != "" || !regexp.MustCompile(re).MatchString(line) {
		t.Fatalf("tandem %s: exit %d (want %d), stderr:\n%s\nwant one line matching %s", strings.Join(args, " "), r.code, code, r.stderr, re)
	}
	return line
}

// unmarshal parses --json output into v.
func unmarshal(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
}

// jsonKeys checks that the objects of --json output have exactly keys.
func jsonKeys(t *testing.T, what string, objs []map[string]any, keys ...string) {
	t.Helper()
	slices.Sort(keys)
	for _, o := range objs {
		var got []string
		for k := range o {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, keys) {
			t.Fatalf("%s: keys %v, want %v", what, got, keys)
		}
	}
}

func adminOf(t *testing.T, addr string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(tandemtest.Client(t, addr))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// deadAddr is a 127.0.0.1 address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestBootstrapList is issue 27's report: `tandem mirrors
// --bootstrap-server a:9092,b:9093` looked up the whole list as one host
// ("mirror request 18: unable to dial: ... lookup a:9092,b:9093: no such
// host"). Every bootstrap flag takes the comma-separated list tandem
// cluster prints, and a cluster that cannot be reached is said in words.
func TestBootstrapList(t *testing.T) {
	b := tandemtest.StartInProcess(t, nil)
	d1 := deadAddr(t)
	list := d1 + "," + b.Addr()
	if out := ok(t, "", "mirrors", "--bootstrap-server", list, "--list"); !strings.HasPrefix(out, "MIRROR") {
		t.Fatalf("mirrors --list through %s:\n%s", list, out)
	}
	ok(t, "", "topics", "create", "t1", "--bootstrap-server", " "+d1+" , "+b.Addr()+" ")
	if out := ok(t, "", "topics", "list", "--bootstrap-server", list); !strings.Contains(out, "t1") {
		t.Fatalf("topics list through %s:\n%s", list, out)
	}
	// The source of a mirror too: --source-bootstrap and its probe.
	src := tandemtest.StartInProcess(t, nil)
	ok(t, "", "mirrors", "--bootstrap-server", list, "--create", "--mirror", "m", "--source-bootstrap", d1+","+src.Addr())
	if out := ok(t, "", "mirrors", "--bootstrap-server", list, "--list"); !strings.Contains(out, d1+","+src.Addr()) {
		t.Fatalf("the mirror's source list:\n%s", out)
	}

	// Unreachable: the addresses and the cause, once, in words (a list
	// that only refuses: TestBootstrapListRefused).
	fails(t, 1, `^tandem groups list: cannot reach any of nosuch.invalid:9092 \(no such host\), `+regexp.QuoteMeta(d1)+` \(connection refused\)$`,
		"groups", "list", "--bootstrap-server", "nosuch.invalid:9092,"+d1)
	// A list that is not one is a usage error: nothing is sent.
	fails(t, 2, `^tandem topics list: --bootstrap-server "a:1,b": "b" is not host:port$`, "topics", "list", "--bootstrap-server", "a:1,b")
	fails(t, 2, `^tandem mirrors: --source-bootstrap "x": "x" is not host:port$`,
		"mirrors", "--bootstrap-server", list, "--create", "--mirror", "m2", "--source-bootstrap", "x")
}

// TestBootstrapListRefused is TestBootstrapList's cluster that only
// refuses connections: the addresses and the cause, once, in words. Each
// command tries a refused cluster again for 5 s first (as a starting
// broker refuses, TestClientWaitsForStartingBroker), so it is in the full
// tier only.
func TestBootstrapListRefused(t *testing.T) {
	tandemtest.Long(t)
	d1, d2 := deadAddr(t), deadAddr(t)
	fails(t, 1, `^tandem mirrors: cannot reach any of `+regexp.QuoteMeta(d1+", "+d2)+`: connection refused$`,
		"mirrors", "--bootstrap-server", d1+","+d2, "--list")
	fails(t, 1, `^tandem topics list: cannot reach cluster `+regexp.QuoteMeta(d1)+`: connection refused$`,
		"topics", "list", "--bootstrap-server", d1)
}

// TestExitCodes: a wrong command line exits 2 and does nothing, even
// with a cluster that cannot be reached (mirrors used to connect first
// and exit 1).
func TestExitCodes(t *testing.T) {
	dead := deadAddr(t)
	for _, tc := range []struct {
		args []string
		re   string
	}{
		{[]string{"mirrors", "--create", "--mirror", "m"}, `^tandem mirrors: --source-bootstrap is required$`},
		{[]string{"mirrors", "--create"}, `^tandem mirrors: --mirror and --source-bootstrap are required$`},
		{[]string{"mirrors", "--failover"}, `^tandem mirrors: --mirror is required$`},
		{[]string{"mirrors", "--add", "--mirror", "m"}, `^tandem mirrors: --topic is required$`},
		{[]string{"mirrors", "--describe", "--topic", "("}, `^tandem mirrors: --topic "\(": `},
		{[]string{"mirrors", "--alter", "--mirror", "m", "--config", "x"}, `^tandem mirrors: --config "x": want k=v$`},
		{[]string{"topics"}, `^tandem topics: choose one of list, create, describe, delete, add-partitions, alter-config`},
		{[]string{"topics", "bogus"}, `^tandem topics: unknown command "bogus"`},
		{[]string{"topics", "create"}, `^tandem topics create: name the topic\(s\)`},
		{[]string{"topics", "create", "t", "--partitions", "0"}, `^tandem topics create: --partitions 0: want a positive count`},
		{[]string{"topics", "create", "t", "--config", "novalue"}, `^tandem topics create: --config "novalue": want k=v$`},
		{[]string{"topics", "add-partitions", "t"}, `^tandem topics add-partitions: --partitions N is required`},
		{[]string{"topics", "alter-config", "t"}, `^tandem topics alter-config: nothing to alter`},
		{[]string{"topics", "list", "extra"}, `^tandem topics list: unexpected arguments \["extra"\]$`},
		{[]string{"topics", "list", "--bogus"}, `^tandem topics list: flag provided but not defined: --bogus`},
		{[]string{"groups", "reset-offsets", "g", "--all-topics"}, `^tandem groups reset-offsets: choose one of --to-earliest`},
		{[]string{"groups", "reset-offsets", "g", "--to-earliest"}, `^tandem groups reset-offsets: choose --topic T`},
		{[]string{"groups", "reset-offsets", "g", "--all-topics", "--to-datetime", "yesterday"}, `^tandem groups reset-offsets: --to-datetime "yesterday"`},
		{[]string{"groups", "reset-offsets", "g", "--topic", "t:x", "--to-latest"}, `^tandem groups reset-offsets: --topic "t:x": "x" is not a partition number$`},
		{[]string{"groups", "list", "--type", "bogus"}, `^tandem groups list: --type "bogus"`},
		{[]string{"acls", "create", "--topic", "t"}, `^tandem acls create: name who`},
		{[]string{"acls", "create", "--allow-principal", "alice", "--topic", "t"}, `^tandem acls create: --allow-principal "alice": a principal is TYPE:NAME`},
		{[]string{"acls", "create", "--allow-principal", "User:a", "--topic", "t", "--operation", "Fly"}, `^tandem acls create: --operation "Fly"`},
		{[]string{"acls", "create", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"}, `^tandem acls create: --resource-pattern-type "match": want literal or prefixed$`},
		{[]string{"acls", "delete", "--allow-principal", "User:a"}, `^tandem acls delete: name the resource`},
		{[]string{"produce"}, `^tandem produce: name one topic`},
		{[]string{"produce", "t", "--header", "x"}, `^tandem produce: --header "x": want k=v$`},
		{[]string{"consume", "t", "--group", "g", "--partition", "0"}, `^tandem consume: --partition and --group do not go together`},
		{[]string{"consume", "t", "--offset", "3"}, `^tandem consume: --offset needs --partition$`},
		{[]string{"cluster", "restart"}, `^tandem cluster restart: name one node`},
		{[]string{"cluster", "restart", "2"}, `^tandem cluster restart: --data-dir DIR is required`},
		{[]string{"cluster", "restart", "2", "--data-dir", t.TempDir()}, `^tandem cluster restart: --data-dir .* holds no tandem cluster`},
		{[]string{"cluster", "bogus"}, `^tandem cluster: unknown command "bogus"`},
		{[]string{"topics", "list", "--command-config", filepath.Join(t.TempDir(), "none")}, `^tandem topics list: --command-config: open .*: no such file or directory$`},
		{[]string{"topics", "list", "--sasl-mechanism", "SCRAM-SHA-512"}, `^tandem topics list: --sasl-mechanism SCRAM-SHA-512 needs --sasl-username and --sasl-password`},
		{[]string{"topics", "list", "--sasl-mechanism", "GSSAPI", "--sasl-username", "u", "--sasl-password", "p"}, `^tandem topics list: --sasl-mechanism "GSSAPI"`},
		{[]string{"topics", "list", "--tls-ca", "/x", "--security-protocol", "PLAINTEXT"}, `^tandem topics list: TLS flags with --security-protocol PLAINTEXT`},
		{[]string{"topics", "list", "--tls-cert", "/x"}, `^tandem topics list: --tls-cert and --tls-key go together$`},
	} {
		args := append(slices.Clone(tc.args), "--bootstrap-server", dead)
		if len(tc.args) == 1 || tc.args[1] == "bogus" || tc.args[0] == "cluster" {
			args = tc.args
		}
		fails(t, 2, tc.re, args...)
	}

	// A properties file with a key tandem does not read, or a Java keystore.
	props := filepath.Join(t.TempDir(), "client.properties")
	os.WriteFile(props, []byte("security.protocol=SSL\nssl.truststore.location=/x.jks\nssl.truststore.type=JKS\n"), 0o600)
	fails(t, 2, `^tandem topics list: --command-config .*: ssl.truststore.type JKS is not supported: give PEM files`, "topics", "list", "--command-config", props)
	os.WriteFile(props, []byte("sasl.mechansim=PLAIN\n"), 0o600)
	fails(t, 2, `^tandem topics list: --command-config .*: sasl.mechansim is not a setting tandem reads`, "topics", "list", "--command-config", props)
}

// TestTopicsCommands runs each topics command against a broker and reads
// back with kadm what it changed.
func TestTopicsCommands(t *testing.T) {
	b := tandemtest.StartInProcess(t, nil)
	bs := []string{"--bootstrap-server", b.Addr()}
	adm := adminOf(t, b.Addr())
	ctx := ctxT(t)

	out := ok(t, "", append([]string{"topics", "create", "orders", "audit", "--partitions", "6", "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact"}, bs...)...)
	if !strings.Contains(out, "Created topic orders: 6 partition(s), replication factor 1") {
		t.Fatalf("create:\n%s", out)
	}
	details, err := adm.ListTopics(ctx, "orders", "audit")
	if err != nil || len(details["orders"].Partitions) != 6 || len(details["audit"].Partitions) != 6 {
		t.Fatalf("created topics: %v %+v", err, details)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range cfgs[0].Configs {
		if c.Value != nil {
			got[c.Key] = *c.Value
		}
	}
	if got["retention.ms"] != "3600000" || got["cleanup.policy"] != "compact" {
		t.Fatalf("configs of orders: retention.ms=%q cleanup.policy=%q", got["retention.ms"], got["cleanup.policy"])
	}

	// A second create: refused, the error named once, on one line, exit 1.
	line := fails(t, 1, `^tandem topics create: topic orders: TOPIC_ALREADY_EXISTS: `, append([]string{"topics", "create", "orders"}, bs...)...)
	if strings.Count(line, "TOPIC_ALREADY_EXISTS") != 1 || strings.Count(strings.ToLower(line), "already exists") != 1 {
		t.Fatalf("the error repeats itself: %s", line)
	}

	// list --json.
	var listed []map[string]any
	unmarshal(t, ok(t, "", append([]string{"topics", "list", "--json"}, bs...)...), &listed)
	jsonKeys(t, "topics list --json", listed, "topic", "topic_id", "internal", "partitions", "replication_factor", "mirror")
	if len(listed) != 2 || listed[1]["topic"] != "orders" || listed[1]["partitions"] != 6.0 || listed[1]["mirror"] != nil ||
		listed[1]["topic_id"] != topicID(details["orders"].ID) {
		t.Fatalf("topics list --json: %v", listed)
	}

	// describe: offsets after records.
	cl := tandemtest.Client(t, b.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 5 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var described []describedTopic
	unmarshal(t, ok(t, "", append([]string{"topics", "describe", "orders", "--json"}, bs...)...), &described)
	var raw []map[string]any
	unmarshal(t, ok(t, "", append([]string{"topics", "describe", "orders", "--json"}, bs...)...), &raw)
	jsonKeys(t, "topics describe --json", raw, "topic", "topic_id", "internal", "replication_factor", "mirror", "configs", "partitions")
	var parts []map[string]any
	for _, p := range raw[0]["partitions"].([]any) {
		parts = append(parts, p.(map[string]any))
	}
	jsonKeys(t, "a partition of topics describe --json", parts, "partition", "leader", "leader_epoch", "replicas", "isr", "offline_replicas",
		"log_start_offset", "log_end_offset", "mirror_state")
	if len(described) != 1 || len(described[0].Partitions) != 6 {
		t.Fatalf("describe: %+v", described)
	}
	p0 := described[0].Partitions[0]
	if p0.Leader != b.NodeID() || p0.LogEndOffset == nil || *p0.LogEndOffset != 5 || p0.LogStartOffset == nil || *p0.LogStartOffset != 0 ||
		!slices.Equal(p0.ISR, []int32{b.NodeID()}) || *described[0].Configs["retention.ms"] != "3600000" {
		t.Fatalf("describe partition 0: %+v start %v end %v configs %v", p0, cli.OrDash(p0.LogStartOffset), cli.OrDash(p0.LogEndOffset), described[0].Configs)
	}
	if text := ok(t, "", append([]string{"topics", "describe", "orders"}, bs...)...); !regexp.MustCompile(`(?m)^0\s+1\s+\d+\s+1\s+1\s+-\s+0\s+5\s*$`).MatchString(text) ||
		!strings.Contains(text, "retention.ms=3600000") {
		t.Fatalf("describe text:\n%s", text)
	}
	fails(t, 1, `^tandem topics describe: topic nosuch: `, append([]string{"topics", "describe", "nosuch"}, bs...)...)

	// add-partitions, alter-config, delete: read back.
	if out := ok(t, "", append([]string{"topics", "add-partitions", "orders", "--partitions", "8"}, bs...)...); !strings.Contains(out, "orders: 6 → 8 partitions") {
		t.Fatalf("add-partitions:\n%s", out)
	}
	waitFor(t, "orders with 8 partitions", func() bool {
		d, _ := adminOf(t, b.Addr()).ListTopics(ctx, "orders") // a fresh client: kadm's metadata is cached for a while
		return len(d["orders"].Partitions) == 8
	})
	fails(t, 1, `^tandem topics add-partitions: topic orders: INVALID_PARTITIONS: `, append([]string{"topics", "add-partitions", "orders", "--partitions", "4"}, bs...)...)
	ok(t, "", append([]string{"topics", "alter-config", "orders", "--config", "retention.ms=60000", "--delete-config", "cleanup.policy"}, bs...)...)
	cfgs, _ = adm.DescribeTopicConfigs(ctx, "orders")
	got = map[string]string{}
	for _, c := range cfgs[0].Configs {
		if c.Value != nil && c.Source == 1 {
			got[c.Key] = *c.Value
		}
	}
	if got["retention.ms"] != "60000" || got["cleanup.policy"] != "" {
		t.Fatalf("after alter-config, set on the topic: %v", got)
	}
	fails(t, 1, `^tandem topics alter-config: topic orders: INVALID_CONFIG`, append([]string{"topics", "alter-config", "orders", "--config", "retention.ms=soon"}, bs...)...)
	ok(t, "", append([]string{"topics", "delete", "audit"}, bs...)...)
	waitFor(t, "audit deleted", func() bool {
		d, err := adm.ListTopics(ctx)
		_, still := d["audit"]
		return err == nil && !still
	})
	fails(t, 1, `^tandem topics delete: topic audit: UNKNOWN_TOPIC_OR_PARTITION`, append([]string{"topics", "delete", "audit"}, bs...)...)
}

// waitFor polls cond until it holds, for a minute at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, time.Minute, func() error {
		if !cond() {
			return fmt.Errorf("%s: not yet", what)
		}
		return nil
	})
}

var _ = io.Discard

// committed reads a group's committed offsets: topic/partition → offset.
func committed(t *testing.T, adm *kadm.Client, group string) map[string]int64 {
	t.Helper()
	os, err := adm.FetchOffsets(ctxT(t), group)
	if err != nil || os.Error() != nil {
		t.Fatalf("FetchOffsets %s: %v %v", group, err, os.Error())
	}
	out := map[string]int64{}
	os.Each(func(o kadm.OffsetResponse) { out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At })
	return out
}

// TestProduceConsumeGroups writes with tandem produce, reads with tandem
// consume as a group, and checks groups describe, reset-offsets (a dry
// run changes nothing, --execute commits, refused with members) and
// delete against the offsets the broker holds.
func TestProduceConsumeGroups(t *testing.T) {
	b := tandemtest.StartInProcess(t, map[string]string{"group.initial.rebalance.delay.ms": "0"}) // a group forms at once
	bs := []string{"--bootstrap-server", b.Addr()}
	adm := adminOf(t, b.Addr())
	ok(t, "", append([]string{"topics", "create", "events", "--partitions", "2"}, bs...)...)

	var lines []string
	for i := range 10 {
		lines = append(lines, fmt.Sprintf("k%d:v%d", i, i))
	}
	out := ok(t, strings.Join(lines, "\n")+"\n", append([]string{"produce", "events", "--key-separator", ":", "--header", "src=cli"}, bs...)...)
	if !strings.HasPrefix(out, "Produced 10 record(s) to events: partition ") {
		t.Fatalf("produce:\n%s", out)
	}
	ends, _ := adm.ListEndOffsets(ctxT(t), "events")
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 10 {
		t.Fatalf("the log holds %d records after producing 10", total)
	}

	// consume -e --json as group g1: every record, then the committed
	// offsets are the ends.
	out = ok(t, "", append([]string{"consume", "events", "--group", "g1", "--from-beginning", "-e", "--json"}, bs...)...)
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r consumedRecord
		var keys map[string]any
		unmarshal(t, l, &r)
		unmarshal(t, l, &keys)
		jsonKeys(t, "consume --json", []map[string]any{keys}, "topic", "partition", "offset", "timestamp", "key", "value", "headers")
		if r.Key == nil || r.Value == nil || "v"+strings.TrimPrefix(*r.Key, "k") != *r.Value || len(r.Headers) != 1 || r.Headers[0] != (consumedHeader{"src", "cli"}) {
			t.Fatalf("record %s", l)
		}
		seen[*r.Value] = true
	}
	if len(seen) != 10 {
		t.Fatalf("consume -e read %d distinct records of 10:\n%s", len(seen), out)
	}
	want := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[fmt.Sprintf("events/%d", o.Partition)] = o.Offset })
	if got := committed(t, adm, "g1"); !maps.Equal(got, want) {
		t.Fatalf("g1 committed %v, want the ends %v", got, want)
	}
	// --count, and a partition from an offset, in text.
	if out := ok(t, "", append([]string{"consume", "events", "--from-beginning", "--count", "3", "--print-key"}, bs...)...); len(strings.Split(strings.TrimSpace(out), "\n")) != 3 ||
		!regexp.MustCompile(`^k\d\tv\d\n`).MatchString(out) {
		t.Fatalf("consume --count 3 --print-key:\n%s", out)
	}
	if out := ok(t, "", append([]string{"consume", "events", "--partition", "0", "--offset", fmt.Sprint(want["events/0"] - 1), "-e"}, bs...)...); strings.Count(out, "\n") != 1 {
		t.Fatalf("consume --partition 0 --offset end-1 -e: %q", out)
	}

	// Three more records: lag 3.
	ok(t, "a\nb\nc\n", append([]string{"produce", "events", "--partition", "1"}, bs...)...)
	var gs []describedGroup
	unmarshal(t, ok(t, "", append([]string{"groups", "describe", "g1", "--json"}, bs...)...), &gs)
	var raw []map[string]any
	unmarshal(t, ok(t, "", append([]string{"groups", "describe", "g1", "--json"}, bs...)...), &raw)
	jsonKeys(t, "groups describe --json", raw, "group", "type", "state", "assignor", "coordinator", "members", "partitions", "total_lag")
	if len(gs) != 1 || gs[0].TotalLag == nil || *gs[0].TotalLag != 3 || len(gs[0].Partitions) != 2 || len(gs[0].Members) != 0 || gs[0].State != "Empty" {
		t.Fatalf("groups describe g1: %+v", gs)
	}
	p1 := gs[0].Partitions[1]
	if *p1.CommittedOffset != want["events/1"] || *p1.LogEndOffset != want["events/1"]+3 || *p1.Lag != 3 || p1.StartOffset != nil {
		t.Fatalf("partition 1 of g1: %+v", p1)
	}
	if text := ok(t, "", append([]string{"groups", "describe", "g1"}, bs...)...); !regexp.MustCompile(fmt.Sprintf(`(?m)^events\s+1\s+%d\s+%d\s+3\s+-\s*$`, want["events/1"], want["events/1"]+3)).MatchString(text) {
		t.Fatalf("groups describe text:\n%s", text)
	}
	var listed []listedGroup
	unmarshal(t, ok(t, "", append([]string{"groups", "list", "--json"}, bs...)...), &listed)
	if len(listed) != 1 || listed[0].Group != "g1" || listed[0].Type != "classic" && listed[0].Type != "consumer" {
		t.Fatalf("groups list: %+v", listed)
	}

	// reset-offsets: a dry run changes nothing; --execute does.
	before := committed(t, adm, "g1")
	out = ok(t, "", append([]string{"groups", "reset-offsets", "g1", "--all-topics", "--to-earliest"}, bs...)...)
	if !strings.Contains(out, "Dry run: nothing changed") || !maps.Equal(committed(t, adm, "g1"), before) {
		t.Fatalf("dry run:\n%s\ncommitted %v, was %v", out, committed(t, adm, "g1"), before)
	}
	var plan []offsetReset
	unmarshal(t, ok(t, "", append([]string{"groups", "reset-offsets", "g1", "--topic", "events", "--to-earliest", "--execute", "--json"}, bs...)...), &plan)
	if len(plan) != 2 || plan[0].NewOffset != 0 || *plan[1].CurrentOffset != want["events/1"] {
		t.Fatalf("reset --to-earliest plan: %+v", plan)
	}
	if got := committed(t, adm, "g1"); got["events/0"] != 0 || got["events/1"] != 0 {
		t.Fatalf("after --to-earliest --execute: %v", got)
	}
	ok(t, "", append([]string{"groups", "reset-offsets", "g1", "--topic", "events:1", "--shift-by", "2", "--execute"}, bs...)...)
	ok(t, "", append([]string{"groups", "reset-offsets", "g1", "--topic", "events:0", "--to-offset", "1000", "--execute"}, bs...)...)
	if got := committed(t, adm, "g1"); got["events/0"] != want["events/0"] || got["events/1"] != 2 {
		t.Fatalf("after --shift-by 2 on 1 and --to-offset 1000 (clamped to the end) on 0: %v, ends %v", got, want)
	}
	ok(t, "", append([]string{"groups", "reset-offsets", "g1", "--all-topics", "--to-datetime", time.Now().Add(time.Hour).Format(time.RFC3339), "--execute"}, bs...)...)
	if got := committed(t, adm, "g1"); got["events/1"] != want["events/1"]+3 {
		t.Fatalf("after --to-datetime in an hour: %v", got)
	}
	ok(t, "", append([]string{"groups", "reset-offsets", "g1", "--all-topics", "--to-datetime", "2000-01-01T00:00:00Z", "--execute"}, bs...)...)
	if got := committed(t, adm, "g1"); got["events/0"] != 0 || got["events/1"] != 0 {
		t.Fatalf("after --to-datetime in 2000: %v", got)
	}

	// With a member: reset and delete are refused, and change nothing.
	member := tandemtest.Client(t, b.Addr(), kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("events"), kgo.DisableAutoCommit())
	waitFor(t, "a member in g1", func() bool {
		poll, cancel := context.WithTimeout(context.Background(), time.Second)
		member.PollRecords(poll, 1)
		cancel()
		d, err := adm.DescribeGroups(ctxT(t), "g1")
		return err == nil && len(d["g1"].Members) == 1
	})
	before = committed(t, adm, "g1")
	fails(t, 1, `^tandem groups reset-offsets: group g1 has 1 member\(s\) \(state \w+\): offsets can only be reset while it has none`,
		append([]string{"groups", "reset-offsets", "g1", "--all-topics", "--to-latest", "--execute"}, bs...)...)
	fails(t, 1, `^tandem groups delete: group g1: NON_EMPTY_GROUP: `, append([]string{"groups", "delete", "g1"}, bs...)...)
	if got := committed(t, adm, "g1"); !maps.Equal(got, before) {
		t.Fatalf("a refused reset changed the offsets: %v, were %v", got, before)
	}
	member.Close()
	waitFor(t, "g1 empty", func() bool {
		d, err := adm.DescribeGroups(ctxT(t), "g1")
		return err == nil && len(d["g1"].Members) == 0
	})
	ok(t, "", append([]string{"groups", "delete", "g1"}, bs...)...)
	if got := committed(t, adm, "g1"); len(got) != 0 {
		t.Fatalf("offsets after groups delete: %v", got)
	}
	fails(t, 1, `^tandem groups describe: group nosuch: GROUP_ID_NOT_FOUND`, append([]string{"groups", "describe", "nosuch"}, bs...)...)
}
