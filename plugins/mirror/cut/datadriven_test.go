package cut

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the files in testdata: the consistent cut of
// partitions described batch by batch. The input of every command is one
// partition a line:
//
//	NAME [start=N] [from=N] [complete=MS] [end=N]: BATCH...
//
// whose batches follow each other from offset start (default 0). A batch
// is d@TS (a data batch of one record with MaxTimestamp TS), d*N@TS (of N
// records), tPID.EPOCH@TS (transactional data of producer PID, epoch
// EPOCH; *N as for d), cPID.EPOCH@TS or aPID.EPOCH@TS (a COMMIT or ABORT
// marker), or +N (a gap of N offsets, as compaction leaves). end is where
// the partition ends (default: after its last batch); complete its Part's
// Complete. from is where its scan window starts: the window holds the
// batches from the one holding from, read with Part.Read (default: the
// log start, the whole log). The commands are:
//
//	cut [chunk=N]
//	    Consistent over the windows, Short and each partition's Loss: T,
//	    then each partition with its cut (|) among its batches, and the
//	    window's start ([) when it does not start at the log start.
//	    When a window does, the cut over the whole logs is printed too.
//	    Any transaction the cuts leave committed on one partition and not
//	    on another, by the whole logs, is printed as SPLIT. chunk is how
//	    many batches one read of a window returns (default 2). A SPLIT
//	    with short=false (windows the cutover would take) fails the
//	    test. A partition's Stable is its whole log's last stable
//	    offset (its oldest open transaction's first offset, or End).
//	short cuts=(N, ...)
//	    Short of the windows with the cuts given.
//	loss cut=N t=T
//	    Loss of the one partition given with that cut and T.
//	read [chunk=N]
//	    the one partition's window read with Part.Read: the offsets read
//	    at and the batches kept.
//
// go test ./plugins/mirror/cut -run TestDataDriven -rewrite rewrites the
// expected output.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			parts := parseParts(t, d)
			chunk := 2
			d.MaybeScanArgs(t, "chunk", &chunk)
			for i := range parts {
				parts[i].readWindow(t, d, chunk)
			}
			switch d.Cmd {
			case "cut":
				return runCut(t, parts)
			case "short":
				var cuts []int
				d.ScanArgs(t, "cuts", &cuts)
				if len(cuts) != len(parts) {
					d.Fatalf(t, "%d cuts for %d partitions", len(cuts), len(parts))
				}
				cs := make([]int64, len(cuts))
				for i, c := range cuts {
					cs[i] = int64(c)
				}
				return fmt.Sprintf("short=%v\n", Short(windows(parts), cs))
			case "loss":
				var at, ts int64
				d.ScanArgs(t, "cut", &at)
				d.ScanArgs(t, "t", &ts)
				records, ms := Loss(onePart(t, d, parts).window, at, ts)
				return fmt.Sprintf("records=%d ms=%d\n", records, ms)
			case "read":
				p := onePart(t, d, parts)
				var b strings.Builder
				fmt.Fprintf(&b, "read at %v\n", p.readAt)
				for _, bt := range p.window.Batches {
					fmt.Fprintf(&b, "batch %d-%d\n", bt.Base, bt.Last)
				}
				return b.String()
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

// logPart is one partition of the input: its whole log, and the window
// of it the cut is computed from.
type logPart struct {
	name     string
	whole    Part  // every batch, FromLogStart
	from     int64 // the window's start
	logStart int64
	window   Part
	readAt   []int64 // where Part.Read read the window
}

func (p *logPart) readWindow(t *testing.T, d *datadriven.TestData, chunk int) {
	p.window = Part{End: p.whole.End, Complete: p.whole.Complete, FromLogStart: p.from <= p.logStart, Stable: p.whole.Stable}
	err := p.window.Read(p.from, func(off int64) ([]Batch, error) {
		p.readAt = append(p.readAt, off)
		for i, b := range p.whole.Batches {
			if b.Last >= off {
				return p.whole.Batches[i:min(i+chunk, len(p.whole.Batches))], nil
			}
		}
		return nil, nil
	})
	if err != nil {
		d.Fatalf(t, "%s: read: %v", p.name, err)
	}
}

func onePart(t *testing.T, d *datadriven.TestData, parts []logPart) logPart {
	if len(parts) != 1 {
		d.Fatalf(t, "%s takes one partition, not %d", d.Cmd, len(parts))
	}
	return parts[0]
}

func windows(parts []logPart) []Part {
	out := make([]Part, len(parts))
	for i, p := range parts {
		out[i] = p.window
	}
	return out
}

func runCut(t *testing.T, parts []logPart) string {
	var b strings.Builder
	ws := windows(parts)
	ts, cuts := Consistent(ws)
	short := Short(ws, cuts)
	fmt.Fprintf(&b, "T=%d short=%v\n", ts, short)
	for i, p := range parts {
		records, ms := Loss(p.window, cuts[i], ts)
		start := int64(-1)
		if !p.window.FromLogStart && len(p.window.Batches) > 0 {
			start = p.window.Batches[0].Base
		}
		fmt.Fprintf(&b, "%s cut=%d loss=%d/%dms: %s\n", p.name, cuts[i], records, ms, renderBatches(p.whole.Batches, start, cuts[i]))
	}
	whole := make([]Part, len(parts))
	partial := false
	for i, p := range parts {
		whole[i] = p.whole
		partial = partial || !p.window.FromLogStart
	}
	if partial {
		wt, wcuts := Consistent(whole)
		fmt.Fprintf(&b, "whole logs: T=%d cuts=%v\n", wt, wcuts)
	}
	split := splits(parts, whole, cuts)
	if split != "" && !short {
		// The cutover takes these cuts: Short must have asked for
		// longer windows.
		t.Errorf("windows the cutover would take (short=false) split a transaction:\n%s%s", split, b.String())
	}
	b.WriteString(split)
	return b.String()
}

// splits names each transaction the cuts leave committed on one
// partition and pending (data kept, its COMMIT cut or not held) on
// another, judged by the whole logs. A version-1 session's pair names
// several transactions, which this cannot tell apart: those are left
// out.
func splits(parts []logPart, whole []Part, cuts []int64) string {
	committed, pending, reused := txnsBelow(whole, cuts)
	var ids []txnID
	for i := range committed {
		for id := range committed[i] {
			if !reused[id] && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.SortFunc(ids, func(a, b txnID) int { return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Epoch, b.Epoch)) })
	var b strings.Builder
	for _, id := range ids {
		var on, off []string
		for i, p := range parts {
			if committed[i][id] {
				on = append(on, p.name)
			}
			if pending[i][id] {
				off = append(off, p.name)
			}
		}
		if len(off) > 0 {
			fmt.Fprintf(&b, "SPLIT: producer %d epoch %d committed on %s, not on %s\n", id.PID, id.Epoch, strings.Join(on, ","), strings.Join(off, ","))
		}
	}
	return b.String()
}

// renderBatches prints batches as the input gives them, with [ before
// the batch at offset start and | before the first at or past cut.
func renderBatches(bs []Batch, start, cut int64) string {
	var out []string
	next, cutShown := int64(-1), false
	if len(bs) > 0 {
		next = bs[0].Base
	}
	for _, b := range bs {
		if b.Base > next {
			out = append(out, fmt.Sprintf("+%d", b.Base-next))
		}
		if !cutShown && cut >= 0 && b.Base >= cut {
			out, cutShown = append(out, "|"), true
		}
		if b.Base == start {
			out = append(out, "[")
		}
		out = append(out, renderBatch(b))
		next = b.Last + 1
	}
	if !cutShown && cut >= 0 {
		out = append(out, "|")
	}
	return strings.Join(out, " ")
}

func renderBatch(b Batch) string {
	kind := "d"
	switch {
	case b.Control && b.Commit:
		kind = "c"
	case b.Control:
		kind = "a"
	case b.Txn:
		kind = "t"
	}
	s := kind
	if kind != "d" {
		s += fmt.Sprintf("%d.%d", b.PID, b.Epoch)
	}
	if n := b.Last - b.Base + 1; n > 1 {
		s += fmt.Sprintf("*%d", n)
	}
	return s + fmt.Sprintf("@%d", b.MaxTs)
}

// parseParts reads the input's partitions.
func parseParts(t *testing.T, d *datadriven.TestData) []logPart {
	var parts []logPart
	for l := range strings.Lines(d.Input) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		head, body, ok := strings.Cut(l, ":")
		if !ok {
			d.Fatalf(t, "want NAME [options]: BATCH...: %q", l)
		}
		opts := strings.Fields(head)
		p := logPart{name: opts[0], from: -1}
		p.whole.End = -1
		for _, o := range opts[1:] {
			k, v, _ := strings.Cut(o, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				d.Fatalf(t, "%s: option %q: %v", p.name, o, err)
			}
			switch k {
			case "start":
				p.logStart = n
			case "from":
				p.from = n
			case "complete":
				p.whole.Complete = n
			case "end":
				p.whole.End = n
			default:
				d.Fatalf(t, "%s: unknown option %q", p.name, k)
			}
		}
		p.whole.Batches = parseBatches(t, d, p.logStart, strings.Fields(body))
		if p.whole.End < 0 {
			p.whole.End = p.logStart
			if n := len(p.whole.Batches); n > 0 {
				p.whole.End = p.whole.Batches[n-1].Last + 1
			}
		}
		p.whole.FromLogStart = true
		p.whole.Stable = stableOf(p.whole.Batches, p.whole.End)
		if p.from < 0 {
			p.from = p.logStart
		}
		parts = append(parts, p)
	}
	return parts
}

