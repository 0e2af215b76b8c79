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
// security flags or --command-config of client.go, and print --json in
// the shapes docs/cli.md documents.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
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
		{name: "mirrors", summary: "manage cluster mirrors (KIP-1279's kafka-mirrors.sh)", run: mirrors},
		{name: "demo", summary: "mirror a topic between two local clusters and show the lag", run: demo},
		{name: "bench", summary: "run the benchmark harness", run: runBench},
		{name: "version", summary: "print the version", run: version},
		{name: "help", summary: "describe tandem or a command", run: help},
	}
}

// run dispatches to a command and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return exit(stderr, "", usageErrorf("no command; tandem help lists them"))
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
	return exit(stderr, "", usageErrorf("unknown command %q; tandem help lists the commands", name))
}

// usageError is a mistake in the command line or in the configuration it
// names: the command did nothing. It exits 2.
type usageError struct{ error }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exit reports the outcome of `tandem <name>`: nothing for a nil err,
// else the one line "tandem <name>: <message>" on stderr. It returns the
// exit code: 0, 2 for a usageError, 1 for any other error.
func exit(stderr io.Writer, name string, err error) int {
	if err == nil {
		return 0
	}
	prefix := "tandem"
	if name != "" {
		prefix += " " + name
	}
	// Joined errors and some clients' messages span lines.
	msg := strings.Join(strings.FieldsFunc(err.Error(), func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
	fmt.Fprintf(stderr, "%s: %s\n", prefix, inWords(msg, err))
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

// flags is a command's flag set, parsed the CLI's way (see parse).
type flags struct {
	*flag.FlagSet
	doc string
}

// newFlags returns the flag set of `tandem <name>`. doc is its --help
// text: what the command does, first, then its usage line and whatever
// the flags do not say; the flags follow it.
func newFlags(name, doc string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors and help itself
	fs.Usage = func() {}
	return &flags{FlagSet: fs, doc: doc}
}

// parse parses args; flags may follow the arguments (`tandem topics
// create orders --partitions 6`), and everything after "--" is an
// argument. With done true the command returns code at once: 0 after
// --help (printed on stdout), 2 after a bad flag (reported on stderr as
// one line).
func (f *flags) parse(args []string, stdout, stderr io.Writer) (code int, done bool) {
	var positional []string
	for {
		err := f.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			f.printHelp(stdout)
			return 0, true
		case err != nil:
			return exit(stderr, f.Name(), usageErrorf("%s (tandem %s --help lists the flags)", flagNames(err.Error()), f.Name())), true
		}
		rest := f.Args()
		if n := len(args) - len(rest); len(rest) == 0 || n > 0 && args[n-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// Parsing "--" alone leaves the flags as they are and makes the
	// arguments f.Args().
	f.Parse(append([]string{"--"}, positional...)) //nolint:errcheck // cannot fail
	return 0, false
}

// dashed is a flag's name as the docs write it: --name, and -e for a
// one-letter flag (Go's flag package takes either spelling).
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagRef is a flag named in an error of Go's flag package, which
// writes every name with one dash ("flag provided but not defined: -x").
var flagRef = regexp.MustCompile(`(^|: | flag )-{1,2}([A-Za-z0-9][A-Za-z0-9._-]*)`)

// flagNames rewrites the flags an error of the flag package names as
// dashed writes them, so that an error says --bootstrap-server as the
// docs and --help do.
func flagNames(msg string) string {
	return flagRef.ReplaceAllStringFunc(msg, func(m string) string {
		sub := flagRef.FindStringSubmatch(m)
		return sub[1] + dashed(sub[2])
	})
}

// printHelp prints doc and the flags, written --name as README does.
func (f *flags) printHelp(w io.Writer) {
	fmt.Fprint(w, strings.TrimRight(f.doc, "\n")+"\n")
	first := true
	f.VisitAll(func(fl *flag.Flag) {
		if first {
			fmt.Fprint(w, "\nFlags:\n")
			first = false
		}
		typ, usage := flag.UnquoteUsage(fl)
		line := "  " + dashed(fl.Name)
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintf(w, "%s\n      %s", line, usage)
		switch {
		case fl.DefValue == "" || fl.DefValue == "false" || fl.DefValue == "0" && typ != "int":
		case typ == "string":
			fmt.Fprintf(w, " (default %q)", fl.DefValue)
		default:
			fmt.Fprintf(w, " (default %s)", fl.DefValue)
		}
		fmt.Fprintln(w)
	})
}

const helpDoc = `Describes tandem, or a command and its flags.

Usage: tandem help [command]
`

func help(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("help", helpDoc)
	if code, done := fs.parse(args, stdout, stderr); done {
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
			return exit(stderr, "help", usageErrorf("unknown command %q; tandem help lists the commands", fs.Arg(0)))
		}
	}
	return exit(stderr, "help", usageErrorf("one command at a time, not %q", fs.Args()))
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
	fs := newFlags("version", versionDoc)
	if code, done := fs.parse(args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		return exit(stderr, "version", usageErrorf("unexpected arguments %q", fs.Args()))
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
