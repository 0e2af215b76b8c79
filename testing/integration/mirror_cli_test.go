package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// runMirrors runs `tandem mirrors ARGS` (the built binary) and returns
// its exit code, stdout and stderr.
func runMirrors(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tandemtest.BuildBinary(t), append([]string{"mirrors"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("tandem mirrors %v: %v", args, err)
	}
	return code, stdout.String(), stderr.String()
}

// TestMirrorsCLI is the CLI as a new user meets it (issue 11): one clear
// line per error, --describe filters and exit codes, --create --add,
// --alter and --describe-config, the truncation a re-add would do shown
// and gated by --yes, a broker without the mirror APIs, a source address
// that is no Kafka listener and one that cannot be reached.
func TestMirrorsCLI(t *testing.T) {
	src, dst := startMirrorCluster(t, ""), startMirrorCluster(t, "")
	for _, topic := range []string{"a", "b"} {
		createMirrorTopic(t, src, topic, 1)
		produceN(t, src.addr(), topic, 1, 20)
	}
	d := []string{"--bootstrap-server", dst.addr()}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errOut := runMirrors(t, append(d, args...)...)
		if code != 0 {
			t.Fatalf("tandem mirrors %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	fails := func(want int, args ...string) string { // stdout and stderr
		t.Helper()
		code, out, errOut := runMirrors(t, append(d, args...)...)
		if code != want {
			t.Fatalf("tandem mirrors %v: exit %d, want %d\n%s%s", args, code, want, out, errOut)
		}
		return out + errOut
	}

	// One line per error, the error named once.
	errOut := fails(1, "--describe", "--mirror", "nosuch")
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 || strings.Count(errOut, "MIRROR_NOT_FOUND") != 1 || !strings.Contains(errOut, "nosuch") {
		t.Fatalf("--describe --mirror nosuch:\n%s", errOut)
	}
	if errOut := fails(2, "--list", "extra"); !strings.Contains(errOut, "unexpected arguments") {
		t.Fatalf("a positional argument: %s", errOut)
	}
	if code, help, _ := runMirrors(t, "-h"); code != 0 || !strings.Contains(help, "fails over first") {
		t.Fatalf("--delete's help does not say what happens to the topics:\n%s", help)
	}

	// --create --add does both; --describe --topic filters.
	out := ok("--create", "--add", "--mirror", "m", "--source-bootstrap", src.addr(), "--topic", "a", "--topic", "b")
	if !strings.Contains(out, "Created mirror m.") || !strings.Contains(out, "Added 2 topic(s)") {
		t.Fatalf("--create --add:\n%s", out)
	}
	waitMirrored(t, dst, "m", "a", map[int32]int64{0: 20}, 30*time.Second)
	waitMirrored(t, dst, "m", "b", map[int32]int64{0: 20}, 30*time.Second)
	out = ok("--describe", "--mirror", "m", "--topic", "a")
	if !strings.Contains(out, "m       a") || strings.Contains(out, "m       b") {
		t.Fatalf("--describe --topic a:\n%s", out)
	}

	// Mirror configs.
	ok("--alter", "--mirror", "m", "--config", "mirror.groups.include=orders.*")
	if out := ok("--describe-config", "--mirror", "m"); !strings.Contains(out, "mirror.groups.include=orders.*") {
		t.Fatalf("--describe-config after --alter:\n%s", out)
	}
	if errOut := fails(1, "--alter", "--mirror", "m", "--config", "security.protocol=BOGUS"); !strings.Contains(errOut, "security.protocol") {
		t.Fatalf("--alter with a bad value: %s", errOut)
	}

	// Failover of a, local writes, then a re-add: the source never
	// mirrored a (no last mirror epoch), so the whole local log would go.
	ok("--remove", "--mirror", "m", "--topic", "a")
	for range 5 {
		if err := produceOne(t, dst, "a", 0, "written after the failover"); err != nil {
			t.Fatal(err)
		}
	}
	end := dst.partition("a", 0).Offsets().LogEnd // 20 mirrored, the failover's barrier, 5 more
	out = fails(1, "--add", "--mirror", "m", "--topic", "a")
	if !strings.Contains(out, fmt.Sprintf("truncates %d record(s)", end)) || !strings.Contains(out, "--yes") {
		t.Fatalf("re-adding a failed-over topic without --yes:\n%s", out)
	}
	if n := dst.partition("a", 0).Offsets().LogEnd; n != end {
		t.Fatalf("a refused re-add changed the log: end %d, was %d", n, end)
	}
	ok("--add", "--mirror", "m", "--topic", "a", "--yes")
	waitMirrored(t, dst, "m", "a", map[int32]int64{0: 20}, 30*time.Second)

	// JSON: an unknown lag is null, not 0; an unreachable source makes
	// --describe exit 1.
	var ms []struct {
		Partitions []struct {
			Lag   *int64 `json:"lag"`
			State string `json:"state"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(ok("--describe", "--mirror", "m", "--json")), &ms); err != nil || len(ms) != 1 || len(ms[0].Partitions) != 2 {
		t.Fatalf("--describe --json: %v %+v", err, ms)
	}
	checkMirrorsJSON(t, ok("--list", "--json"), ok("--describe", "--json"), ok("--describe-config", "--mirror", "m", "--json"))
	srcAddr := src.addr()
	src.b.Close()
	waitFor(t, 30*time.Second, "--describe to exit 1 with the source down", func() bool {
		code, _, _ := runMirrors(t, append(d, "--describe", "--mirror", "m")...)
		return code == 1
	})

	// A broker without the mirror APIs, a source that is no Kafka port.
	k := startKfake(t)
	if code, _, errOut := runMirrors(t, "--bootstrap-server", k.ListenAddrs()[0], "--list"); code != 1 || !strings.Contains(errOut, "does not support Cluster Mirroring (API 98 not advertised)") {
		t.Fatalf("against a broker without the mirror APIs: exit %d: %s", code, errOut)
	}
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	webAddr := strings.TrimPrefix(web.URL, "http://")
	if errOut := fails(1, "--create", "--mirror", "w", "--source-bootstrap", webAddr); !strings.Contains(errOut, webAddr) {
		t.Fatalf("a source that is no Kafka listener: %s", errOut)
	}
	// A source that cannot be reached: refused, naming it, unless
	// --no-validate (it may be down for now).
	if errOut := fails(1, "--create", "--mirror", "u", "--source-bootstrap", srcAddr); !strings.Contains(errOut, srcAddr) || !strings.Contains(errOut, "--no-validate") {
		t.Fatalf("--create with an unreachable source: %s", errOut)
	}
	if out := ok("--list"); strings.Contains(out, "u ") {
		t.Fatalf("a refused --create left mirror u:\n%s", out)
	}
	ok("--create", "--mirror", "u", "--source-bootstrap", srcAddr, "--no-validate")
	if out := ok("--list"); !strings.Contains(out, srcAddr) {
		t.Fatalf("--create --no-validate did not create mirror u:\n%s", out)
	}
}

// checkMirrorsJSON checks the documented schema of --json (README.md):
// snake_case keys, --list's objects the first fields of --describe's, no
// protocol internals.
func checkMirrorsJSON(t *testing.T, list, describe, configs string) {
	t.Helper()
	objects := func(what, text string) []map[string]any {
		var out []map[string]any
		if err := json.Unmarshal([]byte(text), &out); err != nil || len(out) == 0 {
			t.Fatalf("%s: %v\n%s", what, err, text)
		}
		return out
	}
	keys := func(what string, o map[string]any, want, optional []string) {
		t.Helper()
		var got []string
		for k := range o {
			if !slices.Contains(optional, k) {
				got = append(got, k)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: keys %v, want %v (and optionally %v)", what, got, want, optional)
		}
	}
	listed := objects("--list --json", list)
	summary := []string{"mirror", "source_bootstrap", "topic_count"}
	for _, m := range listed {
		keys("--list --json", m, summary, nil)
	}
	for _, m := range objects("--describe --json", describe) {
		keys("--describe --json", m, append(slices.Clone(summary), "state", "partitions", "diverged", "source_reachable"),
			[]string{"error", "acl_sync", "source_cluster_id"})
		i := slices.IndexFunc(listed, func(l map[string]any) bool { return l["mirror"] == m["mirror"] })
		if i < 0 || listed[i]["source_bootstrap"] != m["source_bootstrap"] || listed[i]["topic_count"] != m["topic_count"] {
			t.Fatalf("--list and --describe disagree on mirror %v: %v vs %v", m["mirror"], listed, m)
		}
		for _, p := range m["partitions"].([]any) {
			keys("a partition of --describe --json", p.(map[string]any),
				[]string{"topic", "partition", "state", "source_offset", "source_offset_time", "destination_offset", "lag", "lag_ms", "rpo_known"},
				[]string{"reason", "destination_issue"})
		}
	}
	for _, c := range objects("--describe-config --json", configs) {
		keys("--describe-config --json", c, []string{"name", "value", "sensitive"}, nil)
	}
}
