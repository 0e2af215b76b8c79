package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

// part is a partition of the fake run.
type part struct {
	tp       topicPartition
	id       uuid.UUID
	progress Progress
	leader   int32
	trouble  string
}

func (p *part) Name() (topicPartition, uuid.UUID) { return p.tp, p.id }
func (p *part) Progress() *Progress               { return &p.progress }
func (p *part) Leader() int32                     { return p.leader }
func (p *part) ClearTrouble()                     { p.trouble = "" }

// truncation is one Target.Truncate.
type truncation struct {
	to    int64
	cause string
}

// run is the run's side of the stage: one partition's state and real
// log, and what the stage did through Target and Source.
type run struct {
	t     *testing.T
	ep    *engine.Partition
	state mirrorstate.State
	// The source's log start and end, for ListOffsets.
	srcStart, srcEnd int64

	reason    string       // of a FAILED state
	fenced    [][]byte     // the batches of each Fence
	truncated []truncation // each Truncate
	troubled  []error      // each Troubled
	moved     int          // Moved calls
	asked     []int64      // the timestamps ListOffsets was asked for
}

func (r *run) State(*part) mirrorstate.State { return r.state }

func (r *run) Log(*part) (plugin.Log, error) { return r.ep, nil }

// Truncate cuts the log as the run does, without the quarantine (the
// diverged package's, tested there).
func (r *run) Truncate(_ *part, log plugin.Log, to int64, cause string) error {
	r.truncated = append(r.truncated, truncation{to, cause})
	r.moved++
	return log.Truncate(to)
}

func (r *run) Fail(_ *part, err error) error {
	r.state, r.reason = mirrorstate.Failed, err.Error()
	return err
}

func (r *run) Fence(_ *part, batches []byte) error {
	r.state = mirrorstate.EpochFencing
	r.fenced = append(r.fenced, slices.Clone(batches))
	return nil
}

func (r *run) Troubled(p *part, err error) {
	p.trouble = err.Error()
	r.troubled = append(r.troubled, err)
}

func (r *run) Moved() { r.moved++ }

func (r *run) ListOffsets(broker int32, ts int64, parts []*part) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	if broker != 7 {
		return nil, fmt.Errorf("asked broker %d, not the partition's leader 7", broker)
	}
	r.asked = append(r.asked, ts)
	out := map[topicPartition]kmsg.ListOffsetsResponseTopicPartition{}
	for _, p := range parts {
		lp := kmsg.NewListOffsetsResponseTopicPartition()
		lp.Partition, lp.Offset = p.tp.Partition, r.srcEnd
		if ts == -2 {
			lp.Offset = r.srcStart
		}
		out[p.tp] = lp
	}
	return out, nil
}

// refuse is an append validator, as the mirror plugin's is: it refuses
// a batch whose leader epoch is above 3, and any batch once err is set.
type refuse struct{ err error }

func (v *refuse) ValidateAppend(req *engine.AppendRequest) error {
	if v.err != nil {
		return v.err
	}
	for b := req.Records; len(b) >= 61; {
		h, err := engine.ParseBatchHeader(b)
		if err != nil {
			return err
		}
		if h.PartitionLeaderEpoch > 3 {
			return fmt.Errorf("batch leader epoch %d above destination epoch 3: %w", h.PartitionLeaderEpoch, mirrorproto.ErrMirrorLeaderEpochExceeded)
		}
		b = b[12+h.Length:]
	}
	return nil
}

