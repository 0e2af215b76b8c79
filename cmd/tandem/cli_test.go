package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestCLIStyle runs bad and good invocations of the commands this file's
// framework serves and checks the one style: a failure is the single line
// "tandem <command>: <message>" on stderr, exit 2 for a usage or
// configuration error (a data dir or port in use included: nothing was
// started; they exited 1 before) and 1 for a runtime one; --help exits 0
// and starts with what the command does.
func TestCLIStyle(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	// A data dir in use by a broker of this process, and one of node 1.
	inUse, node1 := t.TempDir(), t.TempDir()
	tandemtest.StartInProcessIn(t, inUse, nil)
	tandemtest.StartInProcessIn(t, node1, nil).Close()

	// A data dir that recorded a cluster of three brokers.
	clusterDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(clusterDir, "cluster.json"),
		[]byte(`{"brokers":3,"kafka":["127.0.0.1:1","127.0.0.1:2","127.0.0.1:3"],"controller":["127.0.0.1:4","127.0.0.1:5","127.0.0.1:6"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := func(args ...string) []string {
		return append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", ""}, args...)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string // a regular expression for the one line, "" for none
		stdout string // what stdout starts with
	}{
		{nil, 2, `^tandem: no command; tandem help lists them$`, ""},
		{[]string{"bogus"}, 2, `^tandem: unknown command "bogus"`, ""},
		{[]string{"help"}, 0, "", "Tandem is a Kafka-compatible broker"},
		{[]string{"--help"}, 0, "", "Tandem is a Kafka-compatible broker"},
		{[]string{"help", "serve"}, 0, "", "Runs a broker."},
		{[]string{"help", "version"}, 0, "", "Prints the version"},
		{[]string{"help", "nosuch"}, 2, `^tandem help: unknown command "nosuch"`, ""},
		{[]string{"help", "serve", "version"}, 2, `^tandem help: one command at a time`, ""},
		{[]string{"serve", "--help"}, 0, "", "Runs a broker."},
		{[]string{"serve", "-h"}, 0, "", "Runs a broker."},
		{[]string{"help", "mirrors"}, 0, "", "Manages Cluster Mirroring"},
		{[]string{"mirrors", "--help"}, 0, "", "Manages Cluster Mirroring"},
		{[]string{"mirrors", "--bogus"}, 2, `^tandem mirrors: flag provided but not defined: --bogus \(tandem mirrors --help lists the flags\)$`, ""},
		{[]string{"mirrors", "extra"}, 2, `^tandem mirrors: unexpected arguments \["extra"\]`, ""},
		{[]string{"mirrors", "--list", "--describe"}, 2, `^tandem mirrors: choose one of`, ""},
		{[]string{"demo", "--help"}, 0, "", "Shows Cluster Mirroring on one machine"},
		{[]string{"demo", "--records", "x"}, 2, `^tandem demo: invalid value "x" for flag --records`, ""},
		{[]string{"demo", "extra"}, 2, `^tandem demo: unexpected arguments`, ""},
		{[]string{"demo", "--brokers", "0"}, 2, `^tandem demo: --brokers 0: want 1 to 9$`, ""},
		{[]string{"help", "cluster"}, 0, "", "Starts a local cluster of N brokers"},
		{[]string{"cluster", "--brokers", "0"}, 2, `^tandem cluster: --brokers 0: want 1 to 50$`, ""},
		{[]string{"cluster", "extra"}, 2, `^tandem cluster: unknown command "extra": tandem cluster \[flags\] starts a cluster`, ""},
		{[]string{"cluster", "--brokers", "1", "extra"}, 2, `^tandem cluster: unexpected arguments \["extra"\]$`, ""},
		{[]string{"help", "cluster", "restart"}, 0, "", "Restarts node N"},
		{[]string{"help", "topics"}, 0, "", "Lists, creates, describes and deletes topics"},
		{[]string{"help", "topics", "create"}, 0, "", "Creates topics."},
		{[]string{"topics", "create", "--help"}, 0, "", "Creates topics."},
		{[]string{"groups", "--help"}, 0, "", "Lists, describes"},
		{[]string{"acls", "help"}, 0, "", "Lists, creates and deletes ACLs"},
		{[]string{"produce", "--help"}, 0, "", "Writes records to a topic"},
		{[]string{"consume", "-h"}, 0, "", "Prints the records of a topic"},
		{[]string{"cluster", "--set", "node.id=2"}, 2, `^tandem cluster: --set node.id: tandem cluster sets it for each broker$`, ""},
		{[]string{"cluster", "--listen-base", "nohost"}, 2, `^tandem cluster: --listen-base: address nohost: missing port`, ""},
		{[]string{"cluster", "--data-dir", clusterDir, "--brokers", "5"}, 2, `^tandem cluster: --data-dir .* holds a cluster of 3 brokers, not 5; use another --data-dir$`, ""},
		{[]string{"version"}, 0, "", "tandem "},
		{[]string{"version", "--help"}, 0, "", "Prints the version"},
		{[]string{"version", "extra"}, 2, `^tandem version: unexpected arguments`, ""},
		{[]string{"serve", "--bogus"}, 2, `^tandem serve: flag provided but not defined: --bogus \(tandem serve --help lists the flags\)$`, ""},
		{[]string{"serve", "extra"}, 2, `^tandem serve: unexpected arguments \["extra"\]$`, ""},
		{[]string{"serve", "--node-id"}, 2, `^tandem serve: flag needs an argument: --node-id`, ""},
		{[]string{"serve", "--node-id", "x"}, 2, `^tandem serve: invalid value "x" for flag --node-id`, ""},
		{[]string{"serve", "--set", "novalue"}, 2, `^tandem serve: invalid value "novalue" for flag --set: want key=value`, ""},
		{serve("--log-level", "loud"), 2, `^tandem serve: --log-level: `, ""},
		{serve("--config", filepath.Join(t.TempDir(), "missing.properties")), 2, `^tandem serve: --config: open .*missing.properties: no such file`, ""},
		{serve("--set", "node.id=x"), 2, `^tandem serve: node.id="x": `, ""},
		{serve("--set", "num.partitions=x"), 2, `^tandem serve: .*num.partitions`, ""},
		{serve("--set", "offsets.topic.num.partitions=-1"), 2, `^tandem serve: consumer groups: offsets.topic.num.partitions="-1"`, ""},
		{serve("--set", "super.users=admin"), 2, `^tandem serve: security: super.users: "admin" is not a principal`, ""},
		{serve("--listen", busy.Addr().String()), 2, `^tandem serve: .*` + regexp.QuoteMeta(busy.Addr().String()) + `.*address already in use$`, ""},
		{serve("--http", busy.Addr().String()), 2, `^tandem serve: http listener: .*address already in use$`, ""},
		{[]string{"serve", "--data-dir", inUse, "--listen", "127.0.0.1:0", "--http", busy.Addr().String()}, 2,
			fmt.Sprintf(`^tandem serve: data dir %s is in use by another Tandem \(pid %d\)$`, regexp.QuoteMeta(inUse), os.Getpid()), ""},
		{[]string{"serve", "--data-dir", node1, "--node-id", "2", "--listen", "127.0.0.1:0", "--http", ""}, 2,
			fmt.Sprintf(`^tandem serve: data dir %s belongs to node 1, not to node 2`, regexp.QuoteMeta(node1)), ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		name := strings.Join(tc.args, " ")
		if code != tc.code {
			t.Errorf("tandem %s: exit %d, want %d\nstderr: %s", name, code, tc.code, stderr.String())
		}
		switch {
		case tc.stderr == "" && stderr.Len() > 0:
			t.Errorf("tandem %s: stderr %q, want none", name, stderr.String())
		case tc.stderr != "":
			line, rest, _ := strings.Cut(stderr.String(), "\n")
			if rest != "" || !regexp.MustCompile(tc.stderr).MatchString(line) {
				t.Errorf("tandem %s: stderr\n%s\nwant one line matching %s", name, stderr.String(), tc.stderr)
			}
		}
		if !strings.HasPrefix(stdout.String(), tc.stdout) {
			t.Errorf("tandem %s: stdout starts %.60q, want %q", name, stdout.String(), tc.stdout)
		}
	}
}

// TestBenchCLI: bench follows the same exit codes (it writes to the
// process's own stdout and stderr).
func TestBenchCLI(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = null, null
	defer func() { os.Stdout, os.Stderr = stdout, stderr }()
	for args, want := range map[string]int{"bench --help": 0, "bench --bogus": 2} {
		if code := run(strings.Fields(args), new(bytes.Buffer), new(bytes.Buffer)); code != want {
			t.Errorf("tandem %s: exit %d, want %d", args, code, want)
		}
	}
}

// TestServeWithoutACLPlugin builds tandem without the security plugin: a
// broker asked for an authorizer refuses to start (it used to run with
// authorization silently off), in one line, with exit 2.
func TestServeWithoutACLPlugin(t *testing.T) {
	tandemtest.Long(t) // tens of seconds: the full tier only
	bin := filepath.Join(t.TempDir(), "tandem")
	if out, err := exec.Command("go", "build", "-tags", "tandem_omit_acl", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "",
		"--set", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer", "--set", "super.users=User:admin")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2; stderr:\n%s", err, stderr.String())
	}
	want := regexp.MustCompile(`^tandem serve: .*authorizer.class.name needs an authorizer .*super.users needs ACLs .*\n$`)
	if !want.MatchString(stderr.String()) {
		t.Fatalf("stderr:\n%s\nwant one line matching %s", stderr.String(), want)
	}
}

// TestREADMEFlags: README's flag table lists every flag of tandem serve.
func TestREADMEFlags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := run([]string{"serve", "--help"}, &out, new(bytes.Buffer)); code != 0 {
		t.Fatalf("serve --help: exit %d", code)
	}
	flags := regexp.MustCompile(`(?m)^  --([a-z-]+)`).FindAllStringSubmatch(out.String(), -1)
	if len(flags) < 5 {
		t.Fatalf("serve --help lists %d flags:\n%s", len(flags), out.String())
	}
	for _, f := range flags {
		if !regexp.MustCompile("(?m)^\\| `--" + f[1] + "[ `]").Match(readme) {
			t.Errorf("README's flag table does not list --%s", f[1])
		}
	}
}
