// Command tandem is the Tandem broker: a Kafka-compatible broker.
//
//	tandem serve [flags]    run a broker
//	tandem bench [flags]    run the benchmark harness
//	tandem mirrors [flags]  manage cluster mirrors
//	tandem demo [flags]     mirror a topic between two local clusters
//	tandem version          print the version
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(rest, stderr)
	case "bench":
		return runBench(rest)
	case "mirrors":
		return mirrors(rest, stdout, stderr)
	case "demo":
		return demo(rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "tandem: unknown command %q\n\n", cmd)
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Tandem is a Kafka-compatible broker.

Usage:
  tandem <command> [flags]

Commands:
  serve     run a broker (tandem serve -h for its flags)
  bench     run the benchmark harness (tandem bench -h)
  mirrors   manage cluster mirrors (tandem mirrors -h)
  demo      mirror a topic between two local clusters and show the lag (tandem demo -h)
  version   print the version
  help      print this help
`)
}

// versionString reports the module version and VCS revision the binary was
// built from, as recorded by the Go toolchain.
func versionString() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "tandem (unknown version)"
	}
	v, rev, dirty := info.Main.Version, "", ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return fmt.Sprintf("tandem %s %s", v, info.GoVersion)
}
