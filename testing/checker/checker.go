// Package checker is a Jepsen-style check of what a Kafka cluster
// acknowledged against what it serves: producers record every
// acknowledged (partition, offset, value), a consumer reads the topic back
// to its high watermarks, and Check reports acknowledged values that are
// lost, read more than once, or read at another place than the one
// acknowledged.
package checker

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Place is where a record is in a topic.
type Place struct {
	Partition int32
	Offset    int64
}

func (p Place) String() string { return fmt.Sprintf("%d@%d", p.Partition, p.Offset) }

// History is what producers were told. Values must be unique.
type History struct {
	mu    sync.Mutex
	acked map[string]Place
}

// Acked records that the value was acknowledged at p.
func (h *History) Acked(value string, p Place) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.acked == nil {
		h.acked = map[string]Place{}
	}
	h.acked[value] = p
}

// Len is the number of acknowledged values.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acked)
}

// Acknowledged returns every acknowledged value with its place.
func (h *History) Acknowledged() map[string]Place {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.acked)
}

// Record is a value read back at a place.
type Record struct {
	Value string
	Place Place
}

// Report is the outcome of a check.
type Report struct {
	Acked, Read int
	Lost        []string // acknowledged, not read
	Duplicated  []string // read more than once
	Moved       []string // read somewhere else than acknowledged
}

// OK reports whether every acknowledged value was read once, where it
// was acknowledged.
func (r Report) OK() bool { return len(r.Lost)+len(r.Duplicated)+len(r.Moved) == 0 }

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d acknowledged, %d read", r.Acked, r.Read)
	for _, l := range []struct {
		name string
		vs   []string
	}{{"lost", r.Lost}, {"duplicated", r.Duplicated}, {"moved", r.Moved}} {
		if len(l.vs) > 0 {
			fmt.Fprintf(&b, "; %d %s: %s", len(l.vs), l.name, strings.Join(first(l.vs, 10), ", "))
		}
	}
	return b.String()
}

func first(vs []string, n int) []string {
	if len(vs) > n {
		return append(vs[:n:n], "...")
	}
	return vs
}

// Check compares the history with what was read.
func (h *History) Check(read []Record) Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Report{Acked: len(h.acked), Read: len(read)}
	seen := map[string][]Place{}
	for _, rec := range read {
		seen[rec.Value] = append(seen[rec.Value], rec.Place)
	}
	for v, at := range h.acked {
		got := seen[v]
		switch {
		case len(got) == 0:
			r.Lost = append(r.Lost, fmt.Sprintf("%s (%v)", v, at))
		case got[0] != at:
			r.Moved = append(r.Moved, fmt.Sprintf("%s (acknowledged %v, read %v)", v, at, got[0]))
		}
	}
	for v, at := range seen {
		if len(at) > 1 {
			r.Duplicated = append(r.Duplicated, fmt.Sprintf("%s %v", v, at))
		}
	}
	sort.Strings(r.Lost)
	sort.Strings(r.Moved)
	sort.Strings(r.Duplicated)
	return r
}

// ReadAll reads a topic without transactions from its start to the high
// watermarks it has when ReadAll is called, with a client made from opts
// (seed brokers and the like).
func ReadAll(ctx context.Context, topic string, opts ...kgo.Opt) ([]Record, error) {
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	// Right after a restart a partition may have no leader yet
	// (retriable): ask until it has, or ctx ends.
	var ends kadm.ListedOffsets
	for {
		ends, err = kadm.NewClient(adm).ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil || !kerr.IsRetriable(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	adm.Close()
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("reading %s back (%d partitions not at their end %v): %w", topic, len(want), want, ctx.Err())
		}
		fs.EachError(func(t string, p int32, err error) {}) // retriable: the client retries
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, Record{Value: string(r.Value), Place: Place{r.Partition, r.Offset}})
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
}
