package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// A Verb is one `tandem <command> <verb>`: `tandem topics create`.
type Verb struct {
	Name    string
	Summary string
	Run     func(args []string, stdout, stderr io.Writer) int
}

// RunVerbs runs the verb args[0] of `tandem name`, or prints doc and the
// verbs for --help.
func RunVerbs(name, doc string, verbs []Verb, args []string, stdout, stderr io.Writer) int {
	var names []string
	for _, v := range verbs {
		names = append(names, v.Name)
	}
	if len(args) == 0 {
		return Exit(stderr, name, UsageErrorf("choose one of %s (tandem %s --help)", strings.Join(names, ", "), name))
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, strings.TrimRight(doc, "\n")+"\n\nCommands:\n")
		for _, v := range verbs {
			fmt.Fprintf(stdout, "  %-15s %s\n", v.Name, v.Summary)
		}
		fmt.Fprintf(stdout, "\n`tandem %s <command> --help` describes a command and its flags.\n", name)
		return 0
	}
	for _, v := range verbs {
		if v.Name == args[0] {
			return v.Run(args[1:], stdout, stderr)
		}
	}
	return Exit(stderr, name, UsageErrorf("unknown command %q: choose one of %s", args[0], strings.Join(names, ", ")))
}

// PrintJSON prints v as one line of JSON.
func PrintJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// Table is a tab-aligned table with a header, as kafka-topics.sh and
// kafka-consumer-groups.sh print theirs.
type Table struct{ tw *tabwriter.Writer }

func NewTable(w io.Writer, header ...string) *Table {
	t := &Table{tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.Row(toAny(header)...)
	return t
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (t *Table) Row(cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

func (t *Table) Flush() error { return t.tw.Flush() }

// OrDash prints an unknown (nil) number as "-".
func OrDash(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// MultiFlag collects a repeated flag.
type MultiFlag []string

func (m *MultiFlag) String() string     { return strings.Join(*m, ",") }
func (m *MultiFlag) Set(v string) error { *m = append(*m, v); return nil }

// KeyValues parses --config k=v flags.
func KeyValues(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, UsageErrorf("--config %q: want k=v", kv)
		}
		out[k] = v
	}
	return out, nil
}