// newStage opens an engine on a temp dir with one MIRRORING partition,
// whose log holds the batches of log (copied as the mirror copies), and
// returns the stage over it with the fake run.
func newStage(t *testing.T, log ...[]byte) (Stage[*part], *run, *part, *refuse) {
	t.Helper()
	v := &refuse{}
	e, err := engine.Open(engine.Config{Dir: t.TempDir(), Validators: []engine.AppendValidator{v}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	id := uuid.UUID{1}
	ep, err := e.Create("t", engine.TopicID(id), 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range log {
		if _, err := ep.Append(context.Background(), &engine.AppendRequest{Topic: "t", TopicID: engine.TopicID(id), Origin: engine.OriginCrossCluster, Records: b, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	r := &run{t: t, ep: ep, state: mirrorstate.Mirroring, srcStart: -1, srcEnd: -1}
	p := &part{tp: topicPartition{Topic: "t", Partition: 0}, id: id, progress: NewProgress(), leader: 7, trouble: "old trouble"}
	s := Stage[*part]{Mu: &sync.Mutex{}, ApplyMu: &sync.Mutex{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Target: r, Source: r}
	return s, r, p, v
}

// answer is a partition's fetch answer of batches with high watermark hw.
func answer(hw int64, batches ...[]byte) *kmsg.FetchResponseTopicPartition {
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.HighWatermark = hw
	rp.RecordBatches = slices.Concat(batches...)
	return &rp
}

// logOf reads the whole log back: its start, and the offsets and values
// of its records.
func logOf(t *testing.T, ep *engine.Partition) (start int64, offsets []int64, values []string) {
	t.Helper()
	offs := ep.Offsets()
	var recs []byte
	for next := offs.LogStart; next < offs.LogEnd; {
		res, err := ep.Fetch(next, 1<<20, engine.ReadUncommitted)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Batches) == 0 {
			t.Fatalf("no batch at %d, log end %d", next, offs.LogEnd)
		}
		for _, b := range res.Batches {
			h, err := engine.ParseBatchHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, b...)
			next = h.BaseOffset + int64(h.LastOffsetDelta) + 1
		}
	}
	offsets, values = recordbatch.Values(t, recs)
	return offs.LogStart, offsets, values
}

// apply applies rp from offset from and waits for the append.
func apply(t *testing.T, s Stage[*part], p *part, from int64, rp *kmsg.FetchResponseTopicPartition) (int, error) {
	t.Helper()
	n, wait, err := s.Apply(context.Background(), p, from, rp)
	if err != nil {
		return n, err
	}
	if wait != nil {
		if err := wait(); err != nil {
			t.Fatalf("wait: %v", err)
		}
	}
	return n, nil
}

func TestApplyAppends(t *testing.T) {
	s, r, p, _ := newStage(t)
	batches := [][]byte{recordbatch.At(0, 1, "a", "b"), recordbatch.At(2, 2, "c")}
	rp := answer(5, batches...)
	n, err := apply(t, s, p, 0, rp)
	if err != nil || n != len(rp.RecordBatches) {
		t.Fatalf("Apply = %d, %v; want %d, nil", n, err, len(rp.RecordBatches))
	}
	start, offsets, values := logOf(t, r.ep)
	if start != 0 || !slices.Equal(offsets, []int64{0, 1, 2}) || !slices.Equal(values, []string{"a", "b", "c"}) {
		t.Fatalf("log from %d: offsets %v, values %v", start, offsets, values)
	}
	if e := r.ep.EpochAt(2); e != 2 {
		t.Fatalf("epoch at 2 = %d, want the source's 2", e)
	}
	pr := p.progress
	if pr.SrcEnd != 5 || pr.DstLEO != 3 || pr.LagMs != -1 || !pr.CaughtUpAt.IsZero() || pr.SrcEndAt.IsZero() || p.trouble != "" {
		t.Fatalf("behind the source: %+v, trouble %q", pr, p.trouble)
	}

	// The rest, and the source's end is ours: caught up as of when it
	// was learned.
	if _, err := apply(t, s, p, 3, answer(5, recordbatch.At(3, 2, "d", "e"))); err != nil {
		t.Fatal(err)
	}
	_, offsets, values = logOf(t, r.ep)
	if !slices.Equal(offsets, []int64{0, 1, 2, 3, 4}) || !slices.Equal(values, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("log: offsets %v, values %v", offsets, values)
	}
	pr = p.progress
	if pr.SrcEnd != 5 || pr.DstLEO != 5 || pr.LagMs != 0 || !pr.CaughtUpAt.Equal(pr.SrcEndAt) {
		t.Fatalf("caught up: %+v", pr)
	}

	// An answer from an offset the log does not end at (an append before
	// it failed) is refused: appending it would leave a hole.
	if _, err := apply(t, s, p, 7, answer(9, recordbatch.At(7, 2, "h"))); !errors.Is(err, engine.ErrUnexpectedAppendOffset) {
		t.Fatalf("answer from 7 with the log ending at 5: %v", err)
	}
	if end := r.ep.Offsets().LogEnd; end != 5 || r.state != mirrorstate.Mirroring {
		t.Fatalf("after the refused answer: log end %d, %s", end, r.state)
	}

	// An empty answer records the source's end and ours.
	if n, err := apply(t, s, p, 5, answer(8)); n != 0 || err != nil {
		t.Fatalf("empty answer: %d, %v", n, err)
	}
	if pr := p.progress; pr.SrcEnd != 8 || pr.DstLEO != 5 || pr.LagMs != -1 {
		t.Fatalf("after an empty answer: %+v", pr)
	}
}

// TestApplyNotMirroring: a partition taken from the fetcher meanwhile
// (paused, stopping, led elsewhere) is not written.
func TestApplyNotMirroring(t *testing.T) {
	s, r, p, _ := newStage(t)
	r.state = mirrorstate.Stopping
	n, wait, err := s.Apply(context.Background(), p, 0, answer(1, recordbatch.At(0, 1, "a")))
	if n != 0 || wait != nil || err != nil {
		t.Fatalf("Apply = %d, %v, %v", n, wait != nil, err)
	}
	if end := r.ep.Offsets().LogEnd; end != 0 || p.progress.SrcEnd != -1 {
		t.Fatalf("log end %d, progress %+v", end, p.progress)
	}
}

func TestApplyDivergingEpoch(t *testing.T) {
	// Ours: epoch 1 at 0-1, epoch 2 at 2-3, epoch 3 at 4.
	s, r, p, _ := newStage(t, recordbatch.At(0, 1, "a"), recordbatch.At(1, 1, "b"), recordbatch.At(2, 2, "c"), recordbatch.At(3, 2, "d"), recordbatch.At(4, 3, "e"))

	// The source's epoch 2 ends at 3: truncated there, not to our end of
	// epoch 2 (4).
	rp := answer(6)
	rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = 2, 3
	if n, err := apply(t, s, p, 5, rp); n != 0 || err != nil {
		t.Fatalf("Apply = %d, %v", n, err)
	}
	_, offsets, values := logOf(t, r.ep)
	if !slices.Equal(offsets, []int64{0, 1, 2}) || !slices.Equal(values, []string{"a", "b", "c"}) {
		t.Fatalf("after the truncation: offsets %v, values %v", offsets, values)
	}
	if want := []truncation{{3, "diverging epoch 2"}}; !slices.Equal(r.truncated, want) {
		t.Fatalf("truncations %v, want %v", r.truncated, want)
	}

	// The source's epoch 1 goes on past where ours ends (2): cut at ours.
	rp = answer(6)
	rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = 1, 4
	if _, err := apply(t, s, p, 3, rp); err != nil {
		t.Fatal(err)
	}
	if _, offsets, values = logOf(t, r.ep); !slices.Equal(values, []string{"a", "b"}) {
		t.Fatalf("after the second truncation: offsets %v, values %v", offsets, values)
	}
	if r.truncated[1] != (truncation{2, "diverging epoch 1"}) || r.state != mirrorstate.Mirroring {
		t.Fatalf("truncations %v, %s", r.truncated, r.state)
	}
	if p.progress.SrcEnd != 6 {
		t.Fatalf("source end %d, want the answer's 6", p.progress.SrcEnd)
	}
}

func TestApplyOutOfRange(t *testing.T) {
	s, r, p, _ := newStage(t, recordbatch.At(0, 1, "a", "b"))

	// Retention moved the source's start (5) past our end (2): the log
	// is emptied, and the next answer, from there, restarts it.
	r.srcStart, r.srcEnd = 5, 9
	rp := answer(-1)
	rp.ErrorCode = kerr.OffsetOutOfRange.Code
	if n, err := apply(t, s, p, 2, rp); n != 0 || err != nil {
		t.Fatalf("Apply = %d, %v", n, err)
	}
	if offs := r.ep.Offsets(); offs.LogEnd != 0 || p.progress.LogStartTo != 5 || r.moved != 1 || !slices.Equal(r.asked, []int64{-2, -1}) {
		t.Fatalf("after OFFSET_OUT_OF_RANGE: offsets %+v, progress %+v, moved %d, asked %v", offs, p.progress, r.moved, r.asked)
	}
	if _, err := apply(t, s, p, 5, answer(9, recordbatch.At(5, 1, "f"), recordbatch.At(6, 1, "g"))); err != nil {
		t.Fatal(err)
	}
	start, offsets, values := logOf(t, r.ep)
	if start != 5 || !slices.Equal(offsets, []int64{5, 6}) || !slices.Equal(values, []string{"f", "g"}) || p.progress.LogStartTo != -1 {
		t.Fatalf("restarted log from %d: offsets %v, values %v, progress %+v", start, offsets, values, p.progress)
	}

	// An unclean election on the source lost records: its end (6) is
	// below ours (7), and the log is cut there.
	r.srcStart, r.srcEnd = 0, 6
	if _, err := apply(t, s, p, 7, rp); err != nil {
		t.Fatal(err)
	}
	if _, offsets, values = logOf(t, r.ep); !slices.Equal(offsets, []int64{5}) || !slices.Equal(values, []string{"f"}) {
		t.Fatalf("cut to the source's end: offsets %v, values %v", offsets, values)
	}
	if want := (truncation{6, "the source's log ends earlier"}); len(r.truncated) != 1 || r.truncated[0] != want {
		t.Fatalf("truncations %v, want %v", r.truncated, want)
	}
}

func TestApplyRefused(t *testing.T) {
	s, r, p, v := newStage(t, recordbatch.At(0, 1, "a"))

	// A batch above the destination's epoch fences the partition; the
	// log keeps what it had.
	above := recordbatch.At(1, 5, "b")
	if _, err := apply(t, s, p, 1, answer(2, above)); err != nil {
		t.Fatal(err)
	}
	if r.state != mirrorstate.EpochFencing || len(r.fenced) != 1 || !bytes.Equal(r.fenced[0], above) {
		t.Fatalf("%s, fenced with %d answers", r.state, len(r.fenced))
	}
	if _, _, values := logOf(t, r.ep); !slices.Equal(values, []string{"a"}) {
		t.Fatalf("log after the fence: %v", values)
	}

	// Any other refusal fails the partition.
	r.state = mirrorstate.Mirroring
	v.err = errors.New("disk full")
	if _, err := apply(t, s, p, 1, answer(2, recordbatch.At(1, 1, "b"))); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Apply: %v", err)
	}
	if r.state != mirrorstate.Failed || r.reason != "append mirrored batches: disk full" {
		t.Fatalf("%s (%q)", r.state, r.reason)
	}
	if _, _, values := logOf(t, r.ep); !slices.Equal(values, []string{"a"}) {
		t.Fatalf("log after the refusal: %v", values)
	}
}

// TestApplySourceError: a partition the source answers with an error is
// troubled, not written.
func TestApplySourceError(t *testing.T) {
	s, r, p, _ := newStage(t)
	rp := answer(-1, recordbatch.At(0, 1, "a"))
	rp.ErrorCode = kerr.NotLeaderForPartition.Code
	if _, err := apply(t, s, p, 0, rp); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("Apply: %v", err)
	}
	if len(r.troubled) != 1 || p.trouble != "source partition: "+kerr.NotLeaderForPartition.Error() || r.ep.Offsets().LogEnd != 0 {
		t.Fatalf("troubled %v (%q), log end %d", r.troubled, p.trouble, r.ep.Offsets().LogEnd)
	}
}
