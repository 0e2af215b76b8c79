// Package prom writes metrics in the Prometheus text format with a HELP
// and a TYPE line for every family. The values live in a VictoriaMetrics
// metrics.Set, as everywhere in Tandem; what that library cannot say of a
// family (its help text, and its type when a gauge callback reports a
// cumulative count) is described here, once per family, next to the code
// that registers it. docs/metrics.md lists every family.
package prom

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// Type is a Prometheus metric type.
type Type string

// The metric types Tandem exports.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
	Summary   Type = "summary"
)

// Family describes a metric family: its name (without labels), its type
// and what it measures.
type Family struct {
	Name string
	Type Type
	Help string
}

// Set is a metrics.Set whose families are described. Register metrics on
// the embedded Set as usual and Describe their families; WritePrometheus
// writes HELP and TYPE before each family. A family that was never
// described is written without them (as untyped), which `promtool check
// metrics` reports: the tests scrape a broker and run it.
type Set struct {
	*metrics.Set

	mu       sync.RWMutex
	fams     map[string]Family
	children []*metrics.Set
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{Set: metrics.NewSet(), fams: map[string]Family{}} }

// Describe records the families' types and help texts; describing a
// family again replaces what was said of it.
func (s *Set) Describe(fams ...Family) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range fams {
		s.fams[f.Name] = f
	}
}

// Families are the described families, sorted by name.
func (s *Set) Families() []Family {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Family, 0, len(s.fams))
	for _, f := range s.fams {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *Set) family(name string) (Family, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f, ok := s.fams[name]
	return f, ok
}

// Add writes the metrics of c with the set's until Remove. A part with
// many series of its own (a mirror's, three a partition) registers them
// on a child it drops whole when it stops: VictoriaMetrics unregisters
// one metric in time linear in its set, and a stop that unregistered
// 150,000 series one by one took longer than a broker's shutdown may.
func (s *Set) Add(c *metrics.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.children = append(s.children, c)
}

// Remove stops writing c's metrics.
func (s *Set) Remove(c *metrics.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.children = slices.DeleteFunc(s.children, func(x *metrics.Set) bool { return x == c })
}

// WritePrometheus writes the set's metrics and its children's, grouped
// by family, each with its HELP and TYPE.
func (s *Set) WritePrometheus(w io.Writer) {
	var buf bytes.Buffer
	s.Set.WritePrometheus(&buf)
	s.mu.RLock()
	children := slices.Clone(s.children)
	s.mu.RUnlock()
	for _, c := range children {
		c.WritePrometheus(&buf)
	}
	write(w, buf.Bytes(), s.family, true)
}

// write writes the samples of text (Prometheus text without metadata, as
// VictoriaMetrics writes it; any comment line is dropped) grouped by
// family, families in name order, each after its HELP and TYPE. A sample
// of an undescribed family is written as it is when keep is set, else
// dropped.
func write(w io.Writer, text []byte, describe func(string) (Family, bool), keep bool) {
	type group struct {
		fam   Family
		known bool
		lines [][]byte
	}
	groups := map[string]*group{}
	for line := range bytes.Lines(text) {
		if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
			continue
		}
		name := string(line[:bytes.IndexAny(line, "{ ")])
		fam, known := resolve(name, describe)
		if !known && !keep {
			continue
		}
		g := groups[fam.Name]
		if g == nil {
			g = &group{fam: fam, known: known}
			groups[fam.Name] = g
		}
		if line[len(line)-1] != '\n' {
			line = append(line, '\n')
		}
		g.lines = append(g.lines, line)
	}
	var out bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		g := groups[name]
		if g.known {
			fmt.Fprintf(&out, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(g.fam.Help), name, g.fam.Type)
		}
		for _, l := range g.lines {
			out.Write(l)
		}
	}
	w.Write(out.Bytes()) //nolint:errcheck // as metrics.Set.WritePrometheus: the scraper sees a short answer
}

// resolve finds the family of a sample name: the name itself, or, for the
// _bucket, _sum and _count samples of a histogram or summary, its stem.
func resolve(name string, describe func(string) (Family, bool)) (Family, bool) {
	if f, ok := describe(name); ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		stem, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if f, ok := describe(stem); ok && (f.Type == Histogram || f.Type == Summary && suffix != "_bucket") {
			return f, true
		}
	}
	return Family{Name: name}, false
}

// escapeHelp escapes a help text as the text format requires.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
