// Package cli is what every tandem command shares: its flag set, parsed
// the CLI's way, the usage error and the one-line failure with its exit
// code, the connection flags and the client they build, the run of a
// command that talks to a cluster, errors in words, verbs, tables and
// JSON.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// UsageError is a mistake in the command line or in the configuration it
// names: the command did nothing. It exits 2.
type UsageError struct{ error }

// Usage makes err a UsageError.
func Usage(err error) error { return UsageError{err} }

func UsageErrorf(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// Exit reports the outcome of `tandem <name>`: nothing for a nil err,
// else the one line "tandem <name>: <message>" on stderr. It returns the
// exit code: 0, 2 for a UsageError, 1 for any other error.
func Exit(stderr io.Writer, name string, err error) int {
	if err == nil {
		return 0
	}
	prefix := "tandem"
	if name != "" {
		prefix += " " + name
	}
	// Joined errors and some clients' messages span lines.
	msg := strings.Join(strings.FieldsFunc(err.Error(), func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
	fmt.Fprintf(stderr, "%s: %s\n", prefix, InWords(msg, err))
	if errors.As(err, new(UsageError)) {
		return 2
	}
	return 1
}

// Flags is a command's flag set, parsed the CLI's way (see ParseArgs).
type Flags struct {
	*flag.FlagSet
	doc string
}

// NewFlags returns the flag set of `tandem <name>`. doc is its --help
// text: what the command does, first, then its usage line and whatever
// the flags do not say; the flags follow it.
func NewFlags(name, doc string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // ParseArgs reports errors and help itself
	fs.Usage = func() {}
	return &Flags{FlagSet: fs, doc: doc}
}

// ParseArgs parses args; flags may follow the arguments (`tandem topics
// create orders --partitions 6`), and everything after "--" is an
// argument. With done true the command returns code at once: 0 after
// --help (printed on stdout), 2 after a bad flag (reported on stderr as
// one line).
func (f *Flags) ParseArgs(args []string, stdout, stderr io.Writer) (code int, done bool) {
	var positional []string
	for {
		err := f.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			f.printHelp(stdout)
			return 0, true
		case err != nil:
			return Exit(stderr, f.Name(), UsageErrorf("%s (tandem %s --help lists the flags)", flagNames(err.Error()), f.Name())), true
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
func (f *Flags) printHelp(w io.Writer) {
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
