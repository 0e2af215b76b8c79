package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// A verb is one `tandem <command> <verb>`: `tandem topics create`.
type verb struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// runVerbs runs the verb args[0] of `tandem name`, or prints doc and the
// verbs for --help.
func runVerbs(name, doc string, verbs []verb, args []string, stdout, stderr io.Writer) int {
	var names []string
	for _, v := range verbs {
		names = append(names, v.name)
	}
	if len(args) == 0 {
		return exit(stderr, name, usageErrorf("choose one of %s (tandem %s --help)", strings.Join(names, ", "), name))
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, strings.TrimRight(doc, "\n")+"\n\nCommands:\n")
		for _, v := range verbs {
			fmt.Fprintf(stdout, "  %-15s %s\n", v.name, v.summary)
		}
		fmt.Fprintf(stdout, "\n`tandem %s <command> --help` describes a command and its flags.\n", name)
		return 0
	}
	for _, v := range verbs {
		if v.name == args[0] {
			return v.run(args[1:], stdout, stderr)
		}
	}
	return exit(stderr, name, usageErrorf("unknown command %q: choose one of %s", args[0], strings.Join(names, ", ")))
}

// printJSON prints v as one line of JSON.
func printJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// table is a tab-aligned table with a header, as kafka-topics.sh and
// kafka-consumer-groups.sh print theirs.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(toAny(header)...)
	return t
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (t *table) row(cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// orDash prints an unknown (nil) number as "-".
func orDash(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
