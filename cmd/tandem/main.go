// Command tandem is the Tandem broker: a Kafka-compatible broker with
// Cluster Mirroring (KIP-1279).
//
//	tandem serve [flags]                  run a broker
//	tandem cluster [flags]                run a local multi-broker cluster
//	tandem cluster describe|health|restart  look at a cluster, restart a node
//	tandem topics list|create|describe|delete|add-partitions|alter-config
//	tandem groups list|describe|reset-offsets|delete
//	tandem acls list|create|delete
//	tandem produce TOPIC / tandem consume TOPIC
//	tandem mirrors [flags]                manage cluster mirrors
//	tandem demo [flags]                   mirror a topic between two local clusters
//	tandem bench [flags]                  run the benchmark harness
//	tandem version                        print the version
//	tandem help [command]                 describe tandem or a command
//
// Every command follows one style: a failure is one line
// "tandem <command>: <message>" on stderr, with exit code 2 when the
// command line or the configuration is wrong (nothing was done) and 1
// when the command failed while running; --help prints what the command
// does and its flags on stdout and exits 0. The commands that talk to a
// cluster take --bootstrap-server as a comma-separated list and the
// security flags or --command-config of internal/cli/client.go, and print --json in
// the shapes docs/cli.md documents.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/cmd/tandem/internal/mirrorcmd"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// A command is one `tandem <name>`. run returns the exit code.
type command struct {
	name    string
	summary string // what it does, for `tandem help`
	run     func(args []string, stdout, stderr io.Writer) int
	verbs   bool // `tandem help NAME VERB` describes a verb
}

// commands are tandem's commands, in the order `tandem help` lists them.
// (A function, not a variable: help refers to it.)
func commands() []command {
	return []command{
		{name: "serve", summary: "run a broker", run: serve},
		{name: "cluster", summary: "run a local cluster of N brokers; describe, health, restart N", run: cluster, verbs: true},
		{name: "topics", summary: "list, create, describe, delete topics; add partitions, alter configs", run: topics, verbs: true},
		{name: "groups", summary: "list, describe (lag), reset offsets of, delete consumer and share groups", run: groups, verbs: true},
		{name: "acls", summary: "list, create, delete ACLs (kafka-acls.sh's words)", run: acls, verbs: true},
		{name: "produce", summary: "write records to a topic from stdin", run: produce},
		{name: "consume", summary: "print the records of a topic", run: consume},
		{name: "mirrors", summary: "manage cluster mirrors (KIP-1279's kafka-mirrors.sh)", run: mirrorcmd.Run},
		{name: "demo", summary: "mirror a topic between two local clusters and show the lag", run: demo},
		{name: "bench", summary: "run the benchmark harness", run: runBench},
		{name: "version", summary: "print the version", run: version},
		{name: "help", summary: "describe tandem or a command", run: help},
	}
}

// run dispatches to a command and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return cli.Exit(stderr, "", cli.UsageErrorf("no command; tandem help lists them"))
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(args[1:], stdout, stderr)
		}
	}
	return cli.Exit(stderr, "", cli.UsageErrorf("unknown command %q; tandem help lists the commands", name))
}

const helpDoc = `Describes tandem, or a command and its flags.

Usage: tandem help [command]
`

func help(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlags("help", helpDoc)
	if code, done := fs.ParseArgs(args, stdout, stderr); done {
		return code
	}
	switch fs.NArg() {
	case 0:
		printUsage(stdout)
		return 0
	case 1, 2:
		for _, c := range commands() {
			switch {
			case c.name != fs.Arg(0):
			case fs.NArg() == 1:
				return c.run([]string{"--help"}, stdout, stderr)
			case c.verbs:
				return c.run([]string{fs.Arg(1), "--help"}, stdout, stderr)
			}
		}
		if fs.NArg() == 1 {
			return cli.Exit(stderr, "help", cli.UsageErrorf("unknown command %q; tandem help lists the commands", fs.Arg(0)))
		}
	}
	return cli.Exit(stderr, "help", cli.UsageErrorf("one command at a time, not %q", fs.Args()))
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "Tandem is a Kafka-compatible broker with Cluster Mirroring (KIP-1279).\n\nUsage: tandem <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s  %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\n`tandem help <command>` or `tandem <command> --help` describes a command and its flags.\n")
}

const versionDoc = `Prints the version of tandem: the module version, the VCS revision it was
built from (with "modified" for uncommitted changes) and its commit time,
and the Go version.

Usage: tandem version

A binary built by go build in a git checkout records all of them; one
built by go run, with -buildvcs=false or in a git worktree (which Go does
not read) records no revision: make build passes it in then.
`

func version(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlags("version", versionDoc)
	if code, done := fs.ParseArgs(args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		return cli.Exit(stderr, "version", cli.UsageErrorf("unexpected arguments %q", fs.Args()))
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionString(info))
	return 0
}

// revision, revisionTime and revisionModified are set by make build
// (-ldflags -X) for builds where Go records no VCS information.
var revision, revisionTime, revisionModified string

// versionString reports the module version and the VCS revision the
// binary was built from, as the Go toolchain recorded them (or make
// build passed them in): "tandem v0.0.0-20261203084200-c9ecee7f0a1b+dirty
// (revision c9ecee7f0a1b..., 2026-12-03T08:42:00Z, modified) go1.26.8".
// What is not known says so, never "(devel)".
func versionString(info *debug.BuildInfo) string {
	if info == nil {
		return "tandem: no build information in this binary"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "development build"
	}
	rev, at, modified := revision, revisionTime, revisionModified == "true"
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var detail []string
	if rev == "" {
		detail = append(detail, "revision unknown: built without VCS information")
	} else {
		detail = append(detail, "revision "+rev)
		if at != "" {
			detail = append(detail, at)
		}
		if modified {
			detail = append(detail, "modified")
		}
	}
	return fmt.Sprintf("tandem %s (%s) %s", v, strings.Join(detail, ", "), info.GoVersion)
}
