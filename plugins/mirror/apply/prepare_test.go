package apply

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

// prepareLog is a PREPARING partition whose log holds epoch 1 at 0-1,
// epoch 2 at 2-3 and epoch 3 at 4.
func prepareLog(t *testing.T) (Stage[*part], *run, *part) {
	t.Helper()
	s, r, p, _ := newStage(t, recordbatch.At(0, 1, "a"), recordbatch.At(1, 1, "b"), recordbatch.At(2, 2, "c"), recordbatch.At(3, 2, "d"), recordbatch.At(4, 3, "e"))
	r.state = mirrorstate.Preparing
	return s, r, p
}

func TestTruncateToLME(t *testing.T) {
	for _, tc := range []struct {
		lme    int32
		values []string
		cut    []truncation
	}{
		{-1, nil, []truncation{{0, "last mirror epoch -1"}}},                        // never mirrored there: everything
		{1, []string{"a", "b"}, []truncation{{2, "last mirror epoch 1"}}},           // at the start of epoch 2
		{2, []string{"a", "b", "c", "d"}, []truncation{{4, "last mirror epoch 2"}}}, // at the start of epoch 3
		{3, []string{"a", "b", "c", "d", "e"}, nil},                                 // our last epoch: nothing to cut
		// Above every epoch of ours, EndOffsetForEpoch knows no end (as
		// Kafka's OffsetForLeaderEpoch answers UNDEFINED): cut whole, as for -1.
		{7, nil, []truncation{{0, "last mirror epoch 7"}}},
	} {
		s, r, p := prepareLog(t)
		waits := 0
		done, err := s.TruncateToLME(context.Background(), p, tc.lme, func(ctx context.Context) error {
			waits++
			if _, ok := ctx.Deadline(); !ok {
				t.Errorf("lme %d: the ISR wait has no deadline", tc.lme)
			}
			if !s.ApplyMu.TryLock() {
				t.Errorf("lme %d: the ISR is waited for with ApplyMu held", tc.lme)
			} else {
				s.ApplyMu.Unlock()
			}
			return nil
		})
		if !done || err != nil || waits != 1 {
			t.Fatalf("lme %d: done %v, %v, %d ISR waits", tc.lme, done, err, waits)
		}
		if _, _, values := logOf(t, r.ep); !slices.Equal(values, tc.values) {
			t.Errorf("lme %d: log %v, want %v", tc.lme, values, tc.values)
		}
		if !slices.Equal(r.truncated, tc.cut) {
			t.Errorf("lme %d: truncations %v, want %v", tc.lme, r.truncated, tc.cut)
		}
	}
}

// TestTruncateToLMEMoved: a partition that is not PREPARING, or leaves
// it while the ISR truncates, is not done; an ISR that does not truncate
// in time leaves it PREPARING, to be tried again.
func TestTruncateToLMEMoved(t *testing.T) {
	s, r, p := prepareLog(t)
	r.state = mirrorstate.Paused
	noWait := func(context.Context) error { t.Error("ISR waited for"); return nil }
	if done, err := s.TruncateToLME(context.Background(), p, -1, noWait); done || err != nil || r.ep.Offsets().LogEnd != 5 {
		t.Fatalf("PAUSED: done %v, %v, log end %d", done, err, r.ep.Offsets().LogEnd)
	}

	r.state = mirrorstate.Preparing
	done, err := s.TruncateToLME(context.Background(), p, 2, func(context.Context) error {
		r.state = mirrorstate.Stopping
		return nil
	})
	if done || err != nil || r.ep.Offsets().LogEnd != 4 {
		t.Fatalf("stopped while the ISR truncated: done %v, %v, log end %d", done, err, r.ep.Offsets().LogEnd)
	}

	r.state = mirrorstate.Preparing
	slow := errors.New("follower 3 has not truncated")
	done, err = s.TruncateToLME(context.Background(), p, 1, func(context.Context) error { return slow })
	if done || !errors.Is(err, slow) || r.ep.Offsets().LogEnd != 2 || r.state != mirrorstate.Preparing {
		t.Fatalf("ISR not truncated: done %v, %v, log end %d, %s", done, err, r.ep.Offsets().LogEnd, r.state)
	}

	// Without a replica convergence host, the truncation alone.
	if done, err := s.TruncateToLME(context.Background(), p, -1, nil); !done || err != nil || r.ep.Offsets().LogEnd != 0 {
		t.Fatalf("no ISR wait: done %v, %v, log end %d", done, err, r.ep.Offsets().LogEnd)
	}
}
