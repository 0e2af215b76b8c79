package mirrorcmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// A consistent failover's report says the cut's time and, per partition,
// what went into the quarantine beyond it; --json carries the same.
func TestPrintCut(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 1, 300e6, time.UTC).UnixMilli()
	report := []mirrorproto.FailoverPartition{
		{Topic: "orders", Partition: 0, DestinationOffset: 10, CutTime: at, CutRecords: 0},
		{Topic: "orders", Partition: 1, DestinationOffset: 7, CutTime: at, CutRecords: 3, CutMs: 400},
	}
	var b bytes.Buffer
	printCut(&b, report)
	want := "Consistent cut at 2026-12-05T12:00:01.3Z (source record time): 2 partition(s) end there.\n" +
		"Beyond the cut, 3 record(s) (up to 400 ms of data, in record time) were moved into the divergence quarantine (--diverged lists them):\n" +
		"  orders-1: 3 record(s), 400 ms\n"
	if b.String() != want {
		t.Fatalf("printCut:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	printCut(&b, []mirrorproto.FailoverPartition{{Topic: "orders"}}) // no cut: nothing said
	if b.Len() != 0 {
		t.Fatalf("printCut without a cut: %q", b.String())
	}

	b.Reset()
	failed := errors.New("mirror m: the source cannot confirm that nothing would be lost")
	if err := printFailoverJSON(&b, report, failed); err != failed {
		t.Fatalf("printFailoverJSON returned %v", err)
	}
	var out struct {
		Partitions []failoverJSON `json:"partitions"`
		Error      *string        `json:"error"`
	}
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Partitions) != 2 || out.Partitions[1].CutRecords != 3 || !out.Partitions[1].CutTime.Equal(time.UnixMilli(at)) ||
		out.Partitions[0].SourceOffsetTime != nil || out.Error == nil || !strings.Contains(*out.Error, "cannot confirm") {
		t.Fatalf("--json: %s", b.String())
	}
}

// TestDivergedTable (issue 41, item 10): --diverged lists ranges in the
// order of the log, whatever order the brokers answered in, and its
// COPIED-TO range is inclusive as OFFSETS is.
func TestDivergedTable(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := func(p int32, first, last, copyStart, copyEnd int64) divergedRange {
		return divergedRange{Topic: "events", Partition: p, FirstOffset: first, LastOffset: last, Records: last - first + 1,
			FirstTimestamp: at, LastTimestamp: at, TruncatedAt: at, Cause: "failback", CopiedTo: "events.diverged/" + string('0'+rune(p)),
			CopyStart: copyStart, CopyEnd: copyEnd}
	}
	ds := []divergedRange{r(2, 10, 19, 0, 10), r(0, 5, 5, 3, 4), r(1, 7, 8, 0, 2), r(0, 1, 2, 0, 2)}
	sortDiverged(ds)
	var buf bytes.Buffer
	if err := printDiverged(&buf, ds); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n")[1:] {
		f := strings.Fields(l)
		got = append(got, f[1]+" "+f[2]+" "+f[len(f)-1])
	}
	want := []string{"0 1-2 events.diverged/0@0-1", "0 5-5 events.diverged/0@3-3", "1 7-8 events.diverged/1@0-1", "2 10-19 events.diverged/2@0-9"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("--diverged rows (partition, offsets, copied to):\n%s\nwant %q", buf.String(), want)
	}
}