func parseBatches(t *testing.T, d *datadriven.TestData, next int64, tokens []string) []Batch {
	var bs []Batch
	for _, tok := range tokens {
		if n, ok := strings.CutPrefix(tok, "+"); ok {
			gap, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				d.Fatalf(t, "gap %q: %v", tok, err)
			}
			next += gap
			continue
		}
		body, ts, ok := strings.Cut(tok[1:], "@")
		if !ok {
			d.Fatalf(t, "batch %q: want KIND...@TS", tok)
		}
		b := Batch{Base: next, PID: -1, Records: 1}
		var err error
		if b.MaxTs, err = strconv.ParseInt(ts, 10, 64); err != nil {
			d.Fatalf(t, "batch %q: %v", tok, err)
		}
		body, count, _ := strings.Cut(body, "*")
		n := int64(1)
		if count != "" {
			if n, err = strconv.ParseInt(count, 10, 64); err != nil {
				d.Fatalf(t, "batch %q: %v", tok, err)
			}
		}
		switch tok[0] {
		case 'd':
		case 't', 'c', 'a':
			pid, epoch, _ := strings.Cut(body, ".")
			b.PID, err = strconv.ParseInt(pid, 10, 64)
			e, err2 := strconv.ParseInt(epoch, 10, 16)
			if err != nil || err2 != nil {
				d.Fatalf(t, "batch %q: want PID.EPOCH", tok)
			}
			b.Epoch, b.Txn = int16(e), true
			b.Control, b.Commit = tok[0] != 't', tok[0] == 'c'
		default:
			d.Fatalf(t, "batch %q: unknown kind %q", tok, tok[0])
		}
		if b.Control {
			b.Records, n = 0, 1 // a marker is one record that counts for none
		} else {
			b.Records = int32(n)
		}
		b.Last = b.Base + n - 1
		next = b.Last + 1
		bs = append(bs, b)
	}
	return bs
}
