package checker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tandem-kafka/tandem/engine"
)

// Replicas of a partition converge when their logs are the same bytes:
// the same batches at the same offsets with the same leader epochs.
// Read from the data directories of stopped brokers, the logs are what
// each broker has, up to its log end (not only what it would serve), so
// that a replica that kept a suffix no one else has shows.

// Batch is one stored record batch.
type Batch struct {
	Base, Last int64
	Epoch      int32
	Raw        []byte
}

// NodeLog is every partition log of one broker's data directory,
// "topic-partition" → its batches in offset order.
type NodeLog struct {
	Node  string // for reports: "A1", "broker 3"...
	Parts map[string][]Batch
	// Offsets are each partition's offsets as the engine opened them
	// (the high watermark is the last one checkpointed).
	Offsets map[string]engine.Offsets
}

// ReadDataDir reads every partition of the stopped broker whose data
// directory (tandem serve --data-dir) is dir.
func ReadDataDir(node, dir string) (NodeLog, error) {
	e, err := engine.Open(engine.Config{Dir: filepath.Join(dir, "data"), RetentionCheckInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return NodeLog{}, fmt.Errorf("%s: %w", node, err)
	}
	defer e.Close()
	out := NodeLog{Node: node, Parts: map[string][]Batch{}, Offsets: map[string]engine.Offsets{}}
	for _, sp := range e.Stored() {
		p := e.Partition(sp.TopicID, sp.Partition)
		if p == nil {
			continue
		}
		var bs []Batch
		for off, end := p.Offsets().LogStart, p.Offsets().LogEnd; off < end; {
			res, err := p.Fetch(off, 4<<20, engine.ReadLogEnd)
			if err != nil {
				return out, fmt.Errorf("%s: %s-%d at %d: %w", node, sp.Topic, sp.Partition, off, err)
			}
			if len(res.Batches) == 0 {
				break
			}
			for _, raw := range res.Batches {
				b := Batch{Base: int64(binary.BigEndian.Uint64(raw)), Epoch: int32(binary.BigEndian.Uint32(raw[12:])), Raw: raw}
				b.Last = b.Base + int64(binary.BigEndian.Uint32(raw[23:]))
				if b.Last >= off {
					bs = append(bs, b)
					off = b.Last + 1
				}
			}
		}
		k := fmt.Sprintf("%s-%d", sp.Topic, sp.Partition)
		out.Parts[k], out.Offsets[k] = bs, p.Offsets()
	}
	return out, nil
}

// ReplicaReport is the outcome of CompareReplicas.
type ReplicaReport struct {
	Partitions, Batches int
	Problems            []string
}

// CompareReplicas compares the logs of every partition that want keeps
// (by "topic-partition"; nil keeps all) across the nodes that hold it:
// each replica must be the same batches, byte for byte, and its leader
// epochs must never go down along the log (a batch of an older epoch
// after a newer one is a write a deposed leader took).
func CompareReplicas(nodes []NodeLog, want func(part string) bool) ReplicaReport {
	var r ReplicaReport
	holders := map[string][]int{}
	for i, n := range nodes {
		for part := range n.Parts {
			if want == nil || want(part) {
				holders[part] = append(holders[part], i)
			}
		}
	}
	for _, part := range slices.Sorted(maps.Keys(holders)) {
		r.Partitions++
		ref := nodes[holders[part][0]]
		r.Batches += len(ref.Parts[part])
		for _, i := range holders[part] {
			if p := epochsDecrease(nodes[i].Parts[part]); p != "" {
				r.Problems = append(r.Problems, fmt.Sprintf("%s on %s: %s", part, nodes[i].Node, p))
			}
			if d := diffLogs(ref.Parts[part], nodes[i].Parts[part]); d != "" {
				a, b := ref.Offsets[part], nodes[i].Offsets[part]
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s (log end %d, high watermark %d) and %s (%d, %d) differ: %s",
					part, ref.Node, a.LogEnd, a.HighWatermark, nodes[i].Node, b.LogEnd, b.HighWatermark, d))
			}
		}
	}
	return r
}

func (r ReplicaReport) String() string {
	s := fmt.Sprintf("%d partitions, %d batches", r.Partitions, r.Batches)
	if len(r.Problems) > 0 {
		s += fmt.Sprintf("; %d problems: %s", len(r.Problems), strings.Join(first(r.Problems, 10), "; "))
	}
	return s
}

func epochsDecrease(bs []Batch) string {
	for i := 1; i < len(bs); i++ {
		if bs[i].Epoch < bs[i-1].Epoch {
			return fmt.Sprintf("epoch %d at offset %d after epoch %d at %d", bs[i].Epoch, bs[i].Base, bs[i-1].Epoch, bs[i-1].Base)
		}
	}
	return ""
}

// diffLogs describes the first difference between two logs, "" if none.
func diffLogs(a, b []Batch) string {
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		if x.Base != y.Base || x.Epoch != y.Epoch || !bytes.Equal(x.Raw, y.Raw) {
			return fmt.Sprintf("batch %d: [%d,%d] epoch %d vs [%d,%d] epoch %d (same bytes %v)",
				i, x.Base, x.Last, x.Epoch, y.Base, y.Last, y.Epoch, bytes.Equal(x.Raw, y.Raw))
		}
	}
	if len(a) != len(b) {
		var longer []Batch
		if len(a) > len(b) {
			longer = a[len(b):]
		} else {
			longer = b[len(a):]
		}
		var tail []string
		for _, x := range longer[:min(len(longer), 3)] {
			tail = append(tail, fmt.Sprintf("[%d,%d] epoch %d", x.Base, x.Last, x.Epoch))
		}
		return fmt.Sprintf("%d batches vs %d, the longer one goes on with %s", len(a), len(b), strings.Join(tail, ", "))
	}
	return ""
}
